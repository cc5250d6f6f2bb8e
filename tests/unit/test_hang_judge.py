"""The hang watchdog's judgement (marun.job.hang) on given figures: silence alone never decides
where CPU figures exist; idle CPU is a hang; busy CPU is a hang only when every rank's stacks
stay the same between two samples. Time is passed in: nothing sleeps."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from marun.job.hang import SAMPLE_GAP, HangJudge


@dataclass
class FakeNode:
    node: int
    slot: int = 0
    host: str = "h"
    stacks: str | None = None
    cpu_history: deque[tuple[float, float]] = field(default_factory=deque)


class Asked:
    def __init__(self) -> None:
        self.samples = 0
        self.logged: list[tuple[str, dict[str, object]]] = []

    def ask(self, sample: bool) -> None:
        assert sample
        self.samples += 1

    def log(self, event: str, level: str = "info", **fields: object) -> None:
        self.logged.append((event, fields))


def nodes_with_cpu(per_second: float, seconds: int = 12) -> list[FakeNode]:
    made = [FakeNode(i) for i in range(2)]
    for n in made:
        n.cpu_history.extend((float(t), per_second * t) for t in range(seconds + 1))
    return made


def test_talking_is_never_hung() -> None:
    asked = Asked()
    judge = HangJudge(10, asked.ask, asked.log)
    assert judge.tick(nodes_with_cpu(0.0), idle=3, now=12) is None
    assert asked.samples == 0


def test_silent_and_idle_is_hung_saying_so() -> None:
    judge = HangJudge(10, Asked().ask, Asked().log)
    why = judge.tick(nodes_with_cpu(0.0), idle=10, now=12)
    assert why is not None and "used 0.0s of CPU in that time: nothing runs" in why


def test_without_cpu_figures_silence_decides_and_says_so() -> None:
    judge = HangJudge(10, Asked().ask, Asked().log)
    why = judge.tick([FakeNode(0)], idle=10, now=12)
    assert why is not None and "judged on silence alone" in why


def run_samples(first: list[str], second: list[str]) -> tuple[str | None, Asked]:
    asked = Asked()
    judge = HangJudge(10, asked.ask, asked.log)
    nodes = nodes_with_cpu(2.0)
    now = 12.0
    assert judge.tick(nodes, idle=10, now=now) is None  # busy: a first sample asked
    for n, text in zip(nodes, first):
        n.stacks = text
    assert judge.tick(nodes, idle=11, now=now + 1) is None
    assert judge.tick(nodes, idle=11 + SAMPLE_GAP, now=now + 1 + SAMPLE_GAP) is None
    assert asked.samples == 2
    for n, text in zip(nodes, second):
        n.stacks = text
    return judge.tick(nodes, idle=12 + SAMPLE_GAP, now=now + 2 + SAMPLE_GAP), asked


def test_busy_with_stacks_that_change_is_working() -> None:
    why, asked = run_samples(["train_step:10", "train_step:10"], ["train_step:12", "step:10"])
    assert why is None
    assert asked.logged[0][0] == "job_quiet_but_busy"
    assert "stacks change" in str(asked.logged[0][1]["judged"])


IDLE_WAIT = 'Thread 1 (idle): "MainThread"\n    synchronize (cuda.py:5)'
BUSY_LOOP = 'Thread 1 (active): "MainThread"\n    train_step (train.py:7)'


def test_busy_with_idle_python_threads_in_the_same_place_is_stuck() -> None:
    why, _ = run_samples([IDLE_WAIT, IDLE_WAIT], [IDLE_WAIT, IDLE_WAIT])
    assert why is not None and "in the same place" in why and "native spinning" in why


def test_a_silent_loop_sampled_on_the_same_line_twice_is_working() -> None:
    """The issue's false alarm: a CPU loop in train_step whose samples happen to agree."""
    why, asked = run_samples([BUSY_LOOP, BUSY_LOOP], [BUSY_LOOP, BUSY_LOOP])
    assert why is None
    assert "a Python thread is on CPU" in str(asked.logged[0][1]["judged"])


def test_busy_without_py_spy_is_left_alone() -> None:
    asked = Asked()
    judge = HangJudge(10, asked.ask, asked.log)
    nodes = nodes_with_cpu(2.0)
    assert judge.tick(nodes, idle=10, now=12) is None
    for n in nodes:
        n.stacks = "rank0: py-spy is not installed: no stacks"
    assert judge.tick(nodes, idle=11, now=13) is None
    assert "py-spy missing" in str(asked.logged[0][1]["judged"])
    assert judge.tick(nodes, idle=30, now=30) is None  # resting: judged again a limit later


def test_cpu_spent_before_the_silence_does_not_count() -> None:
    """The ranks spun in a barrier (MPI busy-polls) until their last line, then slept: the
    silence is idle, whatever came before it (an MPI job under load flaked on this)."""
    judge = HangJudge(6, Asked().ask, Asked().log)
    nodes = [FakeNode(0)]
    busy_until = 11  # the last line: t=11; 0.9 s of CPU a second up to it, none after
    for t in range(0, 18):
        nodes[0].cpu_history.append((float(t), 0.9 * min(t, busy_until)))
    why = judge.tick(nodes, idle=6, now=17)
    assert why is not None and "used 0.0s of CPU in that time: nothing runs" in why


def test_a_verdict_waits_for_two_figures_inside_the_silence() -> None:
    judge = HangJudge(6, Asked().ask, Asked().log)
    nodes = [FakeNode(0)]
    nodes[0].cpu_history.extend([(0.0, 0.0), (5.0, 4.0), (11.5, 4.0)])  # one inside [6, 12]
    assert judge.tick(nodes, idle=6, now=12) is None
    nodes[0].cpu_history.append((12.5, 4.0))
    why = judge.tick(nodes, idle=7, now=13)
    assert why is not None and "nothing runs" in why
