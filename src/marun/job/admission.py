"""Node 0's arrival, as moves of the job's state (marun.job.job_state): the hello (who a
connecting marun is, and whether it is the one the job had), the barrier that opens on the last
node (`start`), a node that comes back, a node that leaves before the start, arrival_timeout,
and a node lost or back. The job's phases: marun.job.phases."""

from __future__ import annotations

from marun.exit_codes import LOST_EXIT
from marun.job import preflight_barrier, round_barrier, spares
from marun.job.actions import Announce, Bind, Drop, Handle, Key, Refuse, TurnAway
from marun.job.job_state import JobState
from marun.job.messages import Done, Hello, Restart, Start, Welcome
from marun.job.phases import JobPhase
from marun.job.protocol import PROTOCOL
from marun.job.roster import MemberState
from marun.plan.coordination import HEARTBEAT
from marun.runtime.failure import Failure

ANNOUNCE_GAP = 5.0  # seconds: in a large job, `N/M nodes up` at least this often while they come


def hello(job: JobState, handle: Handle, address: str, msg: Hello) -> None:
    """A connection's hello: refused (not a node of this job, a second hello, another protocol
    version), or a member's arrival or return."""
    key = (msg.node, msg.slot)
    coord = job.coord
    if not (0 <= key[0] < coord.nodes and 0 <= key[1] < coord.slots):
        job.actions.append(TurnAway(handle, f"node {key[0]} slot {key[1]} is not part of this job"))
        return
    if handle in job.bound:
        job.actions.append(Refuse(handle, "a second hello on one connection"))
        return
    if msg.version != PROTOCOL:
        why = (
            f"this marun speaks protocol {msg.version}, node {coord.leader}'s {PROTOCOL}: "
            "every node of a job needs the same marun version"
        )
        job.actions.append(TurnAway(handle, why))
        return
    old = job.members.get(key)
    if job.phase is JobPhase.DONE:
        pass  # the job's record is closed (job.json written): a late marun only hears `done`
    elif msg.started and not job.start_sent and msg.leader != job.instance:
        # Its job started under another coordinator: this node 0's marun is a new one. It is
        # taken in like any member (so that its end is waited for) and told to stop.
        _came_back(job, key, msg, None)
    elif old is not None and old.instance and msg.instance != old.instance:
        # Heard within its heartbeat interval and two more seconds (3 s in a small job).
        talking = old.conn is not None and job.now - old.last_seen < job.hb_every + 2 * HEARTBEAT
        if talking and old.conn != handle:
            # The node's marun is alive and talking: this one is somebody else's (another
            # job's with the same id and secret, or a second marun started by hand).
            why = (
                f"node {key[0]} slot {key[1]} is here already (its marun talks on another "
                "connection): this marun belongs to another job, or is one too many"
            )
            job.actions.append(TurnAway(handle, why))
            return
        _came_back(job, key, msg, old)
        old.instance = msg.instance
    elif old is not None and old.outcome == "lost":
        back(job, old)  # the same marun, on a new connection: it was frozen, not gone
    job.bound[handle] = key
    job.actions.append(Bind(handle, key))
    old = job.members.get(key)
    if old is not None:
        if old.conn is not None and old.conn != handle:
            job.actions.append(Drop(old.conn))
        old.conn = handle
        job.members.seen(key, old, job.now, job.wall)
        job.members.unlinked.discard(key)
        member = old
    else:
        member = _take_in(job, handle, address, msg)
    _welcome(job, member)


def _take_in(job: JobState, handle: Handle, address: str, msg: Hello) -> MemberState:
    """A node's slot that is new to the job: its state, and `node_arrived` and `N/M nodes up`
    when it is its node's last."""
    member = MemberState(
        node=msg.node,
        slot=msg.slot,
        host=msg.host,
        address=address,
        arrived=job.wall,
        last_seen=job.now,
        instance=msg.instance,
        last_seen_wall=job.wall,
        conn=handle,
        daemons_only=msg.daemons_only,
        place=spares.place_of_arrival(job, msg.node),
    )
    job.members[(msg.node, msg.slot)] = member  # counted per node (marun.job.roster)
    if job.members.node_complete(msg.node):  # this node's last device just arrived
        # One line a node, not a device: a line costs node 0 about 45 us, and 32,768 of them
        # were 1.5 s of its arrival at 4,096 x 8 (docs/performance.md).
        job.log("node_arrived", node=msg.node, host=member.host, slots=job.coord.slots)
        _nodes_up(job)
    return member


