"""Node 0 finds silent and unlinked members without walking every member each tick
(marun.job.roster: the members in the order of their last line). The promise: it finds the same
members lost, in the same order, with the same consequences, as a walk of every member would.
A reference machine with that walk runs the same random events beside the real one."""

from __future__ import annotations

import random

import pytest

from marun.job import admission
from marun.job.actions import Action
from marun.job.machine import CLOSED_LOST, JobMachine
from marun.job.messages import Beat, End, Hello, MemberMessage, Running, Stopped
from marun.job.protocol import PROTOCOL
from marun.job.roster import MemberState, Roster
from marun.plan.coordination import Coordination
from marun.runtime.round_rule import RoundRule

WALL = 1.7e9


class WalkingMachine(JobMachine):
    """The machine as it was: every member looked at, in the roster's order, every tick."""

    def _find_lost(self) -> None:
        job = self.job
        for member in list(job.members.values()):
            if member.ended is not None:
                continue
            if job.now - member.last_seen > job.coord.peer_timeout:
                admission.lost(job, member)
            elif member.conn is None and job.now - member.closed_at > CLOSED_LOST:
                admission.lost(
                    job,
                    member,
                    f"its marun's connection closed without a goodbye and it did not reconnect "
                    f"within {CLOSED_LOST:g}s (its pod deleted, or its machine gone)",
                )


def _member(node: int, slot: int, seen: float) -> MemberState:
    return MemberState(node=node, slot=slot, host="h", address="a", arrived=0.0, last_seen=seen)


def test_the_longest_silent_come_first_and_the_walk_stops_at_the_first_heard_since() -> None:
    roster = Roster(slots=2)
    for i, key in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        roster[key] = _member(*key, seen=float(i))
    roster.seen((0, 0), roster[(0, 0)], 10.0)  # heard again: now the last
    assert roster.silent(now=13.5, limit=10.0) == [(0, 1), (1, 0), (1, 1)]
    assert roster.silent(now=12.5, limit=10.0) == [(0, 1), (1, 0)]
    assert roster.silent(now=5.0, limit=10.0) == []
    roster[(1, 0)].ended = 2.0  # an ended member is let go of, until it is heard again
    assert roster.silent(now=13.5, limit=10.0) == [(0, 1), (1, 1)]
    assert (1, 0) not in roster._heard
    roster.seen((1, 0), roster[(1, 0)], 11.0)
    roster[(1, 0)].ended = None
    assert roster.silent(now=21.5, limit=10.0) == [(0, 1), (1, 1), (0, 0), (1, 0)]
    del roster[(0, 1)]
    roster.unlinked.add((1, 1))
    del roster[(1, 1)]
    assert roster.silent(now=21.5, limit=10.0) == [(0, 0), (1, 0)]
    assert roster.unlinked == set()


def test_members_heard_together_come_last_in_their_order_as_seen_one_by_one_would() -> None:
    one, together = Roster(slots=2), Roster(slots=2)
    keys = [(0, 0), (0, 1), (1, 0), (1, 1)]
    for roster in (one, together):
        for i, key in enumerate(keys):
            roster[key] = _member(*key, seen=float(i))
    heard = [(1, 1), (0, 0)]  # a hub's line: node 1 slot 1, then node 0 slot 0
    for key in heard:
        one.seen(key, one[key], 10.0, 20.0)
    together.seen_all([(key, together[key]) for key in heard], 10.0, 20.0)
    assert list(together._heard) == list(one._heard) == [(0, 1), (1, 0), (1, 1), (0, 0)]
    for key in keys:
        assert (together[key].last_seen, together[key].last_seen_wall) == (
            one[key].last_seen,
            one[key].last_seen_wall,
        )
    assert together.silent(now=15.5, limit=10.0) == [(0, 1), (1, 0)]


def _hello(node: int, slot: int, instance: str) -> Hello:
    return Hello(
        node=node, slot=slot, instance=instance, host=f"h{node}", leader="", started=False,
        daemons_only=False, version=PROTOCOL,
    )  # fmt: skip


class Twins:
    """The real machine and the walking one, fed the same events; what each returns must be
    the same."""

    def __init__(self, seed: int, nodes: int, slots: int) -> None:
        coord = Coordination(
            host="10.0.0.1", port=29400, nodes=nodes, index=0, job="j", slots=slots,
            arrival_timeout=30.0, peer_timeout=10.0,
        )  # fmt: skip
        self.machines = [
            cls(coord, "leader", rule=RoundRule(8), ports={}, now=0.0, wall=WALL)
            for cls in (JobMachine, WalkingMachine)
        ]
        self.rng = random.Random(seed)
        self.now = 1.0
        self.keys = [(n, s) for n in range(nodes) for s in range(slots)]
        self.handle: dict[tuple[int, int], str] = {}
        self.handles = 0

    def both(self, call: str, *args: object) -> list[Action]:
        out = [getattr(m, call)(*args) for m in self.machines]
        assert repr(out[0]) == repr(out[1]), call
        return out[0]  # type: ignore[no-any-return]

    def hello(self, key: tuple[int, int]) -> None:
        self.handles += 1
        self.handle[key] = handle = f"c{self.handles}"
        self.both("hello", handle, "10.0.0.9", _hello(*key, f"i{key}"), self.now, WALL + self.now)

    def step(self) -> None:
        rng, key = self.rng, self.rng.choice(self.keys)
        gap = 11.0 if rng.random() < 0.004 else rng.choice([0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0])
        self.now += gap  # (now and then past peer_timeout: everybody silent)
        wall = WALL + self.now
        job = self.machines[0].job
        roll = rng.random()
        if roll < 0.2 and key in self.handle:
            self.both("message", self.handle[key], key, "hb", Beat(0.1, None), self.now, wall)
        elif roll < 0.5 and key in self.handle:
            beats = [(self.handle[k], k, 0.2, 1.0, None) for k in self.keys if k[0] == key[0]
                     and k in self.handle]  # fmt: skip
            self.both("beats", beats, self.now, wall)
        elif roll < 0.54:
            # a hub's word for a node (liveness hubs): its slots, closed ones too (passed over)
            entries = [(k, 0.3, None, None) for k in self.keys if k[0] == key[0]]
            self.both("group_beats", entries, self.now, wall)
        elif roll < 0.546 and key in self.handle:
            self.both("closed", self.handle.pop(key), self.now)
        elif roll < 0.62:
            # a reconnection of the same marun: mostly one whose connection closed
            away = [k for k in self.keys if k not in self.handle]
            self.hello(rng.choice(away) if away and rng.random() < 0.9 else key)
        elif roll < 0.8 and key in self.handle:
            member = job.members.get(key)
            stopped = member is not None and member.stopped_round >= job.round
            said: MemberMessage = Running(job.round, 1) if stopped else Stopped(job.round)
            self.both("message", self.handle[key], key, said.KIND, said, self.now, wall)
        elif roll < 0.802 and key in self.handle:
            self.both("message", self.handle[key], key, "end", End("ok", 0), self.now, wall)
        else:
            self.both("tick", self.now, wall)
        real, walking = (m.job for m in self.machines)
        assert real.phase is walking.phase
        for k, member in real.members.items():
            other = walking.members[k]
            assert (member.ended, member.outcome, member.lost_why) == (
                other.ended,
                other.outcome,
                other.lost_why,
            ), k


@pytest.mark.parametrize("seed", range(40))
def test_lost_members_are_found_as_a_walk_of_every_member_finds_them(seed: int) -> None:
    twins = Twins(seed, nodes=4, slots=2)
    for key in twins.keys:
        twins.hello(key)
    for _ in range(300):
        twins.step()
