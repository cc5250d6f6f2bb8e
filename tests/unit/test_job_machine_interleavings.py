"""The interleavings of tests/unit/test_job_interleavings.py run against node 0's job machine
alone (marun.job.machine.JobMachine) over a fake network: no socket, no thread, no patched
clock. A connection is a `Pipe`; what a node says goes through marun.job.protocol's encoding and
type checks and marun.job.messages into the machine; what the machine returns (marun.job.actions)
is carried to the nodes' inboxes here, as the shell would. The rules, the modelled nodes and
the invariants are that harness's: the same promises, each step without the shell between.

MARUN_PROPERTY_EXAMPLES sets the example count (the fast lane's default)."""

from __future__ import annotations

import os
from collections import deque
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule
from test_job_interleavings import (
    JOB,
    NODES,
    SECRET,
    JobInterleavings,
    Node,
    job_section,
    run_interleavings,
)

from marun.job.actions import (
    Action,
    Bind,
    Broadcast,
    Drop,
    Log,
    Refuse,
    Send,
    TurnAway,
)
from marun.job.machine import JobMachine
from marun.job.messages import Hello, member_message
from marun.job.phases import JobPhase
from marun.job.protocol import PROTOCOL, ProtocolError, decode, encode, new_nonce
from marun.job.report import state_report
from marun.job.roster import Roster
from marun.runtime.round_rule import RoundRule

WALL = 1.7e9


class Pipe:
    """One connection: the node at its far end (None: a stranger), and whether it is open."""

    def __init__(self, node: Node | None) -> None:
        self.node = node
        self.open = True
        self.closing = False  # (what the harness's _pump looks at)


class MachineView:
    """What the harness reads of its job (`stopped`, `phase`, ...), from the machine's state."""

    def __init__(self, machine: JobMachine) -> None:
        self.machine = machine
        self.errors = 0

    @property
    def members(self) -> Roster:
        return self.machine.job.members

    @property
    def phase(self) -> JobPhase:
        return self.machine.job.phase

    @property
    def stopped(self) -> Any:
        return self.machine.job.stopped

    @property
    def exit_code(self) -> int | None:
        return self.machine.job.exit_code

    @property
    def rounds(self) -> list[dict[str, Any]]:
        return self.machine.job.rounds

    def report(self) -> dict[str, Any]:
        return state_report(self.machine.job, 0)


