"""Node 0's coordinator, the restart rounds (docs/supervision.md, "Restart rounds"): a failure
anywhere with rounds left (marun.runtime.rounds.RoundRule says) sends `restart {round, cause}`;
every node stops its ranks and says `stopped {round}`; when every node of the job has (a node
whose marun was replaced counts once its new marun is here: it runs nothing), `start {round,
ports}` goes out, each node starts its ranks again and says `running {round, ranks}`; when all
have, the round's line is printed. job.json lists every round (marun.job.report).

The phase goes RUNNING (or DUMPING) -> RESTARTING -> RUNNING: the one cycle in marun.job.phases.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from marun.exit_codes import LOST_EXIT, failure_exit
from marun.job.arrival import Arrival
from marun.job.phases import JobPhase
from marun.runtime.rounds import RoundRule, describe_cause, round_line, round_ports

_CAUSE_KEYS = ("node", "host", "name", "rank", "exit_code", "signal", "why")


class RestartRounds(Arrival):
    """The rounds' half of `Coordinator` (which sets these)."""

    first_failure: dict[str, Any] | None
    _rule: RoundRule | None
    _ports: dict[str, str]  # the round-0 value of each port variable that moves
    rounds: list[dict[str, Any]]
    _round_since: float
    _round_failure: dict[str, Any]
    _new_hang_judge: Callable[[], None]

    @property
    def round(self) -> int:
        return 0 if self._rule is None else self._rule.round

    def _restart(self, code: int, failure: dict[str, Any], uptime: float | None) -> bool:
        """A new round for `failure` (True), or False: the caller stops the job."""
        if self._rule is None or self.phase not in (JobPhase.RUNNING, JobPhase.DUMPING):
            return False
        finished = next(
            (m for m in self.members.values() if m.outcome == "succeeded" and not m.daemons_only),
            None,
        )
        if finished is not None:
            why = f"node {finished.node}'s ranks have finished: a round needs every node's"
        else:
            process = failure.get("rank") is not None or failure.get("name") is not None
            why = self._rule.next_round(code if process else None, uptime) or ""
        if why:
            failure["no_restart"] = why
            self._log("no_restart_round", "error", why=why)
            return False
        self._begin_round(failure)
        return True

    def _begin_round(self, failure: dict[str, Any]) -> None:
        cause = {k: failure[k] for k in _CAUSE_KEYS if failure.get(k) is not None}
        self._enter(JobPhase.RESTARTING)
        self._round_since = time.monotonic()
        self.rounds.append(
            {
                "round": self.round,
                "cause": cause,
                "stacks": failure.get("stacks"),
                "detected_at": time.time(),
                "stopped_at": None,
                "running_at": None,
                "ranks": None,
            }
        )
        self._round_failure = failure  # the job's first failure if the round cannot start
        self._new_hang_judge()
        self._log("job_restart", "info", round=self.round, cause=describe_cause(cause))
        self._broadcast("restart", round=self.round, cause=cause)

    def _round_cause(self) -> dict[str, Any] | None:
        return self.rounds[-1]["cause"] if self.rounds else None

    def _rejoin(self, key: tuple[int, int]) -> bool:
        """A new marun for a node after the start (its pod recreated): admitted into the next
        round when there is one (True), its old one's ranks being gone; else the caller fails
        the job."""
        member = self.members[key]
        if self._rule is None or self.stopped is not None:
            return False
        if self.phase is not JobPhase.RESTARTING:
            why = (
                f"node {key[0]}'s marun was replaced after the start (its pod recreated): its "
                "ranks are gone"
            )
            failure = {"node": key[0], "host": member.host, "exit_code": LOST_EXIT, "why": why}
            if not self._restart(LOST_EXIT, failure, None):
                return False
        member.ended = member.outcome = member.exit_code = None
        member.stopped_round = self.round  # a new marun runs nothing yet
        self._log("node_rejoined", "info", node=key[0], slot=key[1], round=self.round)
        return True

    def _check_round(self, now: float) -> None:
        """RESTARTING: the barrier (every node's `stopped`), or the round's failure."""
        if self.phase is not JobPhase.RESTARTING:
            return
        leader = self.members.get((self.coord.leader, 0))
        if leader is None or leader.ended is not None:
            self._round_failed(f"node {self.coord.leader}'s marun ended during the round")
            return
        finished = next((m for m in self.members.values() if m.outcome == "succeeded"), None)
        if finished is not None:  # it will not come back for the round: no point waiting
            self._round_failed(
                f"node {finished.node}'s ranks finished during the round: a round needs every "
                "node's"
            )
            return
        waiting = [
            f"node {n} slot {s}" if self.coord.slots > 1 else f"node {n}"
            for n in range(self.coord.nodes)
            for s in range(self.coord.slots)
            if not self._stopped_for_round((n, s))
        ]
        if not waiting:
            self._start_round()
        elif now - self._round_since > self.coord.arrival_timeout:
            self._round_failed(
                f"round {self.round}: {', '.join(waiting[:8])} not back within arrival_timeout "
                f"{self.coord.arrival_timeout:g}s"
            )

    def _stopped_for_round(self, key: tuple[int, int]) -> bool:
        member = self.members.get(key)
        return (
            member is not None
            and member.conn is not None
            and member.ended is None
            and member.stopped_round >= self.round
        )

    def _round_failed(self, why: str) -> None:
        failure = dict(self._round_failure)
        code = failure_exit(failure.get("exit_code"), LOST_EXIT)
        failure["no_restart"] = why
        self._log("round_failed", "error", round=self.round, why=why)
        self._stop(code, failure)

    def _start_round(self) -> None:
        record = self.rounds[-1]
        record["stopped_at"] = time.time()
        moved = round_ports(self._ports, tuple(self._ports), self.round, avoid=self.coord.port)
        self._round_ports = {k: int(v) for k, v in moved.items()}
        for member in self.members.values():
            member.idle = 0.0
            member.last_seen = time.monotonic()  # a node's silence counts from the round's start
        self._enter(JobPhase.RUNNING)  # the cycle's way back (marun.job.phases)
        self._log("job_round_start", round=self.round, ports=self._round_ports)
        self._broadcast("start", round=self.round, ports=self._round_ports)

    def _on_running(self, member: Any, round_: int, ranks: int) -> None:
        """A node's `running`: the round's line once every node's ranks run again."""
        if round_ != self.round or not self.rounds:
            return
        member.running_round, member.ranks = round_, max(0, ranks)
        record = self.rounds[-1]
        if record["running_at"] is not None:
            return
        if any(m.running_round < round_ or m.ended is not None for m in self.members.values()):
            return
        record["running_at"] = time.time()
        record["ranks"] = sum(m.ranks for m in self.members.values())
        took = record["running_at"] - record["detected_at"]
        budget = self._rule.budget if self._rule is not None else 0
        self._announce(
            f"{round_line(round_, budget, record['cause'])} (all {record['ranks']} ranks "
            f"running again in {took:.2f}s)"
        )
