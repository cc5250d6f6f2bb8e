"""Node 0's coordinator, the nodes' arrival: the hello (who a connecting marun is, and whether
it is the one the job had), the barrier that opens on the last node (`start`), a node that comes
back, a node that leaves before the start, and arrival_timeout. The job's phases are in
marun.job.phases; the rest of the coordinator in marun.job.coordinator."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from marun.exit_codes import LOST_EXIT
from marun.job.phases import JobPhase
from marun.job.protocol import MAX_LINE, PROTOCOL
from marun.job.wire import Conn, CoordinatorWire, MemberState
from marun.plan.coordination import HEARTBEAT

ANNOUNCE_GAP = 5.0  # seconds: in a large job, `N/M nodes up` at least this often while they come


class Arrival(CoordinatorWire):
    """The arrival half of `Coordinator` (which sets these and owns the phase)."""

    phase: JobPhase
    stopped: dict[str, Any] | None
    _start_at: float | None
    _log: Callable[..., None]
    _announce: Callable[[str], None]
    _round_ports: dict[str, int]
    _announced_at: float | None = None  # the last `N/M nodes up` (monotonic)

    def _enter(self, phase: JobPhase) -> None:
        raise NotImplementedError

    def _stop(self, code: int, failure: dict[str, Any]) -> None:
        raise NotImplementedError

    @property
    def start_sent(self) -> bool:
        return self._start_at is not None

    def _hello(self, conn: Conn, key: tuple[int, int], body: dict[str, Any]) -> None:
        """A connection's hello: refused (not a node of this job, a second hello, another
        protocol version), or a member's arrival or return."""
        if not (0 <= key[0] < self.coord.nodes and 0 <= key[1] < self.coord.slots):
            self._turn_away(conn, f"node {key[0]} slot {key[1]} is not part of this job")
            return
        if conn.member is not None:
            self._refuse(conn, "a second hello on one connection")
            self._drop(conn)
            return
        version = body.get("version", 1)
        if version != PROTOCOL:
            self._turn_away(
                conn,
                f"this marun speaks protocol {version}, node {self.coord.leader}'s "
                f"{PROTOCOL}: every node of a job needs the same marun version",
            )
            return
        instance = str(body.get("instance", ""))
        old = self.members.get(key)
        now = time.monotonic()
        if (
            body.get("started") is True
            and not self.start_sent
            and str(body.get("leader", "")) != self.instance
        ):
            # Its job started under another coordinator: this node 0's marun is a new one. It
            # is taken in like any member (so that its end is waited for) and told to stop.
            self._came_back(key, body, None)
        elif old is not None and old.instance and instance != old.instance:
            # Heard within its heartbeat interval and two more seconds (3 s in a small job).
            talking = old.conn is not None and now - old.last_seen < self.hb_every + 2 * HEARTBEAT
            if talking and old.conn is not conn:
                # The node's marun is alive and talking: this one is somebody else's (another
                # job's with the same id and secret, or a second marun started by hand).
                self._turn_away(
                    conn,
                    f"node {key[0]} slot {key[1]} is here already (its marun talks on another "
                    f"connection): this marun belongs to another job, or is one too many",
                )
                return
            self._came_back(key, body, old)
            old.instance = instance
        elif old is not None and old.outcome == "lost":
            self._back(old)  # the same marun, on a new connection: it was frozen, not gone
        conn.member = key
        conn.buf.limit = MAX_LINE  # a member of the job: stacks may follow
        old = self.members.get(key)
        if old is not None:
            if old.conn is not None and old.conn is not conn:
                self._drop(old.conn)
            old.conn = conn
            old.last_seen = now
            old.last_seen_wall = time.time()
            member = old
        else:
            member = self._take_in(conn, key, body, instance, now)
        self._welcome(member)

    def _take_in(
        self, conn: Conn, key: tuple[int, int], body: dict[str, Any], instance: str, now: float
    ) -> MemberState:
        """A node's slot that is new to the job: its state, and `N/M nodes up` when it is its
        node's last."""
        member = MemberState(
            node=key[0],
            slot=key[1],
            host=str(body.get("host", "?")),
            address=conn.address,
            arrived=time.time(),
            last_seen=now,
            instance=instance,
            last_seen_wall=time.time(),
            conn=conn,
            daemons_only=bool(body.get("daemons_only", False)),
        )
        self.members[key] = member  # counted per node as it goes in (marun.job.roster)
        self._log("node_arrived", node=key[0], slot=key[1], host=member.host)
        if self.members.node_complete(key[0]):  # this node's last device just arrived
            self._nodes_up(now)
        return member

    def _nodes_up(self, now: float) -> None:
        """`N/M nodes up` on node 0's console: every node in a small job; in a large one each
        tenth of the job, the last, and any other after ANNOUNCE_GAP without one (a line per
        node of 1,024 says nothing more)."""
        up, nodes = self.members.complete, self.coord.nodes
        step = max(1, nodes // 10)
        last = self._announced_at
        if up == nodes or up % step == 0 or last is None or now - last >= ANNOUNCE_GAP:
            self._announced_at = now
            self._announce(f"marun: {up}/{nodes} nodes up")

    def _welcome(self, member: MemberState) -> None:
        """Tell a member where the job is; the last to arrive opens the barrier (RUNNING)."""
        self._send(member, "welcome", instance=self.instance)
        if self.stopped is not None:
            self._send(member, "stop", **self.stopped)
        elif self.phase is JobPhase.RESTARTING:
            if member.stopped_round < self.round:  # it may not have heard (a reconnection)
                self._send(member, "restart", round=self.round, cause=self._round_cause())
        elif self.start_sent:
            self._send(member, "start", round=self.round, ports=self._round_ports)
        elif len(self.members) == self.expected:
            self._start_at = time.monotonic()
            self._enter(JobPhase.RUNNING)
            self._log("job_start", nodes=self.coord.nodes)
            self._broadcast("start")

    @property
    def round(self) -> int:
        raise NotImplementedError

    def _round_cause(self) -> dict[str, Any] | None:
        raise NotImplementedError

    def _rejoin(self, key: tuple[int, int]) -> bool:
        raise NotImplementedError

    def _restart(self, code: int, failure: dict[str, Any], uptime: float | None) -> bool:
        raise NotImplementedError

    def _came_back(
        self, key: tuple[int, int], body: dict[str, Any], old: MemberState | None
    ) -> None:
        """A node's marun that is not the one the job had: `old` is the node's earlier one, or
        None when node 0's is the new one (the member's job started under another).

        The one place that decides what a node that comes back does. Before the start: the pod
        was recreated while the job gathered; the new marun takes the old one's place. After
        the start, with a restart round left (or one under way): the new marun joins the round
        (marun.job.restart_rounds). Otherwise the job's ranks cannot take a new node in, so the
        job fails, naming it; the new marun is taken in and told to stop with everybody else."""
        leader = old is None
        node = self.coord.leader if leader else key[0]
        host = self.coord.host if leader else str(body.get("host", "?"))[:200]
        if old is not None and self.phase is JobPhase.GATHERING:
            self._log("node_replaced", "warning", node=key[0], slot=key[1], host=host)
            old.ended = old.outcome = old.exit_code = None
            return
        why = f"node {node} came back after the start: its earlier marun was lost"
        if old is not None and self._rejoin(key):
            return  # admitted into the restart round (marun.job.restart_rounds)
        self._log("node_came_back", "error", node=node, slot=key[1], host=host)
        if self.stopped is None:
            self._stop(LOST_EXIT, {"node": node, "host": host, "exit_code": LOST_EXIT, "why": why})
        if old is not None and old.outcome == "lost":
            old.ended = old.outcome = None  # the new marun reports how it ends

    def _forget_departed(self) -> None:
        """Before the start, a node whose connection is gone is not present: the barrier waits
        for it again (its marun reconnects, or its pod is recreated); it never opens on a node
        that left. Only the members whose connection closed since the last look are looked at
        (marun.job.wire._drop notes them), not every member every tick."""
        closed, self.members.closed = self.members.closed, set()
        for key in closed:
            member = self.members.get(key)
            if member is not None and member.conn is None and member.ended is None:
                del self.members[key]
                self._log("node_departed", "warning", node=key[0], slot=key[1], host=member.host)

    def _arrival_failed(self) -> None:
        missing = []
        for node in range(self.coord.nodes):
            slots = [s for s in range(self.coord.slots) if (node, s) not in self.members]
            if slots:
                host = self.coord.hosts[node] if node < len(self.coord.hosts) else "?"
                part = f"node {node} ({host})"
                if self.coord.slots > 1:
                    part += f" slots {','.join(map(str, slots))}"
                missing.append(part)
        why = (
            f"{len(missing)} of {self.coord.nodes} nodes missing after "
            f"{self.coord.arrival_timeout:g}s: {'; '.join(missing)} never reported to "
            f"{self.coord.host}:{self.coord.port}"
        )
        first = next(
            n
            for n in range(self.coord.nodes)
            if any((n, s) not in self.members for s in range(self.coord.slots))
        )
        self._stop(LOST_EXIT, {"node": first, "exit_code": LOST_EXIT, "why": why})

    def _lost(self, member: MemberState, why: str = "") -> None:
        """A node silent for peer_timeout, or whose connection closed without a goodbye: a
        restart round, else the job's failure."""
        failure = {
            "node": member.node,
            "host": member.host,
            "exit_code": LOST_EXIT,
            "why": f"node {member.node} ({member.host}) lost: "
            + (why or f"no word from its marun for {self.coord.peer_timeout:g}s"),
        }
        live = self.stopped is None and self.phase is not JobPhase.RESTARTING
        if live and not self._restart(LOST_EXIT, failure, None):
            self._stop(LOST_EXIT, failure)
        # It ended when it was last heard of, not when node 0 noticed (node 0 may have
        # been frozen meanwhile).
        member.ended = member.last_seen_wall or time.time()
        member.outcome = "lost"

    def _back(self, member: MemberState) -> None:
        """A node declared lost whose same marun talks again (it was frozen, e.g. SIGSTOP, or
        starved past peer_timeout): it is counted again. A round under way counts it once it
        says `stopped`; a stopped job waits for its end; its loss stays the round's cause (one
        incident, one round)."""
        member.ended = member.outcome = None
        self._log("node_back", "warning", node=member.node, slot=member.slot, host=member.host)
