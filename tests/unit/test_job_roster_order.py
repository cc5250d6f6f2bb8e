"""Node 0 finds silent and unlinked members without walking every member each tick
(marun.job.roster: each node due for a look at its members' oldest line). The promise: it finds
the same members lost, in the same order, with the same consequences, as a walk of every member
would. A reference machine with that walk runs the same random events beside the real one."""

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


def test_the_silent_are_found_and_a_node_whose_members_all_ended_is_let_go_of() -> None:
    roster = Roster(slots=2)
    for i, key in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
        roster[key] = _member(*key, seen=float(i))
    roster.seen((0, 0), roster[(0, 0)], 10.0)  # heard again
    assert sorted(roster.silent(now=13.5, limit=10.0)) == [(0, 1), (1, 0), (1, 1)]
    assert sorted(roster.silent(now=12.5, limit=10.0)) == [(0, 1), (1, 0)]
    assert roster.silent(now=5.0, limit=10.0) == []
    roster[(1, 0)].ended = 2.0  # an ended member is not silent
    assert sorted(roster.silent(now=13.5, limit=10.0)) == [(0, 1), (1, 1)]
    roster[(1, 1)].ended = 3.0  # node 1 has no member left that is not ended: let go of
    assert roster.silent(now=13.5, limit=10.0) == [(0, 1)]
    assert 1 not in roster.due
    roster.seen((1, 0), roster[(1, 0)], 11.0)  # heard again: watched again
    roster[(1, 0)].ended = None
    assert sorted(roster.silent(now=21.5, limit=10.0)) == [(0, 0), (0, 1), (1, 0)]
    del roster[(0, 1)]
    roster.unlinked.add((1, 1))
    del roster[(1, 1)]
    assert sorted(roster.silent(now=21.5, limit=10.0)) == [(0, 0), (1, 0)]
    assert roster.unlinked == set()


def test_a_node_looked_at_is_due_again_at_its_oldest_members_line() -> None:
    """What keeps the tick's search cheap: a node is looked at when its time is over the limit,
    then not again until its oldest member's line is; one heard since costs nothing."""
    roster = Roster(slots=2)
    for node in range(3):
        for slot in range(2):
            roster[(node, slot)] = _member(node, slot, seen=0.0)
    for node in range(3):
        for slot in range(2):
            roster.seen((node, slot), roster[(node, slot)], 5.0 + node + slot)
    assert roster.due == {0: 0.0, 1: 0.0, 2: 0.0}  # heard: nothing moved
    assert roster.silent(now=10.5, limit=10.0) == []
    assert roster.due == {0: 5.0, 1: 6.0, 2: 7.0}  # due at each node's oldest line
    roster.seen((1, 0), roster[(1, 0)], 16.5)
    assert roster.silent(now=16.5, limit=10.0) == [(0, 0), (0, 1)]
    # node 1 looked at (due at 6.0): its slot 1 is its oldest now; node 2 not looked at
    assert roster.due == {0: 5.0, 1: 7.0, 2: 7.0}


def test_a_node_with_two_entries_of_one_time_is_looked_at_once() -> None:
    """A member older than its node's time makes the node due earlier; the node's later entry
    stays in the heap, and a look can put the node back at that same time: it is looked at once
    a look all the same, and keeps one entry."""
    roster = Roster(slots=2)
    roster[(0, 0)] = _member(0, 0, seen=5.0)  # due at 5.0
    roster[(0, 1)] = _member(0, 1, seen=3.0)  # due at 3.0; the entry at 5.0 is old
    roster.seen((0, 1), roster[(0, 1)], 9.0)
    assert roster.silent(now=13.5, limit=10.0) == []  # looked at (3.0): due at 5.0 again
    assert roster.due == {0: 5.0}
    assert roster.silent(now=15.5, limit=10.0) == [(0, 0)]  # once, not twice
    assert sorted(roster._due_heap) == [(5.0, 0)]


def test_silence_is_found_as_a_look_at_every_member_finds_it() -> None:
    """Random lines, arrivals, ends, departures and looks, beside a look at every member: the
    same members silent every time. (Every way a member is heard is here: seen(), and the
    hub's path, which sets last_seen and watches a node that is not.)"""
    for seed in range(200):
        rng = random.Random(seed)
        roster, now, limit = Roster(slots=3), 0.0, 5.0
        keys = [(n, s) for n in range(5) for s in range(3)]
        for _ in range(300):
            now += rng.choice([0.1, 0.5, 1.0, 2.0, 6.0])
            key, roll = rng.choice(keys), rng.random()
            member = roster.get(key)
            if roll < 0.15:
                roster[key] = _member(*key, seen=now - rng.choice([0.0, 1.0, 7.0]))
            elif member is None:
                continue
            elif roll < 0.45:
                roster.seen(key, member, now, now)
            elif roll < 0.6:  # a hub's line (machine.group_beats)
                for slot in range(3):
                    held = roster.get((key[0], slot))
                    if held is not None and rng.random() < 0.8:
                        held.last_seen = now
                roster.node_heard(key[0], now)
            elif roll < 0.7:
                member.ended = now
            elif roll < 0.75:
                roster.seen(key, member, now)  # (a member un-ended is heard in the same call)
                member.ended = None
            elif roll < 0.8:
                del roster[key]
            else:
                found = roster.silent(now, limit)
                walked = [
                    k for k, m in roster.items() if m.ended is None and now - m.last_seen > limit
                ]
                assert sorted(found) == sorted(walked), (seed, now)


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
        self.slots = slots
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
            # a hub's word for a node (liveness hubs): its slots, closed ones too (passed over),
            # now and then one that did not beat
            idles = [None if rng.random() < 0.2 else 0.3 for _ in range(self.slots)]
            self.both("group_beats", [(key[0], idles, None, None)], self.now, wall)
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
