"""The supervisor's phases (`Phase`), only forward; docs/supervision.md, "Signals and phases"."""

from __future__ import annotations

from enum import Enum

from marun.runtime.transitions import Transitions


class Phase(Enum):
    """Where the supervisor is in a job's life (like torch elastic's `WorkerState`).

    ARRIVING  the node waits for the job's `start` (every node has arrived; a job of one node
              says it at once, marun.job.local_job): nothing runs yet. A stop from the job or a
              stop signal moves on to STOPPING.
    RUNNING   processes start, fail, restart; the first cause of the end moves on to STOPPING.
    RESTARTING  a restart round (docs/supervision.md): this node's non-daemon processes were sent
              the stop signal (SIGKILL after grace_period); once they are all gone, ARRIVING
              for the round's `start` from the job.
    STOPPING  the stop signal was sent to everything; waiting `grace_period` for it to go.
    KILLING   SIGKILL was sent to what was left; waiting up to `KILL_WAIT` for the kernel.
    GAVE_UP   processes outlived SIGKILL (stuck in the kernel): marun stops waiting and ends.

    Transitions only go forward: ARRIVING -> RUNNING -> STOPPING -> KILLING -> GAVE_UP, and
    ARRIVING -> STOPPING, RESTARTING -> STOPPING; but for the one cycle of restart rounds,
    RUNNING -> RESTARTING -> ARRIVING -> RUNNING, each time with a higher round number. The loop
    ends once the phase is past the live ones (STOPPING, KILLING) and no child is left, or at
    GAVE_UP.
    """

    ARRIVING = "arriving"
    RUNNING = "running"
    RESTARTING = "restarting"
    STOPPING = "stopping"
    KILLING = "killing"
    GAVE_UP = "gave up"


KILL_WAIT = 10.0  # after SIGKILL, how long to wait for the kernel to take processes away
TICK = 0.5  # at most this long between checks, so nothing depends on a single wake-up
# fail_fast off (marun simulate's nodes, which stop one another as one job): after the first
# failure, how long beyond grace_period the others get to end by the job's own stop before they
# are stopped here. It covers a heartbeat or two and their own SIGKILL wait; a node that failed
# before its job existed (exit 2 at plan time) would otherwise leave the others waiting out
# arrival_timeout + peer_timeout.
OTHERS_MARGIN = 15.0

# The phases before the stop: a failure, a signal or node 0's stop still decides the end.
LIVE = (Phase.ARRIVING, Phase.RUNNING, Phase.RESTARTING)

# The moves above as a table (marun.runtime.transitions): every phase change goes through it.
SUPERVISOR_MOVES: Transitions[Phase] = Transitions(
    "supervisor (one node's processes)",
    Phase.ARRIVING,
    {
        Phase.ARRIVING: (Phase.RUNNING, Phase.STOPPING),
        Phase.RUNNING: (Phase.RESTARTING, Phase.STOPPING),
        Phase.RESTARTING: (Phase.ARRIVING, Phase.STOPPING),
        Phase.STOPPING: (Phase.KILLING,),
        Phase.KILLING: (Phase.GAVE_UP,),
        Phase.GAVE_UP: (),
    },
)
