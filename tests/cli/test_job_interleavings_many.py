"""The slow lane's run of the interleavings: the same state machines as the fast lane's
(tests/unit/test_job_machine_interleavings.py, node 0's job machine alone over a fake network;
tests/unit/test_job_interleavings.py, through the real coordinator's port), 2,000 interleavings
each instead of 200 (MARUN_PROPERTY_EXAMPLES_SLOW sets the count). No process is started: it is
here for its time (about a minute and a half), not for what it runs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "unit"))

from test_job_interleavings import run_interleavings
from test_job_machine_interleavings import run_machine_interleavings

EXAMPLES = int(os.environ.get("MARUN_PROPERTY_EXAMPLES_SLOW", "2000"))


def test_the_job_machine_in_thousands_of_interleavings() -> None:
    run_machine_interleavings(EXAMPLES, steps=40)


def test_the_coordinator_in_thousands_of_interleavings() -> None:
    run_interleavings(EXAMPLES, steps=40)
