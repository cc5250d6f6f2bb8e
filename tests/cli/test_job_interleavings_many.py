"""The slow lane's run of the interleavings: the same state machines as the fast lane's
(tests/unit/test_job_machine_interleavings.py, node 0's job machine alone over a fake network;
tests/unit/test_job_interleavings.py, through the real coordinator's port;
tests/unit/test_job_whole_interleavings.py, the whole job as its three pure machines, without
and with a hot spare, and with liveness hubs;
tests/unit/test_local_job_interleavings.py, a job of one node through its in-process job),
2,000 interleavings of the first two and 1,000 of the others, instead of 200
(MARUN_PROPERTY_EXAMPLES_SLOW sets the count). No process is started: it is here for its time
(about two minutes and a half), not for what it runs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "unit"))

from test_job_interleavings import run_interleavings
from test_job_machine_interleavings import run_machine_interleavings
from test_job_whole_interleavings import (
    run_whole_job,
    run_whole_job_with_hubs,
    run_whole_job_with_spares,
)
from test_local_job_interleavings import OneNodeJob

EXAMPLES = int(os.environ.get("MARUN_PROPERTY_EXAMPLES_SLOW", "2000"))


def test_the_job_machine_in_thousands_of_interleavings() -> None:
    run_machine_interleavings(EXAMPLES, steps=40)


def test_the_coordinator_in_thousands_of_interleavings() -> None:
    run_interleavings(EXAMPLES, steps=40)


def test_the_whole_job_in_a_thousand_interleavings() -> None:
    run_whole_job(EXAMPLES // 2, steps=40)


def test_a_job_of_one_node_in_a_thousand_interleavings() -> None:
    run_interleavings(EXAMPLES // 2, steps=40, machine=OneNodeJob)


def test_the_whole_job_with_a_spare_in_a_thousand_interleavings() -> None:
    run_whole_job_with_spares(EXAMPLES // 2, steps=40)


def test_the_whole_job_with_liveness_hubs_in_a_thousand_interleavings() -> None:
    run_whole_job_with_hubs(EXAMPLES // 2, steps=40)
