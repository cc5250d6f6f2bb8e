"""The job's promises as scenario tables (tests/data/job_scenarios/*.txt, the format at the top
of each file), in the way etcd's raft keeps its testdata: each scenario drives node 0's real
job machine alone over a fake network (tests/unit/test_job_machine_interleavings.py), and again
through the real coordinator's port (tests/unit/test_job_interleavings.py), with three nodes
modelled on the wire and a fake clock; it checks the harness's invariants after every step, and
its own expectations where it says `expect`."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from test_job_interleavings import JOB, JobInterleavings
from test_job_machine_interleavings import MachineInterleavings

SCENARIOS = Path(__file__).resolve().parent.parent / "data" / "job_scenarios"


def _load() -> list[tuple[str, list[str]]]:
    found: list[tuple[str, list[str]]] = []
    for path in sorted(SCENARIOS.glob("*.txt")):
        for raw in path.read_text().splitlines():
            line = raw.split("#", 1)[0].strip()
            if line.startswith("scenario "):
                found.append((f"{path.stem}: {line[9:]}", []))
            elif line:
                found[-1][1].append(line)
    return found


ALL = _load()


def _check(job: JobInterleavings) -> None:
    job.nothing_raised()
    job.rounds_within_the_budget()
    job.a_stop_signal_ends_the_job_and_starts_no_round()
    job.strangers_are_never_members()


def _expect(job: JobInterleavings, words: list[str]) -> None:
    coordinator = job.job
    what = words[0]
    if what == "phase":
        assert coordinator.phase.value == words[1]
    elif what == "rounds":
        assert len(coordinator.rounds) == int(words[1])
    elif what == "stopped":
        assert coordinator.stopped is not None and coordinator.stopped.code == int(words[1])
    elif what == "not":
        assert coordinator.stopped is None
    elif what == "exit":
        assert coordinator.exit_code == int(words[1])
        for node in job.nodes:
            if node.alive and node.done_code is not None:
                assert node.done_code == int(words[1])
    elif what == "member":
        member = coordinator.members.get((int(words[1]), 0))
        state = "absent" if member is None else member.outcome or "present"
        assert state == words[2]
    elif what == "node":
        assert job.nodes[int(words[1])].phase == words[2]
    else:
        raise ValueError(f"unknown expectation {' '.join(words)!r}")


def _step(job: JobInterleavings, words: list[str]) -> None:
    verb, args = words[0], words[1:]
    if verb == "arrive":
        for index in args:
            job.start_a_marun(int(index), new=False)
    elif verb == "replace":
        job.start_a_marun(int(args[0]), new=True)
    elif verb == "exit":
        job.a_rank_exits(int(args[0]), int(args[1]))
    elif verb == "signal":
        job.a_stop_signal(int(args[0]), int(signal.Signals[args[1]]))
    elif verb in ("drop", "freeze", "resume", "kill"):
        getattr(job, {"drop": "a_connection_drops"}.get(verb, verb))(int(args[0]))
    elif verb == "stranger":
        job.a_stranger_says_hello(JOB if args[0] == "this" else args[0], int(args[1]))
    elif verb == "time":
        job._advance(float(args[0]))
    elif verb == "end":
        job.run_to_the_end()
    else:
        raise ValueError(f"unknown step {' '.join(words)!r}")


# Each scenario against node 0's job machine alone over a fake network (`machine`), and through
# the real shell (the coordinator's port, signed lines over socket pairs: `shell`).
HARNESSES = {"machine": MachineInterleavings, "shell": JobInterleavings}


@pytest.mark.parametrize("harness", sorted(HARNESSES))
@pytest.mark.parametrize(("name", "lines"), ALL, ids=[name for name, _ in ALL])
def test_scenario(name: str, lines: list[str], harness: str) -> None:
    job = HARNESSES[harness]()
    try:
        budget = 0
        steps = list(lines)
        if steps and steps[0].startswith("max_restarts "):
            budget = int(steps.pop(0).split()[1])
        job.make_job(budget)
        for number, line in enumerate(steps, 1):
            words = line.split()
            try:
                if words[0] == "expect":
                    _expect(job, words[1:])
                else:
                    _step(job, words)
                    _check(job)
            except AssertionError as exc:
                raise AssertionError(f"{name}, step {number} ({line}): {exc}") from exc
    finally:
        job.close()


def test_there_are_scenarios() -> None:
    assert len(ALL) >= 15
