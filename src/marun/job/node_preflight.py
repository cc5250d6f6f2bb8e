"""A node's side of the preflight at the start barrier (docs/preflight.md): the shell's part,
with threads and sockets. Once node 0 has welcomed this node's marun (slot 0), a thread opens the
probe listener, runs the node's checks (marun.preflight.checks, about 5 ms, 2 s at most) and the
clock's offset to node 0, and sends the report; given its target, another thread probes the next
node (4 s at most) and sends the link. The listener stays open until the job starts or ends. The
member's own thread never waits on any of it."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from marun.job.messages import LinkSaid, MemberMessage, PreflightSaid
from marun.plan.coordination import Coordination


class NodePreflight:
    def __init__(
        self,
        coord: Coordination,
        needs: Any,  # marun.preflight.checks.NodeNeeds
        send: Callable[[MemberMessage], None],
        log: Callable[..., None],
    ) -> None:
        self._coord = coord
        self._needs = needs
        self._send = send  # the member's, thread-safe
        self._log = log
        self._listener: Any = None
        self._lock = threading.Lock()
        self._closed = False

    def run_checks(self, hello_wall: float, leader_wall: float | None) -> None:
        """In a thread: the listener, the checks, the report to node 0."""
        received = time.time()
        threading.Thread(
            target=self._checks, args=(hello_wall, leader_wall, received), daemon=True,
            name="marun-preflight",
        ).start()  # fmt: skip

    def probe(self, target: Any) -> None:
        threading.Thread(
            target=self._probe, args=(target,), daemon=True, name="marun-preflight-probe"
        ).start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(Exception):
                listener.close()

    def _checks(self, hello_wall: float, leader_wall: float | None, received: float) -> None:
        try:
            from marun.preflight.checks import check_clock, clock_offset, run_node_checks
            from marun.preflight.result import NodeReport
            from marun.preflight.ring import ProbeListener

            port = 0
            if self._coord.nodes > 1:
                listener = ProbeListener(self._coord.job)
                try:
                    port = listener.start()
                except OSError as exc:  # no listener: node 0 names this node's link missing
                    self._log("preflight_listener_failed", "warning", error=exc.strerror)
                else:
                    with self._lock:
                        if self._closed:
                            listener.close()
                        else:
                            self._listener = listener
            checks = list(run_node_checks(self._needs))
            if leader_wall is not None and self._coord.index != self._coord.leader:
                checks.append(check_clock(*clock_offset(hello_wall, leader_wall, received)))
            report = NodeReport(
                self._coord.index, self._needs.host, self._needs.address, port, tuple(checks)
            )
            self._send(PreflightSaid(report))
            failed = [c.name for c in checks if c.status not in ("ok", "skip")]
            self._log("preflight_checked", checks=len(checks), probe_port=port, not_ok=failed)
        except Exception as exc:  # a bug: logged, and node 0 decides without this report
            self._log("preflight_error", "error", error=f"{type(exc).__name__}: {exc}"[:300])

    def _probe(self, target: Any) -> None:
        try:
            from marun.preflight.ring import probe_link

            link = probe_link(
                (self._coord.index, self._needs.host),
                (target.node, target.host),
                target.address,
                target.probe_port,
                self._coord.job,
            )
            self._send(LinkSaid(link))
        except Exception as exc:
            self._log("preflight_error", "error", error=f"{type(exc).__name__}: {exc}"[:300])
