"""One node's ranks' progress: each rank's latest step (epochs folded in) and its rate, and the
node's report for node 0 (`NodeReport`: small and bounded, none while no rank shows progress).

Fed `(rank, output, now)`: the latest counter in the output (`Recogniser.latest`) moves the
rank. A rank whose counter restarts with each epoch (Lightning, Keras, MindSpore) counts on
across epochs: an epoch's steps are its bar's total where printed, else the last step seen of it.
A counter without epochs that goes back (an evaluation bar, a restart round) is taken as it is:
the rate starts again from there; one with epochs that goes back within its epoch is not taken
(Lightning redraws the ending epoch's bar at 0), one whose epoch goes back starts again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from marun.progress.recognise import Reading, Recogniser

RATE_WINDOW = 60.0  # seconds over which a rank's rate is measured
MAX_RANKS_SENT = 64  # ranks in one node's report: the slowest (a node runs up to 1,024)
_SAMPLES = 32  # (time, step) pairs kept per rank within the window


@dataclass(frozen=True)
class RankProgress:
    """One rank's latest step (in `NodeReport.unit`), its total where known, its rate in steps
    a second over the last `RATE_WINDOW` (None until it has moved once)."""

    rank: int
    step: float
    total: int | None = None
    rate: float | None = None

    def to_wire(self) -> list[Any]:
        return [self.rank, _number(self.step), self.total, _rate(self.rate)]

    @classmethod
    def from_wire(cls, data: Any) -> RankProgress:
        rank, step, total, rate = data
        return cls(
            int(rank),
            float(step),
            None if total is None else int(total),
            None if rate is None else float(rate),
        )


@dataclass(frozen=True)
class NodeReport:
    """What a node's marun sends node 0 with its heartbeats: its ranks' progress, the slowest
    `MAX_RANKS_SENT` of them at most; `more`: how many were left out (faster ones)."""

    ranks: tuple[RankProgress, ...]
    unit: str = "steps"
    more: int = 0

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"ranks": [r.to_wire() for r in self.ranks]}
        if self.unit != "steps":
            wire["unit"] = self.unit
        if self.more:
            wire["more"] = self.more
        return wire

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> NodeReport:
        """The inverse of `to_wire`; ValueError (or TypeError, KeyError) on anything else."""
        ranks = data["ranks"]
        if not isinstance(ranks, list) or len(ranks) > MAX_RANKS_SENT:
            raise ValueError("progress: a list of at most MAX_RANKS_SENT ranks")
        unit = str(data.get("unit", "steps"))
        if unit not in ("steps", "epochs"):
            raise ValueError(f"progress: unknown unit {unit!r}")
        return cls(tuple(RankProgress.from_wire(r) for r in ranks), unit, int(data.get("more", 0)))


@dataclass
class _Rank:
    epoch: int | None = None  # the epoch its counter is in, where it restarts with each
    epochs: int | None = None  # how many, where printed (Keras)
    per_epoch: int | None = None  # steps in an epoch, where its bar says
    offset: float = 0  # steps of the epochs before this one
    last: float = 0  # the counter within its epoch
    total: int | None = None
    unit: str = "steps"
    samples: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=_SAMPLES))

    @property
    def step(self) -> float:
        return self.offset + self.last


class Tracker:
    """The ranks of one node. `feed` from one thread (the reporter's), `report` from the same."""

    def __init__(self, recogniser: Recogniser | None = None, window: float = RATE_WINDOW):
        self._recogniser = recogniser or Recogniser()
        self._window = window
        self._ranks: dict[int, _Rank] = {}

    def feed(self, rank: int, output: bytes, now: float) -> bool:
        """The latest counter in `output` (a block's end) moves `rank`; True if one was found."""
        reading = self._recogniser.latest(output)
        if reading is None:
            return False
        self.see(rank, reading, now)
        return True

    def see(self, rank: int, reading: Reading, now: float) -> None:
        state = self._ranks.setdefault(rank, _Rank())
        if reading.unit != "steps":
            if state.samples and state.unit == "steps":
                return  # a Trainer log dict beside its bar: the bar counts
            state.unit = reading.unit
        elif state.unit != "steps":
            state.unit, state.samples = "steps", deque(maxlen=_SAMPLES)  # a bar after dicts
        before = state.step
        _move(state, reading)
        if not state.samples or state.step != before:
            if state.step < before:
                state.samples.clear()  # went back: the rate starts again
            state.samples.append((now, state.step))

    def report(self, now: float) -> NodeReport | None:
        """The node's report, or None while no rank has shown progress."""
        if not self._ranks:
            return None
        ranks = [
            RankProgress(rank, state.step, state.total, self._rate(state, now))
            for rank, state in sorted(self._ranks.items())
            if state.samples
        ]
        if not ranks:
            return None
        units = {state.unit for state in self._ranks.values() if state.samples}
        unit = "steps" if "steps" in units else "epochs"
        ranks = [r for r, s in zip(ranks, self._ranks.values()) if s.unit == unit] or ranks
        kept = sorted(ranks, key=_slowness)[:MAX_RANKS_SENT]
        kept.sort(key=lambda r: r.rank)
        return NodeReport(tuple(kept), unit, len(ranks) - len(kept))

    def _rate(self, state: _Rank, now: float) -> float | None:
        samples = state.samples
        while len(samples) > 1 and samples[1][0] <= now - self._window:
            samples.popleft()  # the newest one older than the window stays: the window's start
        first_time, first_step = samples[0]
        if len(samples) == 1 and first_time > now - self._window:
            return None  # one sight of the counter: no rate yet
        if now <= first_time:
            return None
        return max(0.0, (samples[-1][1] - first_step) / (now - first_time))


def _move(state: _Rank, reading: Reading) -> None:
    """Fold a reading into the rank's count: epochs restart the counter."""
    epoch = reading.epoch
    if epoch is None and reading.unit == "steps" and state.epoch is not None:
        epoch = state.epoch  # a Keras bar whose header was in an earlier block
    if epoch is not None:
        back = reading.step is not None and reading.step < state.last
        if epoch == state.epoch and back:
            return  # Lightning redraws an epoch's bar at 0 as it ends: the count stays
        if state.epoch is not None and epoch > state.epoch:
            done = state.per_epoch or state.last
            state.offset += done * (epoch - state.epoch) if state.per_epoch else done
        elif state.epoch is not None and epoch < state.epoch:
            state.offset = 0  # the job began again (a restart round)
        state.epoch = epoch
    if reading.epochs is not None:
        state.epochs = reading.epochs
    state.last = 0 if reading.step is None else reading.step
    if epoch is not None and reading.total is not None:
        state.per_epoch = reading.total
    if epoch is None:
        state.total = reading.total
    elif state.per_epoch is not None and state.epochs is not None:
        state.total = state.per_epoch * state.epochs
    else:
        state.total = None


def _slowness(rank: RankProgress) -> tuple[float, float]:
    return (rank.rate if rank.rate is not None else float("inf"), rank.step)


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else round(value, 4)


def _rate(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.4g}")
