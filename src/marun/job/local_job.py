"""A job of one node (or a node that coordinates with no other: job_port 0, a simulator's outer
plan) runs the same job machine as node 0's (marun.job.machine), in this process: the node's
reports go to it as the messages a member would send, and what it broadcasts comes back as the
`JobEvent`s a member would hear. So there is one round rule, one stop and one end for every job,
whatever its size (the supervisor has no branch for "no link").

No wire, no thread, no clock of its own: the shell is the supervisor's loop, which calls in with
each report and polls the events. A job of one node has nobody to wait for, so `start` of round 0
is queued at once, and the machine itself (with marun.job's messages, some 15 ms of imports) is
built once the node's processes started (with restart rounds: the supervisor's `settled`) or on
the first report: never on the way to the processes, and a job without rounds that ends well
never builds it (docs/performance.md).
A job of one keeps its record in result.json; the machine's job.json would say the same.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from marun.runtime.joblink import JobEvent

if TYPE_CHECKING:
    from marun.job.actions import Action
    from marun.job.machine import JobMachine
    from marun.job.messages import MemberMessage
    from marun.plan.launch_plan import LaunchPlan
    from marun.runtime.failure import Failure

_HANDLE = "local"  # the one member's connection, as the machine sees it (opaque to it)
_KEY = (0, 0)


class LocalJob:
    """The JobLink of a node that is its job (marun.runtime.joblink.JobLink)."""

    def __init__(
        self, plan: LaunchPlan, log: Callable[..., None] | None = None, *, force: bool = False
    ) -> None:
        self._plan = plan
        self._force = force  # (tests: the machine hears the end even when nothing came before)
        self._log = log
        node = plan.nodes[0]
        self._node, self._host = node.index, node.host
        self._daemons_only = bool(node.processes) and all(p.daemon for p in node.processes)
        self._machine: JobMachine | None = None
        self._events: list[JobEvent] = [JobEvent("start", 0)]
        self._round = 0
        self._done: int | None = None
        # The supervisor's loop waits on this descriptor: readable while events wait.
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._wake()

    # -- the JobLink --------------------------------------------------------------------------

    def fileno(self) -> int:
        return self._wake_r

    def poll(self) -> list[JobEvent]:
        with contextlib.suppress(OSError):
            while os.read(self._wake_r, 4096):
                pass
        events, self._events = self._events, []
        return events

    def watch_progress(self, source: Callable[[float], Any]) -> None:
        """(A job of one node has no status line of node 0's: its ranks' own lines say it.)"""

    def activity(self) -> None:
        """(No hang watchdog without coordination.)"""

    def settled(self) -> None:
        """With restart rounds, a failure is likely and its round is the user's time: the
        machine is built now, while the ranks run, not after the crash."""
        if self._plan.supervision.max_restarts:
            self._job_machine()

    def report_failure(self, failure: Failure, uptime: float | None = None) -> None:
        from marun.job.messages import FailureSaid

        mine = failure.but(node=self._node, host=self._host)
        self._say(FailureSaid(mine, self._round, uptime))

    def report_stopped(self, round_: int) -> None:
        from marun.job.messages import Stopped

        self._say(Stopped(round_))

    def report_running(self, round_: int, ranks: int) -> None:
        from marun.job.messages import Running

        self._say(Running(round_, ranks))

    def report_stacks(self, text: str) -> None:
        from marun.job.messages import Stacks

        self._say(Stacks(text))

    def report_end(self, outcome: str, exit_code: int) -> int:
        """The node's end is the job's: the machine's `done` (its code) comes back at once. A
        node that had nothing to report (no failure, no stop signal: every process ended well)
        ends the job with its own code, which is what the machine would say
        (tests/unit/test_local_job.py checks both ways agree): no machine is built for it."""
        if self._machine is None and not self._force:
            return exit_code
        from marun.job.messages import End

        self._say(End(outcome, exit_code))
        return exit_code if self._done is None else self._done

    def close(self) -> None:
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- the machine --------------------------------------------------------------------------

    def _say(self, message: MemberMessage) -> None:
        machine = self._job_machine()
        now, wall = time.monotonic(), time.time()
        self._carry_out(machine.message(_HANDLE, _KEY, message.KIND, message, now, wall))
        # What follows a message at once (the round's barrier, the end) is a tick's.
        self._carry_out(machine.tick(now, wall))

    def _job_machine(self) -> JobMachine:
        if self._machine is not None:
            return self._machine
        from marun.job.machine import JobMachine
        from marun.job.messages import Hello
        from marun.job.protocol import PROTOCOL
        from marun.plan.coordination import Coordination
        from marun.runtime.round_rule import RoundRule, planned_ports

        plan, node = self._plan, self._plan.nodes[0]
        watching = plan.supervision
        # One node, one slot, no port and no hosts: nobody else can ever say hello to it.
        coord = Coordination(host=node.host, port=0, nodes=1, index=0, job="local")
        now, wall = time.monotonic(), time.time()
        machine = JobMachine(
            coord,
            "local",
            rule=RoundRule.of(watching),
            ports=planned_ports(node.processes, watching.round_ports),
            now=now,
            wall=wall,
            fail_fast=watching.fail_fast,
        )
        self._machine = machine
        hello = Hello(
            node=0,
            slot=0,
            instance="local",
            host=node.host,
            leader="",
            started=False,
            daemons_only=self._daemons_only,
            version=PROTOCOL,
        )
        # Its `start` of round 0 went out when this link was made (queued): not again.
        self._carry_out(machine.hello(_HANDLE, node.host, hello, now, wall), skip_start=True)
        return machine

    def _carry_out(self, actions: list[Action], skip_start: bool = False) -> None:
        from marun.job.actions import Announce, Broadcast, Log, Send
        from marun.job.messages import Done, Dump, Restart, Start, StopJob

        for action in actions:
            message = action.message if isinstance(action, (Send, Broadcast)) else None
            if isinstance(message, Start) and not (skip_start and message.round == 0):
                self._round = message.round
                ports = dict(message.ports) if message.round else {}
                self._push(JobEvent("start", message.round, ports=ports))
            elif isinstance(message, Restart):
                self._round = max(self._round, message.round)
                self._push(JobEvent("restart", message.round, message.cause))
            elif isinstance(message, StopJob):
                self._push(JobEvent("stop", message.code, message.failure))
            elif isinstance(message, Dump):
                self._push(JobEvent("dump", 1 if message.sample else 0))
            elif isinstance(message, Done):
                self._done = message.code
            elif isinstance(action, Announce):
                with contextlib.suppress(OSError, ValueError):
                    sys.stderr.write(action.text + "\n")
                    sys.stderr.flush()
            elif isinstance(action, Log) and self._log is not None:
                with contextlib.suppress(OSError, ValueError):
                    self._log(action.event, action.level, **action.fields)
            # Welcome, Bind, WriteReport: nothing to carry for a job of one (see the top).

    def _push(self, event: JobEvent) -> None:
        self._events.append(event)
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # (full: it is readable already)
            os.write(self._wake_w, b".")
