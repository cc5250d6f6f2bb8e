"""Node 0's hang watchdog in the job machine's tick (marun.job.hang judges): once the job is
hung, every node's stacks are gathered (and written into each rank's log), then the job stops
with HANG_EXIT and the reason, or a restart round begins."""

from __future__ import annotations

from marun.exit_codes import HANG_EXIT
from marun.job import round_barrier
from marun.job.hang import describe_stacks
from marun.job.job_state import JobState
from marun.job.messages import Dump
from marun.job.phases import JobPhase
from marun.runtime.failure import Failure

DUMP_WAIT = 15.0  # seconds the watchdog waits for every node's stacks


def watch_hang(job: JobState) -> None:
    """marun.job.hang judges; once hung, every node's stacks are gathered (and written into
    each rank's log) and the job stopped with HANG_EXIT and the reason."""
    watched = job.hang is not None or job.progress is not None or job.dump_since is not None
    if not watched or job.stopped is not None:
        return
    running = [m for m in job.members.values() if m.ended is None and not m.daemons_only]
    if not running:
        return
    now = job.now
    if job.phase is JobPhase.RUNNING:
        idle = min(m.idle + (now - m.last_seen) for m in running)
        why = None if job.hang is None else job.hang.tick(running, idle, now)
        if why is None and job.progress is not None:
            # the ranks print on, but their steps stand still (--progress-timeout)
            last_line = max(m.last_seen - m.idle for m in running)
            why = job.progress.stalled(now, last_line)
        if why is not None:
            job.hang_why, job.dump_since = why, now
            job.enter(JobPhase.DUMPING)
            for m in running:
                m.stacks = None
            job.log("job_hang", "error", idle_seconds=round(idle, 1), why=why)
            job.broadcast(Dump(False))
        return
    have = all(m.stacks is not None for m in running)
    if have or now - (job.dump_since or now) >= DUMP_WAIT:
        failure = Failure(exit_code=HANG_EXIT, why=job.hang_why, stacks=describe_stacks(running))
        unrestarted = round_barrier.restart(job, HANG_EXIT, failure, None)
        if unrestarted is not None:
            job.stop(HANG_EXIT, unrestarted)
