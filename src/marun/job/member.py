"""Every node's side (node 0's too), the shell: a thread that keeps this marun connected to the
leader's coordinator, sends heartbeats, failures and the end, and hands what the leader says to
the supervisor's loop through a pipe (marun.runtime.joblink.JobLink is the supervisor's view).
What each of node 0's lines and each turn of time mean is the member machine's
(marun.job.member_machine); this carries its bytes and does what it returns."""

from __future__ import annotations

import contextlib
import errno
import os
import queue
import select
import socket
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from marun.job.coordinator import Coordinator, console_line
from marun.job.cputime import descendants_cpu
from marun.job.handshake import read_challenge
from marun.job.heartbeat import Backoff, Beat, connect_wait
from marun.job.member_machine import (
    Disconnect,
    MemberAction,
    MemberMachine,
    Note,
    ProbeNext,
    Push,
    RunPreflight,
    Say,
    Welcomed,
)
from marun.job.messages import Beat as Heartbeat
from marun.job.messages import (
    End,
    FailureSaid,
    Hello,
    MemberMessage,
    Running,
    Stacks,
    Stopped,
    leader_message,
)
from marun.job.node_preflight import NodePreflight
from marun.job.phases import MemberPhase
from marun.job.protocol import (
    PROTOCOL,
    LineBuffer,
    ProtocolError,
    decode,
    encode,
    fresh,
    new_nonce,
)
from marun.plan.coordination import Coordination
from marun.runtime.failure import Failure
from marun.runtime.joblink import JobEvent

_RETRY = 0.5
_CATCH_UP = 1.0  # s without a turn (one every 0.2 s): this marun did not run since it read
# What is said again after every hello (`_state`)
_STATE = (FailureSaid.KIND, Stopped.KIND, Running.KIND, End.KIND)
_UNSTARTED_END_WAIT = 10.0  # seconds a node that never started waits for the job's end


