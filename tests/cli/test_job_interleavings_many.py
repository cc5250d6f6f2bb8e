"""The slow lane's run of tests/unit/test_job_interleavings.py: the same state machine of node
0's coordinator and its nodes, 2,000 interleavings instead of the fast lane's 200
(MARUN_PROPERTY_EXAMPLES_SLOW sets the count). No process is started: it is here for its time
(about a minute), not for what it runs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "unit"))

from test_job_interleavings import run_interleavings


def test_the_coordinator_in_thousands_of_interleavings() -> None:
    run_interleavings(int(os.environ.get("MARUN_PROPERTY_EXAMPLES_SLOW", "2000")), steps=40)
