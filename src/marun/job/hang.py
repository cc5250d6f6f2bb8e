"""The hang watchdog's judgement (node 0's coordinator asks it every tick): is a job whose
ranks have been silent for hang_timeout hung, or quietly working?

Silence is where it starts, never the whole case:
1. The ranks' CPU time (each node's heartbeat carries its ranks' total, marun.job.cputime):
   if it did not advance over the silent time (from the first heartbeat inside it: what the
   ranks did before their last line is not counted), nothing runs: hung.
2. If it did (a CPU loop that prints nothing, or a native thread that spins while the Python
   thread waits): two samples of every rank's stacks (py-spy), SAMPLE_GAP apart. The same on
   every rank and no Python thread on CPU in either (py-spy marks each thread active or idle):
   the Python side waits in place while something native spins, hung. Otherwise (stacks that
   change, or a Python thread that is active: a silent loop in train_step looks the same twice
   when it spins on one line) it is working; logged, and judged again a hang_timeout later.
3. Without py-spy there is nothing to compare: a busy, silent job is not stopped (logged).
   Without CPU figures (no /proc) the watchdog judges on silence alone, and says so.
The reason goes into the job's first failure (every node prints it; job.json keeps it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

IDLE_CPU = 0.05  # CPU seconds per second per node below which a node's ranks count as idle
SAMPLE_GAP = 5.0  # seconds between the two stack samples
STACKS_WAIT = 15.0  # seconds to wait for every node's stacks
MISSING_MARK = "py-spy is not installed"
ACTIVE_MARK = "(active"  # py-spy dump: `Thread 12 (active): "MainThread"`, or (idle)


class History(Protocol):
    """(monotonic, CPU seconds) figures, oldest first (marun.job.roster.CpuHistory, a deque)."""

    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[tuple[float, float]]: ...
    def __getitem__(self, index: int) -> tuple[float, float]: ...


class Node(Protocol):
    node: int
    slot: int
    host: str
    stacks: str | None

    @property
    def cpu_history(self) -> History: ...


NOT_YET = -1.0  # cpu_used: fewer than two figures since the silence began (judged later)


def cpu_used(nodes: Sequence[Node], now: float, window: float) -> float | None:
    """CPU seconds the nodes' ranks used in the silence, the last `window` seconds: from each
    node's first heartbeat figure inside it to its last. None when a node gives no figures at all
    (no /proc); NOT_YET when a node has fewer than two inside it yet. A figure from before the
    silence never counts: what the ranks did up to their last line (an MPI barrier that
    busy-polls while its slowest peer arrives, imports under load) is not the silence's."""
    total = 0.0
    for node in nodes:
        history = node.cpu_history
        if len(history) < 2:
            return None
        inside = [(t, c) for t, c in history if t >= now - window]
        if len(inside) < 2:
            return NOT_YET
        total += max(0.0, inside[-1][1] - inside[0][1])
    return total


class HangJudge:
    def __init__(
        self,
        limit: float,
        ask_stacks: Callable[[bool], None],
        log: Callable[..., None],
    ) -> None:
        self.limit = limit
        self._ask = ask_stacks  # (sample) -> every node dumps its ranks' stacks
        self._log = log
        self._state = "watch"  # watch, first, gap, second, rest
        self._since = 0.0
        self._first: dict[tuple[int, int], str] = {}
        self._said_busy = False

    def tick(self, nodes: Sequence[Node], idle: float, now: float) -> str | None:
        """The reason the job is hung, or None (yet)."""
        if idle < self.limit:
            self._state, self._said_busy = "watch", False
            return None
        if self._state == "watch":
            used = cpu_used(nodes, now, idle)
            head = f"hang: no rank of the job wrote a line for {self.limit:g}s"
            if used is None:
                return f"{head} (no CPU figures from every node: judged on silence alone)"
            if used == NOT_YET:
                return None  # two heartbeats into the silence first
            if used < IDLE_CPU * idle * len(nodes):
                return f"{head}, and its ranks used {used:.1f}s of CPU in that time: nothing runs"
            self._busy = used
            self._sample(nodes, now, "first")
            return None
        got = all(n.stacks is not None for n in nodes) or now - self._since >= STACKS_WAIT
        if self._state == "first" and got:
            stacks = {(n.node, n.slot): n.stacks or "" for n in nodes}
            if any(MISSING_MARK in s or not s for s in stacks.values()):
                self._quiet_but_busy("no stacks to compare (py-spy missing)", now)
            else:
                self._first, self._state, self._since = stacks, "gap", now
        elif self._state == "gap" and now - self._since >= SAMPLE_GAP:
            self._sample(nodes, now, "second")
        elif self._state == "second" and got:
            same = all(self._first.get((n.node, n.slot)) == n.stacks for n in nodes)
            active = any(ACTIVE_MARK in (s or "") for s in [*self._first.values()] + [
                n.stacks for n in nodes
            ])  # fmt: skip
            if same and not active:
                return (
                    f"hang: no rank of the job wrote a line for {self.limit:g}s; its ranks used "
                    f"{self._busy:.1f}s of CPU, but every rank's Python threads waited, idle, in "
                    f"the same place {SAMPLE_GAP:g}s apart: stuck, with something native spinning"
                )
            self._quiet_but_busy(
                "a Python thread is on CPU" if active else "the ranks' stacks change", now
            )
        elif self._state == "rest" and now - self._since >= self.limit:
            self._state = "watch"  # judge again
        return None

    def _sample(self, nodes: Sequence[Node], now: float, state: str) -> None:
        for n in nodes:
            n.stacks = None
        self._state, self._since = state, now
        self._ask(True)

    def _quiet_but_busy(self, why: str, now: float) -> None:
        self._state, self._since = "rest", now
        if not self._said_busy:
            self._said_busy = True
            self._log(
                "job_quiet_but_busy",
                "warning",
                silent_seconds=self.limit,
                cpu_seconds=round(self._busy, 1),
                judged="not hung: " + why,
            )

    _busy: float = 0.0


def describe_stacks(nodes: Sequence[Any]) -> str:
    return "".join(
        f"--- node {m.node} slot {m.slot} ({m.host})\n{m.stacks or '(no stacks)'}\n"
        for m in sorted(nodes, key=lambda m: (m.node, m.slot))
    )
