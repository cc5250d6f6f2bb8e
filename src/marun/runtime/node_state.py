"""What one node's supervisor shell holds (`NodeState`): the records, the processes running and
their groups, the log descriptors, the job's link and the node's machine
(marun.runtime.node_machine: the phase and every decision); with the shell's voice (marun's
events, held back until every process started; a line on stderr). The parts that use it are
marun.runtime.node_stop (sending signals) and marun.runtime.node_report (result.json, the end
with the job); marun.runtime.supervisor composes them and owns the loop, the processes' start
and their output. Each imports this module, never the one that composes it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections import deque
from typing import TYPE_CHECKING

from marun._files import private_dir
from marun.plan.launch_plan import LaunchPlan, NodePlan
from marun.runtime.node_machine import NodeMachine
from marun.runtime.output import new_tail
from marun.runtime.result import JobRecord, ProcessRecord

if TYPE_CHECKING:
    from structlog.typing import FilteringBoundLogger

    from marun.runtime.joblink import JobLink


class NodeState:
    """The supervisor's shared fields (marun.runtime.supervisor builds it, then the parts)."""

    def __init__(
        self, plan: LaunchPlan, node: NodePlan, link: JobLink, shared_console: bool
    ) -> None:
        # The log (structlog) is imported once every process has started: it costs more than
        # starting them. Until then events wait here, with the time they happened.
        self.log: FilteringBoundLogger | None = None
        self.early: list[tuple[str, str, dict[str, object], float]] | None = []
        self.options = plan.supervision
        self.node = node
        self.job = JobRecord(
            mode=plan.mode,
            node=node.index,
            host=node.host,
            processes=[ProcessRecord(spec=p, tail=new_tail()) for p in node.processes],
        )
        self.records = self.job.processes
        self.log_fds: list[int] = []  # each record's log descriptor (the supervisor opens them)
        self.running: dict[int, tuple[ProcessRecord, subprocess.Popen[bytes]]] = {}
        self.groups: set[int] = set()  # every process group started, leader alive or not
        self.round_groups: set[int] = set()  # those of the non-daemon processes started
        self.signalled: set[int] = set()  # adopted orphans signalled one by one while stopping
        self.children_left = True
        self.subreaper = False
        self.log_errors: deque[tuple[str, str, OSError]] = deque()  # from the pump threads
        # The job: node 0's over the wire (a plan with a coordination section), or this node's
        # own, in this process (marun.job.local_job). Nothing starts before it says `start`.
        self.link = link
        self.alone = plan.coordination is None  # the job is this node (its summary is its own)
        self.machine = NodeMachine(self.job, self.options, time.monotonic())
        # early_signals' count when the supervisor's own signal handling began: a stop signal
        # recorded after it came once that handling was over (node_report's wait for the end)
        self.signals_mark = 0
        coord = plan.coordination
        # Where the nodes share one console (marun simulate), the leader's marun alone prints the
        # job's first failure with its last lines; the others one line per process.
        self.tail_on: int | None = None
        if shared_console and coord is not None and (coord.index, coord.slot) != (coord.leader, 0):
            self.tail_on = coord.leader

    # -- its voice ------------------------------------------------------------------------------

    def emit(self, event: str, level: str = "info", **fields: object) -> None:
        """A structlog event; a closed stderr must not stop the supervision."""
        if self.early is not None:
            self.early.append((event, level, fields, time.time()))
            return
        # The simulator's supervisor (prefix_output off: its processes are whole `marun run`s,
        # one per simulated node, each naming itself) is no node of the job: its events name the
        # process (node1, ...), not a node index of its own that would read as node 0.
        where = {"node": self.node.index} if self.options.prefix_output else {}
        with contextlib.suppress(OSError, ValueError):
            getattr(self.log, level)(event, **where, **fields)

    def log_early_events(self) -> None:
        if self.early is None:
            return
        from marun.log import get_logger

        early, self.early = self.early, None
        self.log = get_logger("marun.runtime.supervisor")
        from marun.log import log_to_file

        # marun's own events go to the events file beside result.json; the console gets only
        # what needs a person (marun.log says which).
        with contextlib.suppress(OSError):
            log_to_file(private_dir(self.record_dir(), strict=False))
        for event, level, fields, at in early:
            self.emit(event, level, _at=at, **fields)

    def record_dir(self) -> str:
        """Where result.json and marun's events file go."""
        return self.options.record_dir or os.path.dirname(self.records[0].spec.log)

    @staticmethod
    def say(text: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(text)
            sys.stderr.flush()