def _nodes_up(job: JobState) -> None:
    """`N/M nodes up` on node 0's console: every node in a small job; in a large one each tenth
    of the job, the last, and any other after ANNOUNCE_GAP without one (a line per node of
    1,024 says nothing more)."""
    up, nodes = job.members.complete, job.coord.nodes
    if nodes == 1:
        return  # (a job of one node: nothing to count)
    step = max(1, nodes // 10)
    last = job.announced_at
    if up == nodes or up % step == 0 or last is None or job.now - last >= ANNOUNCE_GAP:
        job.announced_at = job.now
        job.actions.append(Announce(f"marun: {up}/{nodes} nodes up"))


def _welcome(job: JobState, member: MemberState) -> None:
    """Tell a member where the job is; the last to arrive opens the barrier (RUNNING)."""
    # One object for the hellos of a millisecond (the clock on the wire is to the millisecond):
    # the port encodes and keys an HMAC for each new one (marun.job.wire_out)
    welcome, wall = job.welcome, round(job.wall, 3)
    if welcome is None or welcome.wall != wall:
        welcome = job.welcome = Welcome(job.instance, wall)
    job.send(member, welcome)
    # (DONE: the job's exit code is set, marun.job.machine)
    if job.stopped is not None:
        job.send(member, job.stopped)
        if job.phase is JobPhase.DONE:
            job.send(member, Done(job.exit_code or 0))
    elif job.phase is JobPhase.DONE:
        job.send(member, Done(job.exit_code or 0))
    elif job.phase is JobPhase.RESTARTING:
        if member.stopped_round < job.round:  # it may not have heard (a reconnection)
            job.send(member, Restart(job.round, round_barrier.round_cause(job)))
    elif job.start_sent:
        if not spares.on(job):
            job.send(member, round_barrier.start_of_round(job))
        elif member.place is not None:  # (a spare hears of nothing until it has a place)
            spares.send_place(job, member, round_barrier.start_of_round(job))
    elif all_present(job):
        open_barrier(job)


def open_barrier(job: JobState, *, timed_out: bool = False) -> None:
    """Every node is here: the start, once the preflight (when one runs) says so; `timed_out`:
    arrival_timeout came first, and it decides on what came (marun.job.preflight_barrier)."""
    notes: list[str] = []
    if job.preflight != "off":
        if not timed_out and not preflight_barrier.complete(job):
            return  # the last reports and links are on their way
        if not preflight_barrier.decide(job):
            return  # refused: stopped, no rank starts anywhere
        notes = preflight_barrier.notes(job)
    job.start_at = job.now
    job.enter(JobPhase.RUNNING)
    job.log("job_start", nodes=job.coord.nodes)
    spares.send_start(job, Start(0, {}, tuple(notes)) if notes else Start(0, {}))


def all_present(job: JobState) -> bool:
    """Every node's every slot is here now: a member whose connection closed since the last tick
    is forgotten first (the barrier never opens on a node that left, e.g. a marun that took a
    frozen node's place and went away again before the tick)."""
    if len(job.members) < job.expected:
        return False
    forget_departed(job)
    return len(job.members) == job.expected


def _came_back(job: JobState, key: Key, msg: Hello, old: MemberState | None) -> None:
    """A node's marun that is not the one the job had: `old` is the node's earlier one, or None
    when node 0's is the new one (the member's job started under another).

    The one place that decides what a node that comes back does. Before the start: the pod was
    recreated while the job gathered; the new marun takes the old one's place. After the start,
    with a restart round left (or one under way): the new marun joins the round
    (marun.job.round_barrier). Otherwise the job's ranks cannot take a new node in, so the job
    fails, naming it; the new marun is taken in and told to stop with everybody else."""
    leader = old is None
    node = job.coord.leader if leader else key[0]
    host = job.coord.host if leader else msg.host
    if old is not None:
        old.leaving = False  # (the earlier marun's: a new one leaves nothing)
    if old is not None and job.phase is JobPhase.GATHERING:
        job.log("node_replaced", "warning", node=key[0], slot=key[1], host=host)
        old.ended = old.outcome = old.exit_code = None
        return
    if old is not None and old.place is None and spares.on(job):
        # Its place went to a spare (or it never had one): the new marun is a spare.
        old.ended = old.outcome = old.exit_code = None
        old.released = False
        job.log("spare_arrived", "info", node=key[0], host=host)
        return
    why = f"node {node} came back after the start: its earlier marun was lost"
    if old is not None and round_barrier.rejoin(job, key, ran=msg.started):
        return  # admitted into the restart round
    job.log("node_came_back", "error", node=node, slot=key[1], host=host)
    if job.stopped is None:
        job.stop(LOST_EXIT, Failure(node=node, host=host, exit_code=LOST_EXIT, why=why))
    if old is not None and old.outcome == "lost":
        old.ended = old.outcome = None  # the new marun reports how it ends


def forget_departed(job: JobState) -> None:
    """Before the start, a node whose connection is gone is not present: the barrier waits for
    it again (its marun reconnects, or its pod is recreated); it never opens on a node that
    left. Only the members whose connection closed since the last look are looked at (noted as
    each closes), not every member every tick."""
    closed, job.members.closed = job.members.closed, set()
    for key in closed:
        member = job.members.get(key)
        if member is not None and member.conn is None and member.ended is None:
            del job.members[key]
            job.log("node_departed", "warning", node=key[0], slot=key[1], host=member.host)


def arrival_failed(job: JobState) -> None:
    coord = job.coord
    missing, first = [], None
    for node in range(coord.nodes):
        slots = [s for s in range(coord.slots) if (node, s) not in job.members]
        if slots:
            first = node if first is None else first
            host = coord.hosts[node] if node < len(coord.hosts) else "?"
            part = f"node {node} ({host})"
            if coord.slots > 1:
                part += f" slots {','.join(map(str, slots))}"
            missing.append(part)
    why = (
        f"{len(missing)} of {coord.nodes} nodes missing after {coord.arrival_timeout:g}s: "
        f"{'; '.join(missing)} never reported to {coord.host}:{coord.port}"
    )
    job.stop(LOST_EXIT, Failure(node=first, exit_code=LOST_EXIT, why=why))


def lost(job: JobState, member: MemberState, why: str = "") -> None:
    """A node silent for peer_timeout, or whose connection closed without a goodbye: a restart
    round, else the job's failure."""
    failure = Failure(
        node=member.node,
        host=member.host,
        exit_code=LOST_EXIT,
        why=f"node {member.node} ({member.host}) lost: "
        + (why or f"no word from its marun for {job.coord.peer_timeout:g}s"),
    )
    if member.place is None and spares.on(job):
        job.log("spare_lost", "warning", node=member.node, host=member.host)  # no place: no round
    else:
        # Every loss in the events file, a second one during a round too (it makes no round of
        # its own, and without this line nothing would say when node 0 found it).
        job.log(
            "node_lost",
            "warning",
            node=member.node,
            slot=member.slot,
            host=member.host,
            why=failure.why,
        )
        if job.stopped is None and job.phase is not JobPhase.RESTARTING:
            unrestarted = round_barrier.restart(job, LOST_EXIT, failure, None)
            if unrestarted is not None:
                job.stop(LOST_EXIT, unrestarted)
    # It ended when it was last heard of, not when node 0 noticed (node 0 may have been frozen
    # meanwhile).
    member.ended = member.gave_up_at or member.last_seen_wall or job.wall
    member.outcome = "lost"
    member.lost_why = failure.why or ""


def back(job: JobState, member: MemberState) -> None:
    """A node declared lost whose same marun talks again (it was frozen, e.g. SIGSTOP, or
    starved past peer_timeout): it is counted again. A round under way counts it once it says
    `stopped`; a stopped job waits for its end; its loss stays the round's cause (one incident,
    one round)."""
    member.ended = member.outcome = None
    member.lost_why = ""
    job.log("node_back", "warning", node=member.node, slot=member.slot, host=member.host)
    if member.lost_place is not None and member.place is None:
        spares.dismiss(job, member)  # its place went to a spare: its ranks must not run on
