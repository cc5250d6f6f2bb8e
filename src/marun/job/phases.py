"""The states of the job's coordination, written down (docs/supervision.md, "The protocol's
states"), as the supervisor's `Phase` and torch elastic's `WorkerState` are.

`JobPhase`, node 0's coordinator's view of the whole job; transitions only go forward:

    GATHERING --(every node arrived: `start` sent)--> RUNNING
    GATHERING --(a node failed, left, was stopped; arrival_timeout)--> STOPPING
    RUNNING   --(the hang watchdog judged the job hung: `dump` sent)--> DUMPING
    RUNNING   --(a failure, a lost node, a node back after the start; only daemons left)--> STOPPING
    DUMPING   --(every node's stacks came, or the wait for them ran out)--> STOPPING
    RUNNING, DUMPING --(a failure, a lost or replaced node, a hang; a round left: `restart`
                        sent)--> RESTARTING
    RESTARTING --(every node said `stopped`: `start` of the round sent)--> RUNNING
    RESTARTING --(not all back within arrival_timeout; node 0's marun or a finished node
                  ended)--> STOPPING
    RUNNING   --(every node ended on its own)--> DONE
    STOPPING  --(every node that arrived has ended)--> DONE

`stop` is sent once, on entering STOPPING (with the job's exit code and first failure); `done`
once, on entering DONE (with the job's exit code). job.json is written after DONE. RESTARTING ->
RUNNING is the one transition back (marun.job.round_barrier), each time with a higher round.

`MemberPhase`, every node's marun's view; also only forward:

    WAITING  --(`start` from node 0)--> RUNNING
    WAITING  --(`stop` from node 0; node 0 never answered: arrival + peer timeout)--> STOPPING
    RUNNING  --(`stop` from node 0; node 0 silent for peer_timeout: lost)--> STOPPING
    RUNNING  --(`restart` of a round from node 0)--> RESTARTING
    RESTARTING --(`start` of that round, after this node said `stopped`)--> RUNNING
    RESTARTING --(`stop` from node 0)--> STOPPING
    any      --(`done` from node 0, or node 0 lost)--> DONE

A node's supervisor starts nothing before RUNNING and begins its own stop on STOPPING.
"""

from __future__ import annotations

from enum import Enum

from marun.runtime.transitions import Transitions


class JobPhase(Enum):
    GATHERING = "gathering"
    RUNNING = "running"
    DUMPING = "dumping"  # hung: waiting for every node's stacks before the stop
    RESTARTING = "restarting"  # a restart round: waiting for every node's ranks to be gone
    STOPPING = "stopping"
    DONE = "done"


class MemberPhase(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    RESTARTING = "restarting"  # a restart round: this node stops its ranks, then waits
    STOPPING = "stopping"
    DONE = "done"


# The moves above as tables (marun.runtime.transitions): every phase change goes through them.
JOB_MOVES: Transitions[JobPhase] = Transitions(
    "job (node 0)",
    JobPhase.GATHERING,
    {
        JobPhase.GATHERING: (JobPhase.RUNNING, JobPhase.STOPPING),
        JobPhase.RUNNING: (JobPhase.DUMPING, JobPhase.RESTARTING, JobPhase.STOPPING, JobPhase.DONE),
        JobPhase.DUMPING: (JobPhase.RESTARTING, JobPhase.STOPPING, JobPhase.DONE),
        JobPhase.RESTARTING: (JobPhase.RUNNING, JobPhase.STOPPING),
        JobPhase.STOPPING: (JobPhase.DONE,),
        JobPhase.DONE: (),
    },
)

MEMBER_MOVES: Transitions[MemberPhase] = Transitions(
    "member (every node's link)",
    MemberPhase.WAITING,
    {
        MemberPhase.WAITING: (MemberPhase.RUNNING, MemberPhase.STOPPING, MemberPhase.DONE),
        MemberPhase.RUNNING: (MemberPhase.RESTARTING, MemberPhase.STOPPING, MemberPhase.DONE),
        MemberPhase.RESTARTING: (MemberPhase.RUNNING, MemberPhase.STOPPING, MemberPhase.DONE),
        MemberPhase.STOPPING: (MemberPhase.DONE,),
        MemberPhase.DONE: (),
    },
)