class MachineInterleavings(JobInterleavings):
    @initialize(budget=st.integers(0, 3))
    def make_job(self, budget: int) -> None:
        self.budget = budget
        coord = job_section()
        rule = RoundRule(budget, quick=0.0)
        now = self.clock.now
        self.view = MachineView(
            JobMachine(coord, "leader", rule=rule, ports={}, now=now, wall=WALL + now)
        )
        self.coordinator = self.view  # type: ignore[assignment]
        self.inbox: dict[int, deque[dict[str, Any]]] = {i: deque() for i in range(NODES)}

    @property
    def job(self) -> Any:
        return self.view

    @property
    def machine(self) -> JobMachine:
        return self.view.machine

    # -- the fake network -----------------------------------------------------------------------

    def _connect(self, node: Node) -> None:
        pipe = Pipe(node)
        node.conn = pipe  # type: ignore[assignment]
        node.far = None
        node.seq = 0
        node.nonce = new_nonce()
        self.inbox[node.index].clear()
        self._say(
            pipe,
            {"job": JOB, "node": node.index, "slot": 0, "type": "hello"},
            nonce=node.nonce,
            host=f"h{node.index}",
            instance=node.instance,
            leader=node.leader,
            started=node.started,
            daemons_only=False,
            version=PROTOCOL,
        )
        for kind, fields in list(node.state.items()):
            self._send(node, kind, **fields)

    def _say(self, pipe: Pipe, head: dict[str, Any], **fields: Any) -> None:
        """A line from the far end of `pipe`: encoded and checked as on the wire, then typed."""
        if not pipe.open:
            return
        body = dict(head, **fields)
        try:
            body = decode(SECRET, JOB, encode(SECRET, body))
        except ProtocolError:
            self._close(pipe)  # the shell refuses it and drops the connection
            return
        msg = member_message(body)
        now, wall = self.clock.now, WALL + self.clock.now
        if isinstance(msg, Hello):
            actions = self.machine.hello(pipe, "127.0.0.1", msg, now, wall)
        else:
            key = (int(body["node"]), int(body["slot"]))
            actions = self.machine.message(pipe, key, str(body["type"]), msg, now, wall)
        self._apply(actions)

    def _send(self, node: Node, kind: str, **fields: Any) -> None:
        if kind in ("failure", "stopped", "running", "end"):
            node.state.pop(kind, None)
            node.state[kind] = fields  # said again after its next hello
        pipe = node.conn
        if pipe is None:
            return
        stop = kind == "failure" and fields["failure"].get("stop_signal")
        live = self.job.stopped is None and self.job.phase is not JobPhase.DONE
        if stop and live and self.signalled is None:
            self.signalled = (fields["failure"]["exit_code"], len(self.job.rounds))
        node.seq += 1
        node.last_sent = self.clock.now
        head = {"job": JOB, "node": node.index, "slot": 0, "type": kind}
        self._say(pipe, head, **fields)  # type: ignore[arg-type]

    def _apply(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Send):
                member = self.machine.job.members.get(action.key)
                if member is not None and isinstance(member.conn, Pipe):
                    self._deliver_to(member.conn, action.message.KIND, action.message.to_wire())
            elif isinstance(action, Broadcast):
                for member in list(self.machine.job.members.values()):
                    if isinstance(member.conn, Pipe):
                        self._deliver_to(member.conn, action.message.KIND, action.message.to_wire())
            elif isinstance(action, Log):
                self.events.append((action.event, action.fields))
            elif isinstance(action, TurnAway) and isinstance(action.handle, Pipe):
                self._deliver_to(action.handle, "refused", {"why": action.why})
                self._close(action.handle)
            elif isinstance(action, (Drop, Refuse)) and isinstance(action.handle, Pipe):
                if isinstance(action, Drop) or action.close:
                    self._close(action.handle)
            elif isinstance(action, Bind):
                pass

    def _deliver_to(self, pipe: Pipe, kind: str, fields: dict[str, Any]) -> None:
        if pipe.open and pipe.node is not None:
            self.inbox[pipe.node.index].append(dict(fields, type=kind))

    def _close(self, pipe: Pipe) -> None:
        """Node 0's side closes (or the far end did): the machine hears of it once."""
        if not pipe.open:
            return
        pipe.open = False
        self.machine.closed(pipe, self.clock.now)

    def _closed(self, node: Node) -> None:
        pipe = node.conn
        if isinstance(pipe, Pipe):
            self._close(pipe)
        node.conn = node.far = None

    def _deliver(self, node: Node) -> None:
        """What node 0 sent this node, handled as its marun would; a connection node 0 closed
        is seen closed once its lines are read."""
        box = self.inbox[node.index]
        while not node.frozen and node.conn is not None:
            if box:
                self._handle(node, box.popleft())
                continue
            pipe = node.conn
            if isinstance(pipe, Pipe) and not pipe.open:
                node.conn = node.far = None
            return

    def _settle(self) -> None:
        for _ in range(20):
            moved = False
            for node in self.nodes:
                if node.conn is not None and not node.frozen:
                    before = (node.phase, node.round, node.seq, node.conn)
                    self._deliver(node)
                    moved |= before != (node.phase, node.round, node.seq, node.conn)
            if not moved:
                return

    @rule(other=st.sampled_from(["job-other", JOB]), index=st.integers(0, NODES - 1))
    def a_stranger_says_hello(self, other: str, index: int) -> None:
        pipe = Pipe(None)
        node = self.nodes[index]
        heard = self.clock.now - node.last_sent < 3.0
        talking = node.conn is not None and not node.frozen and node.alive and heard
        if other != JOB or talking:
            self.foreign.append(pipe)  # type: ignore[arg-type]
        head = {"job": other, "node": index, "slot": 0, "type": "hello"}
        if other == JOB:
            self._say(
                pipe, head, nonce=new_nonce(), host="x", instance=new_nonce(), leader="",
                started=False, daemons_only=False, version=PROTOCOL,
            )  # fmt: skip
        if other != JOB or talking:
            member = self.job.members.get((index, 0))
            assert member is None or member.conn is not pipe, "a stranger became a member"
        self._close(pipe)

    def _advance(self, seconds: float) -> None:
        left = seconds
        while left > 1e-9:
            dt = min(1.0, left)
            left -= dt
            self.clock.now += dt
            for node in self.nodes:
                if not node.alive or node.frozen or node.phase == "finished":
                    continue
                if node.conn is None:
                    self._connect(node)  # a member reconnects at once
                else:
                    self._send(node, "hb", idle=0.0)
            now = self.clock.now
            self._apply(self.machine.tick(now, WALL + now))
            self._settle()

    def _patch_time(self) -> None:
        """Nothing to patch: the machine is given the time with each event."""

    def close(self) -> None:
        pass


def run_machine_interleavings(examples: int, steps: int) -> None:
    run_interleavings(examples, steps, MachineInterleavings)


def test_the_job_machine_in_every_interleaving() -> None:
    run_machine_interleavings(int(os.environ.get("MARUN_PROPERTY_EXAMPLES", "200")), steps=30)
