"""Node 0's view of the job's progress, from every node's `NodeReport`: the status line, the
`progress` section of job.json, the stragglers, and the verdict that the steps stopped while
the ranks print on (`--progress-timeout`). Pure: the caller passes the time (its monotonic
clock) and the reports; nothing here reads a clock, a socket or a thread.

- The job's step is the ranks' median step, its rate their median rate, its total the largest
  total a rank printed; the time left is (total - step) / rate.
- A straggler: a rank whose rate stays below `STRAGGLER_FRACTION` of the median rate for
  `STRAGGLER_WINDOW` seconds (three ranks with a rate at least, and a median above 0).
- The status line: at most every `STATUS_EVERY` seconds while the step moves, at once on a
  change worth saying (the first progress, a straggler named or back to speed, the total
  reached), never when nothing moved.
- Stalled: progress was seen, no rank's step has moved for `progress_timeout` seconds, and a
  line came from a rank within that time (a silent job is the hang watchdog's, not this).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from marun.progress.tracker import NodeReport

STATUS_EVERY = 10.0  # seconds between two status lines at most (unless a change is worth it)
STRAGGLER_FRACTION = 0.5  # of the median rate
STRAGGLER_WINDOW = 60.0  # seconds a rank stays that slow before it is named
SLOWEST_KEPT = 5  # ranks named in job.json's `slowest`
# Node 0 hears 8,192 reports a second at 1,024 x 8 with a beat a second: a report costs its own
# ranks only; the walks over every rank (the stragglers' judgement, the status line) run at most
# this often (bench/coordination.py --progress).
LOOK_EVERY = 1.0


@dataclass
class _Rank:
    node: int
    slot: int  # the marun of its node that reports it (Ascend per device: one per device)
    step: float
    total: int | None
    rate: float | None
    moved_at: float  # node 0's time when its step last changed
    slow_since: float | None = None


@dataclass(frozen=True)
class Straggler:
    rank: int
    node: int
    rate: float
    median_rate: float
    slow_for: float  # seconds below the fraction

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "node": self.node,
            "rate": round(self.rate, 4),
            "median_rate": round(self.median_rate, 4),
            "slow_for": round(self.slow_for, 1),
        }

    def say(self, unit: str) -> str:
        return (
            f"straggler: rank {self.rank} (node {self.node}) at {_rate(self.rate)} {unit}/s, "
            f"below {STRAGGLER_FRACTION:g} x the median {_rate(self.median_rate)} {unit}/s "
            f"for {self.slow_for:.0f}s"
        )


class Aggregator:
    """The job's progress on node 0. `add` each node's report as it comes (None: the node has
    none; `slot`: which of the node's maruns sent it, where a node runs several); `status`,
    `section`, `stragglers`, `stalled` whenever asked."""

    def __init__(self, progress_timeout: float | None = None) -> None:
        self._timeout = progress_timeout
        self._ranks: dict[int, _Rank] = {}
        self._left_out: dict[tuple[int, int], int] = {}  # (node, slot) -> ranks left out
        self._unit = "steps"
        self._said_at: float | None = None
        self._said_step: float | None = None
        self._said_named: frozenset[int] = frozenset()
        self._said_done = False
        self._moved_at: float | None = None  # the job's latest step change
        self._by_source: dict[tuple[int, int], set[int]] = {}  # (node, slot) -> its ranks
        self._judged_at: float | None = None
        self._looked_at: float | None = None  # status(): the last full look

    def add(self, node: int, report: NodeReport | None, now: float, slot: int = 0) -> None:
        if report is None:
            return
        self._unit = report.unit
        source = (node, slot)
        self._left_out[source] = report.more
        seen: set[int] = set()
        for rank in report.ranks:
            seen.add(rank.rank)
            old = self._ranks.get(rank.rank)
            moved = old is None or old.step != rank.step or old.node != node
            entry = _Rank(node, slot, rank.step, rank.total, rank.rate, now)
            if old is not None and old.node == node:
                entry.slow_since = old.slow_since
                entry.moved_at = now if moved else old.moved_at
            if old is not None and (old.node, old.slot) != source:
                self._by_source.get((old.node, old.slot), set()).discard(rank.rank)
            self._ranks[rank.rank] = entry
            if moved:
                self._moved_at = now
        for gone in self._by_source.get(source, set()) - seen:
            self._ranks.pop(gone, None)  # left out of this node's report (faster than those sent)
        self._by_source[source] = seen

    def _judge(self, now: float) -> None:
        """Each rank's `slow_since`: set while its rate is below the fraction of the median."""
        self._judged_at = now
        median = self._median_rate()
        for entry in self._ranks.values():
            slow = (
                median is not None
                and entry.rate is not None
                and entry.rate < STRAGGLER_FRACTION * median
            )
            if not slow:
                entry.slow_since = None
            elif entry.slow_since is None:
                entry.slow_since = now

    def _median_rate(self) -> float | None:
        rates = [e.rate for e in self._ranks.values() if e.rate is not None]
        if len(rates) < 3:
            return None
        median = statistics.median(rates)
        return median if median > 0 else None

    def stragglers(self, now: float) -> list[Straggler]:
        if self._judged_at is None or now - self._judged_at >= LOOK_EVERY:
            self._judge(now)  # (a walk over every rank: once a second at most)
        median = self._median_rate()
        if median is None:
            return []
        return [
            Straggler(rank, e.node, e.rate or 0.0, median, now - e.slow_since)
            for rank, e in sorted(self._ranks.items())
            if e.slow_since is not None and now - e.slow_since >= STRAGGLER_WINDOW
        ]

    def job(self) -> tuple[float, int | None, float | None] | None:
        """The job's (step, total, rate): the median step and rate, the largest total."""
        if not self._ranks:
            return None
        steps = [e.step for e in self._ranks.values()]
        rates = [e.rate for e in self._ranks.values() if e.rate is not None]
        totals = [e.total for e in self._ranks.values() if e.total is not None]
        return (
            statistics.median_low(steps),
            max(totals) if totals else None,
            statistics.median(rates) if rates else None,
        )

    def slowest(self, count: int = SLOWEST_KEPT) -> list[tuple[int, _Rank]]:
        """The ranks furthest behind: lowest step, then lowest rate."""
        order = sorted(
            self._ranks.items(),
            key=lambda item: (item[1].step, item[1].rate or 0.0, item[0]),
        )
        return order[:count]

    def status(self, now: float) -> str | None:
        """The status line to print now, or None (too soon, or nothing worth saying)."""
        if self._looked_at is not None and now - self._looked_at < LOOK_EVERY:
            return None
        self._looked_at = now
        job = self.job()
        if job is None:
            return None
        step, total, _ = job
        named = frozenset(s.rank for s in self.stragglers(now))
        done = total is not None and step >= total
        news = self._said_at is None or named != self._said_named or done != self._said_done
        due = self._said_at is not None and now - self._said_at >= STATUS_EVERY
        if not news and not (due and step != self._said_step):
            return None
        self._said_at, self._said_step = now, step
        self._said_named, self._said_done = named, done
        return self.line(now)

    def line(self, now: float) -> str:
        """`step 1,200 of 5,000 · 0.42 steps/s · slowest rank 13 (node 1) at 1,180 · about
        2 h 30 min left`, and the stragglers named."""
        job = self.job()
        assert job is not None
        step, total, rate = job
        unit = self._unit
        words = [f"{unit[:-1]} {_count(step)}" + (f" of {_count(total)}" if total else "")]
        if rate is not None:
            words.append(f"{_rate(rate)} {unit}/s")
        (low_rank, low), *_ = self.slowest(1)
        if len(self._ranks) > 1 and low.step < step:
            words.append(f"slowest rank {low_rank} (node {low.node}) at {_count(low.step)}")
        if total and rate and step < total:
            words.append(f"about {duration((total - step) / rate)} left")
        named = self.stragglers(now)
        if named:
            names = ", ".join(f"rank {s.rank} (node {s.node})" for s in named)
            words.append(f"stragglers: {names}")
        return " · ".join(words)

    def stalled(self, now: float, last_line: float | None) -> str | None:
        """Why the job counts as hung by its steps, or None: progress was seen, no rank's step
        moved for `progress_timeout` seconds, and a rank printed a line (at `last_line`, the
        hang watchdog's clock) within that time."""
        timeout = self._timeout
        if timeout is None or self._moved_at is None or last_line is None:
            return None
        if now - self._moved_at < timeout or now - last_line >= timeout:
            return None
        job = self.job()
        where = f" (at {self._unit[:-1]} {_count(job[0])})" if job else ""
        return (
            f"the steps have not advanced for {timeout:g}s{where} while the ranks keep "
            "printing (--progress-timeout)"
        )

    def section(self, now: float) -> dict[str, Any] | None:
        """job.json's `progress`: the job's step, total, rate and time left, every rank's last
        step and rate, the slowest ranks, the stragglers; None before any progress."""
        job = self.job()
        if job is None:
            return None
        step, total, rate = job
        left = (total - step) / rate if total and rate and step < total else None
        return {
            "unit": self._unit,
            "step": _number(step),
            "total": total,
            "rate": None if rate is None else round(rate, 4),
            "seconds_left": None if left is None else round(left),
            "ranks": [_rank_dict(r, e) for r, e in sorted(self._ranks.items())],
            "ranks_left_out": sum(self._left_out.values()),
            "slowest": [_rank_dict(r, e) for r, e in self.slowest()],
            "stragglers": [s.to_dict() for s in self.stragglers(now)],
        }


def _rank_dict(rank: int, entry: _Rank) -> dict[str, Any]:
    return {
        "rank": rank,
        "node": entry.node,
        "step": _number(entry.step),
        "total": entry.total,
        "rate": None if entry.rate is None else round(entry.rate, 4),
    }


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else round(value, 4)


def _count(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,.2f}"


def _rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def duration(seconds: float) -> str:
    """`2 h 30 min`, `12 min`, `40 s`: as a person says a time left."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"
