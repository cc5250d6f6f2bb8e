"""Node 0's view of the job as data (`JobState`), with the few moves every part of the job's
logic makes: change phase (checked against marun.job.phases.JOB_MOVES), stop the job once, and
ask the shell for something (marun.job.actions). No sockets, threads, clocks or processes: the
time of the event being handled is `now` (monotonic) and `wall` (time.time()), set by
marun.job.machine before each event."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from marun.job.actions import Action, Broadcast, Key, Log, Send
from marun.job.hang import HangJudge
from marun.job.heartbeat import job_interval
from marun.job.messages import Dump, LeaderMessage, StopJob, Welcome
from marun.job.phases import JOB_MOVES, JobPhase
from marun.job.roster import MemberState, Roster
from marun.plan.coordination import Coordination
from marun.runtime.failure import Failure
from marun.runtime.round_rule import RoundRule


@dataclass
class RoundRecord:
    """One restart round as job.json keeps it: its cause; when it was detected, when every rank
    was stopped (the barrier) and when every rank was running again, in wall-clock seconds
    (time.time()), so that a tool can subtract them; how many ranks it started."""

    round: int
    cause: Failure
    detected_at: float
    stacks: str | None = None
    stopped_at: float | None = None
    running_at: float | None = None
    ranks: int | None = None
    # hot spares (marun.job.spares): each place a spare took in this round
    substitutions: list[dict[str, Any]] = field(default_factory=list)
    said: list[str] = field(default_factory=list)  # their lines, for every node's console

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"round": self.round, "cause": self.cause.to_wire()}
        if self.stacks:
            out["stacks"] = self.stacks
        if self.substitutions:
            out["substitutions"] = list(self.substitutions)
        for key in ("detected_at", "stopped_at", "running_at"):
            value = getattr(self, key)
            out[key] = None if value is None else round(value, 3)
        out["ranks"] = self.ranks
        return out


class JobState:
    # the last welcome made (admission._welcome): one object for the hellos of a millisecond
    # (a relay's `hellos` line's slots, and the nodes read in it), known to the port by identity
    # (32,768 made and compared per slot were 5% of node 0's arrival at 4,096 x 8)
    welcome: Welcome | None = None

    def __init__(
        self,
        coord: Coordination,
        instance: str,
        rule: RoundRule | None,
        ports: dict[str, str],
        now: float,
        wall: float,
        preflight: str = "off",
        fail_fast: bool = True,
    ) -> None:
        self.coord = coord
        # off: a failure no round follows does not stop the job; its nodes end on their own and
        # the first failure's code is the job's (a simulator's outer job of `marun run`s, which
        # stop one another as one job: marun.sim.shared.outer_supervision)
        self.fail_fast = fail_fast
        self.instance = instance  # the coordinator's: a restarted node 0 has another
        self.members = Roster(coord.slots)
        self.bound: dict[Any, Key] = {}  # connection -> the member its hello was taken for
        self.hb_every = job_interval(coord)  # both sides' heartbeat interval
        self.now, self.wall = now, wall
        self.t0, self.started_at = now, wall
        # Seconds node 0's own marun did not run (gaps of LOOK or more between its loop's looks):
        # `now` is the job's clock less these, so a member's silence counts only while node 0
        # ran (frozen with node 0, its own slot is not silent; nor is anyone whose lines waited).
        self.not_run = 0.0
        self.phase = JobPhase.GATHERING
        self.start_at: float | None = None  # when `start` went out (None: never)
        self.stopped: StopJob | None = None  # the stop sent on entering STOPPING
        self.stopped_at = 0.0
        self.first_failure: Failure | None = None
        self.exit_code: int | None = None
        self.announced_at: float | None = None  # the last `N/M nodes up`
        # the hang watchdog (marun.job.hang): DUMPING since, and why
        self.hang: HangJudge | None = None
        self.dump_since: float | None = None
        self.hang_why = ""
        # restart rounds (marun.job.round_barrier); `ports`: round 0's of those that move
        self.rule = rule if rule is not None and rule.budget > 0 else None
        self.ports = dict(ports)
        self.round_ports: dict[str, int] = {}
        self.rounds: list[RoundRecord] = []  # job.json's records, one per round
        self.round_since = 0.0
        self.round_failure = Failure()  # the job's failure if the round cannot start
        # hot spares (marun.job.spares): place -> the node that holds it
        self.places = {i: i for i in range(coord.nodes - coord.spares)}
        # the preflight at the start barrier (marun.job.preflight_barrier); "off": none
        self.preflight = preflight
        self.pf_reports: dict[int, Any] = {}  # node -> marun.preflight.result.NodeReport
        self.pf_links: dict[int, Any] = {}  # node -> its LinkResult (its probe of the next)
        self.pf_probed: set[int] = set()  # nodes told their target
        self.pf_decision: Any = None  # marun.preflight.decide.Decision, once decided
        self.pf_seconds: float | None = None  # last arrival -> the decision
        # hot spares: the places that went to a spare because the preflight refused their node
        self.pf_replaced: list[dict[str, Any]] = []
        # the job's progress from the nodes' heartbeats (marun.progress.aggregate.Aggregator,
        # made on the first report: a job whose ranks print no steps imports none of it)
        self.progress: Any = None
        self.actions: list[Action] = []
        self.new_hang_judge()

    @property
    def expected(self) -> int:
        return self.coord.nodes * self.coord.slots

    @property
    def start_sent(self) -> bool:
        return self.start_at is not None

    @property
    def round(self) -> int:
        return 0 if self.rule is None else self.rule.round

    def new_hang_judge(self) -> None:
        """A judge with no memory: at the start, and at each restart round's."""
        if self.coord.hang_timeout is not None:
            self.hang = HangJudge(
                self.coord.hang_timeout,
                lambda sample: self.broadcast(Dump(sample)),
                self.log,
            )
        self.dump_since = None

    # -- asking the shell ---------------------------------------------------------------------

    def log(self, event: str, level: str = "info", **fields: Any) -> None:
        self.actions.append(Log(event, level, fields))

    def send(self, member: MemberState, message: LeaderMessage) -> None:
        self.actions.append(Send((member.node, member.slot), message))

    def broadcast(self, message: LeaderMessage) -> None:
        self.actions.append(Broadcast(message))

    # -- the moves ------------------------------------------------------------------------------

    def enter(self, phase: JobPhase) -> None:
        """The one place the phase changes, checked against marun.job.phases.JOB_MOVES."""
        self.phase = JOB_MOVES.move(self.phase, phase, self.log)

    def stop(self, code: int, failure: Failure) -> None:
        """The job ends with `code`: `stop` to every node, once (STOPPING)."""
        if self.stopped is not None:
            return
        self.first_failure = failure
        self.exit_code = code
        self.stopped = StopJob(code, failure)
        self.stopped_at = self.now
        self.enter(JobPhase.STOPPING)
        # `failed_node`, not `node`: every other event's `node` is the node that logs it.
        where: dict[str, Any] = {}
        if failure.why:
            where["why"] = failure.why
        if failure.node is not None:
            where["failed_node"] = failure.node
        self.log("job_stop", "error" if code else "info", code=code, **where)
        self.broadcast(self.stopped)

    def stop_daemons(self) -> None:
        """Only TF parameter servers are left: they end when the job is done, not on their own.
        Not a failure: the job's code stays the one its nodes' ends give."""
        self.stopped = StopJob(0, None)
        self.enter(JobPhase.STOPPING)
        self.broadcast(self.stopped)