class Member:
    def __init__(
        self,
        coord: Coordination,
        secret: bytes,
        host: str,
        *,
        daemons_only: bool = False,
        coordinator: Coordinator | None = None,
        log: Any = None,
        preflight_needs: Any = None,
        relay: Any = None,
    ) -> None:
        self.coord = coord
        self._secret = secret
        self._host = host
        self._daemons_only = daemons_only
        self.coordinator = coordinator
        self._log = log or (lambda event, level="info", **kw: None)
        self._target = _target(coord, coordinator is not None)
        self.relay = relay
        self._events: queue.Queue[JobEvent] = queue.Queue()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._sock: socket.socket | None = None
        self._buf = LineBuffer()  # what came after the challenge on the current connection
        self._mine = ""  # this connection's nonces (protocol.py: replay) and sequence numbers
        self._peer = ""
        self._seq_in = -1
        self._seq_out = 0
        self._send_lock = threading.Lock()
        self._sock_lock = threading.Lock()
        # Where this node is in the job, and what that means (marun.job.member_machine).
        # `_done` wakes report_end's wait once the machine is DONE.
        # this node's side of the preflight (node_preflight.py; `preflight_needs`: what the plan
        # wants of this node, marun.preflight.checks.NodeNeeds; None: no preflight here)
        self._preflight = (
            None
            if preflight_needs is None
            else NodePreflight(coord, preflight_needs, self._send, self._log)
        )
        self._hello_wall = 0.0  # when the last hello went (the preflight's clock offset)
        self.machine = MemberMachine(coord, time.monotonic(), preflight=self._preflight is not None)
        self._done = threading.Event()
        self._last_activity = time.monotonic()
        self._progress: Callable[[float], Any] | None = None  # watch_progress
        # Not a phase: the owner's request (close()) that the thread finish.
        self._close_requested = threading.Event()
        # before the next try of a connection (marun.job.heartbeat): to node 0, spread over the
        # time the job's nodes take to arrive; to the node's relay, as before
        self._backoff = Backoff(coord.nodes if coord.slots == 1 else 1)
        self._wait = connect_wait(coord.nodes) if coord.slots == 1 else 2.0
        self.instance = new_nonce()  # this marun process's (node 0 tells a restarted one apart)
        # What this node last said of its state (its failure, a round's `stopped` and `running`,
        # its `end`), said again right after every hello: said while not connected, or on a
        # connection node 0 had already closed (the kernel takes the line and it is lost), node
        # 0 hears it all the same (node 0 takes each again without harm).
        self._state: dict[str, MemberMessage] = {}
        self._thread = threading.Thread(target=self._loop, name="marun-member", daemon=True)
        self._thread.start()

    # -- JobLink ----------------------------------------------------------------------------

    def fileno(self) -> int:
        return self._wake_r

    def poll(self) -> list[JobEvent]:
        with contextlib.suppress(OSError):
            while os.read(self._wake_r, 4096):
                pass
        events = []
        while True:
            try:
                events.append(self._events.get_nowait())
            except queue.Empty:
                return events

    def watch_progress(self, source: Callable[[float], Any]) -> None:
        """Where this node's ranks' steps come from (marun.runtime.node_progress.NodeProgress
        .report): each heartbeat carries its report, when it has one."""
        self._progress = source

    def activity(self) -> None:
        # From the relay's pump threads: one assignment of a float, atomic under the GIL.
        self._last_activity = time.monotonic()

    def settled(self) -> None:
        """(Everything a member needs was loaded before it connected.)"""

    def report_failure(self, failure: Failure, uptime: float | None = None) -> None:
        # The round is this link's (node 0's numbering); `uptime`, the supervisor's.
        mine = failure.but(node=self.coord.index, host=self._host)
        self._send(FailureSaid(mine, self.machine.round, uptime))

    def report_stopped(self, round_: int) -> None:
        self._send(Stopped(round_))

    def report_running(self, round_: int, ranks: int) -> None:
        self._send(Running(round_, ranks))

    def report_stacks(self, text: str) -> None:
        self._send(Stacks(text))

    def report_end(self, outcome: str, exit_code: int) -> int:
        """Say how this node ended; wait for the job's end and return its code (node 0's
        coordinator writes job.json itself as the job ends, or when it closes)."""
        self._send(End(outcome, exit_code))
        # As long as the job runs elsewhere: node 0 must outlive every node (or they would
        # count it lost), and every node exits with the job's status. The wait ends: node 0
        # declares a silent node lost after peer_timeout, and this thread gives up on a silent
        # node 0 after as long.
        done = False
        # A node that ends before the job started has nothing to wait for but node 0's word
        # that it heard (done): not an arrival time-out more.
        limit = (
            None if self.machine.started_at is not None else time.monotonic() + _UNSTARTED_END_WAIT
        )
        while not done and self._thread.is_alive():
            done = self._done.wait(1.0)
            if limit is not None and time.monotonic() > limit:
                break
        if not done:
            self._log("job_end_unknown", "warning")
        code = self.machine.done_code
        if not done or code is None:
            return exit_code
        return code

    def wait_for_place(self, signalled: Callable[[], int | None]) -> JobEvent | None:
        """Hot spares (marun.plan.spares): wait until node 0 gives this node its place (a
        `place` event), or stops the job before it did (a `stop` event), or a stop signal came
        (`signalled()` says its number: None returned). What else node 0 says meanwhile (a
        round's `restart`, a dump) is not for a node without processes: dropped. The wake pipe
        is left readable: what follows the place (its round's `start`) wakes the supervisor."""
        while signalled() is None:
            try:
                event = self._events.get(timeout=0.2)
            except queue.Empty:
                continue
            if event.kind in ("place", "stop"):
                return event
        return None

    @property
    def phase(self) -> MemberPhase:
        return self.machine.phase

    def close(self) -> None:
        self._close_requested.set()
        if self._preflight is not None:
            self._preflight.close()
        self._thread.join(3.0)
        if self.relay is not None:
            self.relay.close()  # (node 0's `done` went to every slot of this node)
        if self.coordinator is not None:
            self.coordinator.close()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- the thread -------------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            while True:
                try:
                    self._converse()
                    return
                except Exception as exc:  # a bug: logged whole, and the link goes on
                    self._log(
                        "job_member_error",
                        "error",
                        error=f"{type(exc).__name__}: {exc}"[:300],
                        traceback="".join(
                            traceback.format_exception(type(exc), exc, exc.__traceback__)
                        )[-4000:],
                    )
                    self._disconnect()
                    time.sleep(_RETRY)
        finally:
            self._disconnect()  # node 0 sees this node leave at once

    def _converse(self) -> None:
        buf = LineBuffer()
        beat = Beat(self.coord)  # the job's heartbeat interval (marun.job.heartbeat)
        waited = 0.0  # in a try of a connection since the last turn
        while not self._close_requested.is_set():
            now = time.monotonic()
            sock = self._sock
            if sock is not None and now - self.machine.last_turn - waited > _CATCH_UP:
                # node 0's lines of that time, heard before the turn judges its silence
                self._read_leader(sock, buf, wait=0.0)
                now = time.monotonic()
            self._apply(self.machine.turn(now, connected=self._sock is not None, waited=waited))
            waited = 0.0
            if self.machine.gave_up:
                return
            if self._sock is None:
                if now < self._backoff.next_try:
                    time.sleep(min(0.2, self._backoff.next_try - now))
                    continue
                connected = self._connect()
                waited = time.monotonic() - now
                if connected:
                    buf = self._buf
                else:
                    self._backoff.failed(turned_away=bool(self.machine.clash))
                continue
            if beat.due(now):
                self._heartbeat(now)
            sock = self._sock
            if sock is not None:
                self._read_leader(sock, buf)
            if self._sock is None and not self.machine.welcomed:
                self._backoff.failed(turned_away=True)  # closed without a welcome

    def _apply(self, actions: list[MemberAction]) -> None:
        for action in actions:
            if isinstance(action, Push):
                self._push(action.event)
            elif isinstance(action, Note):
                self._log(action.event, action.level, **action.fields)
            elif isinstance(action, Disconnect):
                self._disconnect()
            elif isinstance(action, Welcomed):
                self._backoff.reset()
            elif isinstance(action, RunPreflight) and self._preflight is not None:
                self._preflight.run_checks(self._hello_wall, action.leader_wall)
            elif isinstance(action, ProbeNext) and self._preflight is not None:
                self._preflight.probe(action.target)
            elif isinstance(action, Say):
                console_line(f"marun: {action.text}")
        if self._preflight is not None and self.machine.phase is not MemberPhase.WAITING:
            self._preflight.close()  # started, stopped or done: no probe comes any more
        if self.machine.done:
            self._done.set()

    def _heartbeat(self, now: float) -> None:
        cpu = descendants_cpu() if self.coord.hang_timeout is not None else None
        report = None
        source = self._progress
        if source is not None:
            try:
                report = source(now)
            except Exception as exc:  # the beat goes out all the same; the bug is logged
                self._log("progress_error", "error", error=f"{type(exc).__name__}: {exc}"[:300])
        self._send(Heartbeat(now - self._last_activity, cpu, report))

    def _read_leader(self, sock: socket.socket, buf: LineBuffer, wait: float = 0.2) -> None:
        """What node 0 sent within `wait` s, to the machine."""
        try:
            ready, _, _ = select.select([sock], [], [], wait)
        except (OSError, ValueError):
            self._disconnect()
            return
        if not ready:
            return
        try:
            data = sock.recv(1 << 16)
        except OSError:
            data = b""
        if not data:
            self._disconnect()
            return
        try:
            lines = buf.feed(data)
        except ProtocolError:
            self._disconnect()
            return
        for line in lines:
            try:
                body = decode(self._secret, self.coord.job, line)
                self._seq_in = fresh(body, self._mine, self._seq_in)
            except ProtocolError as exc:
                self._log("job_message_refused", "warning", source="leader", reason=str(exc))
                continue
            self._apply(self.machine.heard(leader_message(body), time.monotonic()))

    def _open(self) -> socket.socket:
        target = self._target
        if isinstance(target, tuple):
            sock = socket.create_connection(target, timeout=self._wait)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self._wait)
            sock.connect(target)
        except OSError:
            sock.close()
            raise
        return sock

    def _connect(self) -> bool:
        try:
            sock = self._open()
        except OSError as exc:
            relay_gone = exc.errno in (errno.ECONNREFUSED, errno.ENOENT)
            if isinstance(self._target, str) and self.machine.leader_instance and relay_gone:
                # the node's relay, which carried this marun to node 0, is gone
                self._apply(self.machine.relay_gone())
                return False
            self._apply(self.machine.connect_failed(exc.strerror or str(exc)))
            return False
        try:
            peer, self._seq_in, self._buf = read_challenge(
                sock, self._secret, self.coord, self._host
            )
        except (OSError, ProtocolError) as exc:
            clash = ""
            if isinstance(exc, ProtocolError) and "another job" in str(exc):
                clash = f"{self._target[0]}:{self._target[1]} is another job's marun: {exc}"
            error = f"no challenge from node {self.coord.leader}'s marun: {exc}"
            self._apply(self.machine.connect_failed(error, clash))
            with contextlib.suppress(OSError):
                sock.close()
            return False
        self.machine.connected(time.monotonic())
        with self._send_lock:
            self._peer, self._mine, self._seq_out = peer, new_nonce(), 0
            self._sock = sock
        self._hello_wall = time.time()
        hello = Hello(
            node=self.coord.index,
            slot=self.coord.slot,
            instance=self.instance,
            host=self._host,
            leader=self.machine.leader_instance,
            started=self.machine.started_at is not None,
            daemons_only=self._daemons_only,
            version=PROTOCOL,
        )
        self._send(hello, nonce=self._mine)
        with self._send_lock:
            said = list(self._state.values())
        for message in said:
            self._send(message)
        return self._sock is not None

    def _disconnect(self) -> None:
        with self._sock_lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def _push(self, event: JobEvent) -> None:
        self._events.put(event)
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"!")

    def _send(self, message: MemberMessage, **protocol: str) -> None:
        """One message to node 0 (`protocol`: the hello's nonce); thread-safe."""
        kind = message.KIND
        body = {"job": self.coord.job, "node": self.coord.index, "slot": self.coord.slot}
        body.update(message.to_wire(), **protocol, type=kind)
        with self._send_lock:
            if kind in _STATE:
                self._state.pop(kind, None)  # (in the order said)
                self._state[kind] = message
            sock = self._sock
            if sock is None:
                return
            body.update(peer=self._peer, seq=self._seq_out)
            self._seq_out += 1
            line = encode(self._secret, body)
            try:
                sock.sendall(line)
            except OSError:
                self._disconnect()


def _target(coord: Coordination, leader: bool) -> tuple[str, int] | str:
    """Where a member connects: node 0's job port (the leader's own member over loopback); in a
    job of several slots, its node's relay (its slot 0's: marun.job.relay), which carries the
    node's slots to node 0 on one connection."""
    if coord.slots > 1:
        from marun.job.relay_side import relay_address

        return relay_address(coord)
    return ("127.0.0.1" if leader else coord.host, coord.port)
