"""Hot spares on node 0's side (docs/supervision.md, "Hot spares"; the plan's side:
marun.plan.spares), as moves of the job's state (marun.job.job_state).

The job trains on `places` (N of them); each place is held by one node of the N+K the platform
started. At the start node i holds place i (i < N); the others are spares: here, connected, told
nothing but `welcome` (no `start`: they run nothing). When a restart round waits for a place whose
node is lost, a spare takes it and is counted in the round's barrier at once (it runs nothing
yet); the round's `start` goes to it after `place {j}`, and its marun plans itself as place j.
A node that lost its place and comes back (the same marun, or its pod recreated) is a spare from
then on; the same marun, which may still run place j's ranks, is told to stop. Node 0 holds place
0 for good: its marun is the job's coordinator.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from marun.exit_codes import LOST_EXIT
from marun.job.messages import Done, LeaderMessage, Place, Start, StopJob
from marun.runtime.failure import Failure

if TYPE_CHECKING:
    from marun.job.job_state import JobState
    from marun.job.roster import MemberState


def on(job: JobState) -> bool:
    return job.coord.spares > 0


def places(job: JobState) -> int:
    """N: the places the job trains on."""
    return job.coord.nodes - job.coord.spares


def place_of_arrival(job: JobState, node: int) -> int | None:
    """The place of a node that arrives: its own index while that place is its own."""
    if not on(job):
        return node
    return node if job.places.get(node) == node else None


def holders(job: JobState) -> list[MemberState]:
    """The members that hold a place (every member without spares)."""
    return [m for m in job.members.values() if m.place is not None]


def free(job: JobState) -> list[MemberState]:
    """The spares that can take a place now: here, talking, ended not."""
    return sorted(
        (
            m
            for m in job.members.values()
            if m.place is None and m.conn is not None and m.ended is None and m.outcome is None
        ),
        key=lambda m: m.node,
    )


def leaving(job: JobState, member: MemberState) -> bool:
    """Whether a stop signal to `member`'s marun means its node leaves its place (True) rather
    than the job's stop: with spares, after the start, a node that holds a place and is not node
    0 (the platform deletes a pod to replace a broken machine; a job's deletion signals node 0
    too, which stops the job)."""
    from marun.job.phases import JobPhase

    return (
        on(job)
        and job.start_sent
        and job.stopped is None
        and member.place is not None
        and member.node != job.coord.leader
        and job.phase in (JobPhase.RUNNING, JobPhase.DUMPING, JobPhase.RESTARTING)
    )


def send_start(job: JobState, start: Start) -> None:
    """The round's `start`: to every node without spares (one line, signed once); with them, to
    the holders only, each told its place first (a spare's marun plans itself from it)."""
    if not on(job):
        job.broadcast(start)
        return
    for member in holders(job):
        send_place(job, member, start)


def send_place(job: JobState, member: MemberState, then: LeaderMessage | None = None) -> None:
    assert member.place is not None
    job.send(member, Place(member.place))
    if isinstance(then, Start):
        then = replace(then, hosts=placed_hosts(job))
    if then is not None:
        job.send(member, then)


def placed_hosts(job: JobState) -> tuple[tuple[int, str], ...]:
    """(place, host) of every place a node other than its own holds (a spare took it): what
    node 0's mpirun hostfile and every TF_CONFIG say for that place (marun.plan.place_hosts)."""
    out = []
    for place, node in sorted(job.places.items()):
        holder = job.members.get((node, 0)) if node != place else None
        if holder is not None:
            out.append((place, holder.host))
    return tuple(out)


def substitute(job: JobState) -> None:
    """RESTARTING: every place whose node is lost goes to a free spare (lowest index first)."""
    spare_pool = free(job)
    for place in range(places(job)):
        if not spare_pool:
            return
        node = job.places.get(place)
        holder = job.members.get((node, 0)) if node is not None else None
        if holder is not None and holder.outcome != "lost" and not holder.leaving:
            continue
        if place == job.coord.leader:
            continue  # node 0's marun is the coordinator: its loss is the job's end
        spare = spare_pool.pop(0)
        spare.stopped_round = job.round  # it runs nothing: counted in the barrier at once
        _hand_over(job, place, holder, spare)
        lost_host = holder.host if holder is not None else "?"
        record = job.rounds[-1] if job.rounds else None
        # why it was lost: its own loss's reason, else the round's cause (a stop signal)
        why = _why_lost(holder.lost_why if holder is not None else None)
        why = why or _why_lost(record.cause.why if record and record.cause else None)
        if record is not None:
            record.substitutions.append(
                {"place": place, "lost": node, "lost_host": lost_host, "spare": spare.node,
                 "spare_host": spare.host}
            )  # fmt: skip
        job.log("spare_placed", place=place, lost=node, spare=spare.node)
        if record is not None:
            # On every node's console with the round's `start` (round_barrier.start_of_round),
            # as its `place` goes to the spare with it (send_start).
            record.said.append(
                f"node {node} ({lost_host}) lost{why}; spare node {spare.node} "
                f"({spare.host}) takes its place in round {job.round}"
            )


def replace_refused(job: JobState, refused: dict[int, str]) -> list[dict[str, Any]] | None:
    """The preflight refused the start for `refused` nodes (node -> its first finding's line):
    with a spare it passed for each refused node that holds a place, each such place goes to one
    before round 0 (lowest place, lowest spare first), every refused node (a spare too) is told to
    stop, and the job starts (the substitutions returned). None: it cannot (node 0 refused, or
    too few spares passed), and the refusal stands."""
    if not on(job) or job.coord.leader in refused:
        return None
    healthy = [m for m in free(job) if m.node not in refused]
    losing = sorted((m for m in holders(job) if m.node in refused), key=lambda m: m.place or 0)
    if len(healthy) < len(losing):
        return None
    done: list[dict[str, Any]] = []
    for holder, spare in zip(losing, healthy):
        place = holder.place
        assert place is not None
        _hand_over(job, place, holder, spare)
        done.append(
            {"place": place, "refused": holder.node, "refused_host": holder.host,
             "spare": spare.node, "spare_host": spare.host}
        )  # fmt: skip
        job.log("spare_placed", place=place, refused=holder.node, spare=spare.node)
    for member in job.members.values():
        if member.node in refused and member.ended is None:
            why = (
                f"node {member.node} ({member.host}) refused by the preflight "
                f"({refused[member.node][:300]}): "
                + ("its place went to a spare; " if member.lost_place is not None else "")
                + "this marun ends"
            )
            failure = Failure(node=member.node, host=member.host, exit_code=LOST_EXIT, why=why)
            job.send(member, StopJob(LOST_EXIT, failure))
    return done


def _hand_over(job: JobState, place: int, holder: MemberState | None, spare: MemberState) -> None:
    """`place` goes from `holder` (if any is known) to `spare` (substitute, replace_refused)."""
    spare.place, job.places[place] = place, spare.node
    if holder is not None:
        holder.place, holder.lost_place = None, place
        # A place's processes are the same on any node (an MPI node's sshd alone, a TF
        # parameter server): the spare's are daemons only where the holder's were.
        spare.daemons_only = holder.daemons_only


def _why_lost(why: str | None) -> str:
    if not why or " lost: " not in why:
        return ""
    return f" ({why.split(' lost: ', 1)[-1][:160]})"


def dismiss(job: JobState, member: MemberState) -> None:
    """The same marun of a node whose place went to a spare talks again (it was frozen): its
    ranks, if any still run, hold a place that is another's now. It is told to stop."""
    why = (
        f"node {member.node}'s place went to a spare while it was lost: this marun ends "
        "(its pod, if recreated, waits as a spare)"
    )
    job.log("spare_dismissed", "warning", node=member.node)
    job.send(member, StopJob(LOST_EXIT, Failure(node=member.node, host=member.host, why=why)))


def left(job: JobState, member: MemberState) -> None:
    """A member without a place said its end (a spare stopped by a signal, or told the job's
    end, or a dismissed node): nothing of the job waits for it; it hears `done` at once."""
    job.log("spare_left", "info", node=member.node, outcome=member.outcome)
    if job.stopped is not None and job.exit_code is not None:
        job.send(member, Done(job.exit_code))  # the job's end came first: its code
    else:
        job.send(member, Done(member.exit_code or 0))  # it left a live job: its own


def release(job: JobState) -> None:
    """Every place's node has ended: the spares are told the job's end (once each)."""
    code = next((m.exit_code for m in holders(job) if m.exit_code), 0)
    for member in job.members.values():
        if member.place is None and member.ended is None and not member.released:
            member.released = True
            job.send(member, StopJob(code, None))
