"""Node 0's restart rounds (docs/supervision.md, "Restart rounds"), as moves of the job's state
(marun.job.job_state): a failure anywhere with rounds left (marun.runtime.round_rule.RoundRule says)
sends `restart {round, cause}`; every node stops its ranks and says `stopped {round}`; when every
node of the job has (a node whose marun was replaced counts once its new marun is here: it runs
nothing), `start {round, ports}` goes out, each node starts its ranks again and says `running
{round, ranks}`; when all have, the round's line is printed. job.json lists every round.

The phase goes RUNNING (or DUMPING) -> RESTARTING -> RUNNING: the one cycle in marun.job.phases.
"""

from __future__ import annotations

from marun.exit_codes import LOST_EXIT, failure_exit
from marun.job import spares
from marun.job.actions import Announce, Key
from marun.job.job_state import JobState, RoundRecord
from marun.job.messages import Restart, Start
from marun.job.phases import JobPhase
from marun.job.roster import MemberState
from marun.runtime.failure import Failure
from marun.runtime.round_rule import describe_cause, round_line, round_ports


def restart(job: JobState, code: int, failure: Failure, uptime: float | None) -> Failure | None:
    """A new round for `failure` (None), or the failure with why none follows it: the caller
    stops the job with that."""
    if job.rule is None or job.phase not in (JobPhase.RUNNING, JobPhase.DUMPING):
        return failure
    finished = next(
        (m for m in spares.holders(job) if m.outcome == "succeeded" and not m.daemons_only),
        None,
    )
    if finished is not None:
        why = f"node {finished.node}'s ranks have finished: a round needs every node's"
    else:
        why = job.rule.next_round(code if failure.of_a_process else None, uptime) or ""
    if why:
        job.log("no_restart_round", "error", why=why)
        return failure.but(no_restart=why)
    _begin(job, failure)
    return None


def _begin(job: JobState, failure: Failure) -> None:
    job.enter(JobPhase.RESTARTING)
    job.round_since = job.now
    job.rounds.append(RoundRecord(job.round, failure.cause(), job.wall, failure.stacks))
    job.round_failure = failure
    job.new_hang_judge()
    job.progress = None  # the next round's steps are its own (resumed from a checkpoint, or not)
    cause = job.rounds[-1].cause
    job.log("job_restart", "info", round=job.round, cause=describe_cause(cause))
    job.broadcast(Restart(job.round, cause))


def round_cause(job: JobState) -> Failure | None:
    return job.rounds[-1].cause if job.rounds else None


def start_of_round(job: JobState) -> Start:
    """The `start` of the current round, with its ports, and the lines every node's console
    shows with it (a spare that took a lost node's place)."""
    said = tuple(job.rounds[-1].said) if job.round and job.rounds else ()
    return Start(job.round, {k: str(v) for k, v in job.round_ports.items()}, said)


def rejoin(job: JobState, key: Key, ran: bool = False) -> bool:
    """A marun for a node after the start that is not the one the job had (its pod recreated):
    admitted into the next round when there is one (True); else the caller fails the job. `ran`:
    its hello says the job had started for it, so it may still run ranks (the node's own marun,
    whose place another took meanwhile): it is told the round like any node and counted once it
    says `stopped`; a new one runs nothing and is counted at once."""
    member = job.members[key]
    if job.rule is None or job.stopped is not None:
        return False
    if job.phase is not JobPhase.RESTARTING:
        why = (
            f"node {key[0]}'s marun was replaced after the start (its pod recreated): its "
            "ranks are gone"
        )
        failure = Failure(node=key[0], host=member.host, exit_code=LOST_EXIT, why=why)
        if restart(job, LOST_EXIT, failure, None) is not None:
            return False
    member.ended = member.outcome = member.exit_code = None
    # A new marun runs nothing yet; one that ran is counted once it says so (what another marun
    # in its place said before does not count for it).
    member.stopped_round = job.round if not ran else min(member.stopped_round, job.round - 1)
    job.log("node_rejoined", "info", node=key[0], slot=key[1], round=job.round)
    return True


def check_round(job: JobState) -> None:
    """RESTARTING: the barrier (every node's `stopped`), or the round's failure."""
    if job.phase is not JobPhase.RESTARTING:
        return
    leader = job.members.get((job.coord.leader, 0))
    if leader is None or leader.ended is not None:
        _failed(job, f"node {job.coord.leader}'s marun ended during the round")
        return
    finished = next((m for m in spares.holders(job) if m.outcome == "succeeded"), None)
    if finished is not None:  # it will not come back for the round: no point waiting
        _failed(
            job,
            f"node {finished.node}'s ranks finished during the round: a round needs every node's",
        )
        return
    if spares.on(job):
        spares.substitute(job)  # a lost node's place to a free spare (counted at once)
        nodes = [job.places[p] for p in range(spares.places(job))]
    else:
        nodes = list(range(job.coord.nodes))
    waiting = [
        f"node {n} slot {s}" if job.coord.slots > 1 else f"node {n}"
        for n in nodes
        for s in range(job.coord.slots)
        if not _stopped_for_round(job, (n, s))
    ]
    if not waiting:
        _start(job)
    elif job.now - job.round_since > job.coord.arrival_timeout:
        _failed(
            job,
            f"round {job.round}: {', '.join(waiting[:8])} not back within arrival_timeout "
            f"{job.coord.arrival_timeout:g}s",
        )


def _stopped_for_round(job: JobState, key: Key) -> bool:
    member = job.members.get(key)
    return (
        member is not None
        and member.conn is not None
        and member.ended is None
        and member.stopped_round >= job.round
    )


def _failed(job: JobState, why: str) -> None:
    failure = job.round_failure
    code = failure_exit(failure.exit_code, LOST_EXIT)
    job.log("round_failed", "error", round=job.round, why=why)
    job.stop(code, failure.but(no_restart=why))


def _start(job: JobState) -> None:
    job.rounds[-1].stopped_at = job.wall
    moved = round_ports(
        job.ports, tuple(job.ports), job.round, avoid=job.coord.port, before=job.round_ports
    )
    job.round_ports = {k: int(v) for k, v in moved.items()}
    for key, member in job.members.items():
        member.idle = 0.0
        job.members.seen(key, member, job.now)  # a node's silence counts from the round's start
    job.enter(JobPhase.RUNNING)  # the cycle's way back (marun.job.phases)
    job.log("job_round_start", round=job.round, ports=job.round_ports)
    spares.send_start(job, start_of_round(job))


def on_running(job: JobState, member: MemberState, round_: int, ranks: int) -> None:
    """A node's `running`: the round's line once every node's ranks run again."""
    if round_ != job.round or not job.rounds:
        return
    member.running_round, member.ranks = round_, max(0, ranks)
    record = job.rounds[-1]
    if record.running_at is not None:
        return
    holding = spares.holders(job)
    if any(m.running_round < round_ or m.ended is not None for m in holding):
        return
    record.running_at = job.wall
    record.ranks = sum(m.ranks for m in holding)
    took = record.running_at - record.detected_at
    budget = job.rule.budget if job.rule is not None else 0
    job.actions.append(
        Announce(
            f"{round_line(round_, budget, record.cause)} (all {record.ranks} ranks "
            f"running again in {took:.2f}s)"
        )
    )
