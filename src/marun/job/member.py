"""Every node's side (node 0's too): a thread that keeps this marun connected to the leader's
coordinator, sends heartbeats, failures and the end, and hands what the leader says to the
supervisor's loop through a pipe (marun.runtime.joblink.JobLink is the supervisor's view)."""

from __future__ import annotations

import contextlib
import os
import queue
import select
import socket
import threading
import time
import traceback
from typing import Any

from marun.exit_codes import LOST_EXIT
from marun.inputs.numbers import is_port
from marun.job.coordinator import Coordinator
from marun.job.cputime import descendants_cpu
from marun.job.handshake import read_challenge
from marun.job.heartbeat import Backoff, Beat
from marun.job.phases import MEMBER_MOVES, MemberPhase
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
from marun.runtime.joblink import JobEvent

_RETRY = 0.5
_STATE = ("failure", "stopped", "running", "end")  # said again after every hello (`_state`)
_STALL = 3.0  # seconds between two turns of the loop (it turns every 0.2 s): this marun was frozen
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
    ) -> None:
        self.coord = coord
        self._secret = secret
        self._host = host
        self._daemons_only = daemons_only
        self.coordinator = coordinator
        self._log = log or (lambda event, level="info", **kw: None)
        # The leader's own member talks to its coordinator over loopback.
        self._target = ("127.0.0.1" if coordinator is not None else coord.host, coord.port)
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
        # Where this node is in the job (marun.job.phases: the transitions). `_done` wakes
        # report_end's wait on entering DONE; `_started_at` is when `start` came (None: never).
        self.phase = MemberPhase.WAITING
        self._started_at: float | None = None
        self._round = 0  # the restart round this node last started (or was told to stop for)
        self._done = threading.Event()
        self._done_code: int | None = None
        self._stop_event: JobEvent | None = None
        self._last_activity = time.monotonic()
        # Not a phase: the owner's request (close()) that the thread finish.
        self._close_requested = threading.Event()
        self._tries = 0
        self._last_error = ""
        self._backoff = Backoff()  # before the next try of a connection (marun.job.heartbeat)
        self._welcomed = False  # the current connection had node 0's welcome
        self._clash = ""  # why node 0's port turned this marun away (another job's, ...)
        self.instance = new_nonce()  # this marun process's (node 0 tells a restarted one apart)
        self._leader_instance = ""  # node 0's coordinator's, from its welcome
        self._said: set[str] = set()  # refusals logged already (each once)
        # What this node last said of its state (its failure, a round's `stopped` and `running`,
        # its `end`), said again right after every hello: said while not connected, or on a
        # connection node 0 had already closed (the kernel takes the line and it is lost), node
        # 0 hears it all the same (node 0 takes each again without harm).
        self._state: dict[str, dict[str, Any]] = {}
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

    def activity(self) -> None:
        # From the relay's pump threads: one assignment of a float, atomic under the GIL.
        self._last_activity = time.monotonic()

    def report_failure(self, failure: dict[str, Any]) -> None:
        # The round is this link's (node 0's numbering); `uptime`, the supervisor's.
        fields = {k: failure[k] for k in ("uptime",) if isinstance(failure.get(k), (int, float))}
        body = {k: v for k, v in failure.items() if k != "uptime"}
        body.update(node=self.coord.index, host=self._host)
        self._send("failure", failure=body, round=self._round, **fields)

    def report_stopped(self, round_: int) -> None:
        self._send("stopped", round=round_)

    def report_running(self, round_: int, ranks: int) -> None:
        self._send("running", round=round_, ranks=ranks)

    def report_stacks(self, text: str) -> None:
        self._send("stacks", text=text)

    def report_end(self, outcome: str, exit_code: int) -> int:
        """Say how this node ended; wait for the job's end and return its code (node 0's
        coordinator writes job.json itself as the job ends, or when it closes)."""
        self._send("end", outcome=outcome, exit_code=exit_code)
        # As long as the job runs elsewhere: node 0 must outlive every node (or they would
        # count it lost), and every node exits with the job's status. The wait ends: node 0
        # declares a silent node lost after peer_timeout, and this thread gives up on a silent
        # node 0 after as long.
        done = False
        # A node that ends before the job started has nothing to wait for but node 0's word
        # that it heard (done): not an arrival time-out more.
        limit = None if self._started_at is not None else time.monotonic() + _UNSTARTED_END_WAIT
        while not done and self._thread.is_alive():
            done = self._done.wait(1.0)
            if limit is not None and time.monotonic() > limit:
                break
        if not done:
            self._log("job_end_unknown", "warning")
        if not done or self._done_code is None:
            return exit_code
        return self._done_code

    def _enter(self, phase: MemberPhase) -> None:
        """The one place the phase changes, checked against marun.job.phases.MEMBER_MOVES. DONE
        wakes the wait at the end (report_end, in the supervisor's thread)."""
        self.phase = MEMBER_MOVES.move(self.phase, phase, self._log)
        if phase is MemberPhase.DONE:
            self._done.set()

    def close(self) -> None:
        self._close_requested.set()
        self._thread.join(3.0)
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
        began = last_heard = last_turn = time.monotonic()
        # The leader gives up on missing nodes after arrival_timeout; a member whose leader
        # never answers gives up a peer_timeout later, naming it; one that node 0's port only
        # ever turned away (another job's marun there) gives up after arrival_timeout.
        give_up = last_heard + self.coord.arrival_timeout + self.coord.peer_timeout
        beat = Beat(self.coord)  # the job's heartbeat interval (marun.job.heartbeat)
        while not self._close_requested.is_set():
            now = time.monotonic()
            gap, last_turn = now - last_turn, now
            if gap > _STALL:
                # This marun did not run (frozen by SIGSTOP, or starved): node 0's lines wait in
                # the socket, read next; the silence was this node's, not node 0's.
                self._log("member_stalled", "warning", seconds=round(gap, 1))
                last_heard = max(last_heard, now)
                give_up += gap
            clashed = bool(self._clash) and not self._leader_instance
            if self.phase is MemberPhase.WAITING and (
                now >= give_up or (clashed and now - began >= self.coord.arrival_timeout)
            ):
                self._stop_event = self._lost_leader("before the start")
                self._push(self._stop_event)
                self._disconnect()
                self._enter(MemberPhase.DONE)
                return
            if self._sock is None:
                if self._started_at is not None and now - last_heard > self.coord.peer_timeout:
                    self._lost(
                        f"no word from node {self.coord.leader}'s marun for "
                        f"{self.coord.peer_timeout:g}s"
                    )
                    return
                if now < self._backoff.next_try:
                    time.sleep(min(0.2, self._backoff.next_try - now))
                elif self._connect():
                    buf = self._buf
                    last_heard = time.monotonic()
                else:
                    self._backoff.failed(turned_away=bool(self._clash))
                continue
            if beat.due(now):
                self._heartbeat(now)
            if now - last_heard > self.coord.peer_timeout:
                self._lost(
                    f"no word from node {self.coord.leader}'s marun for "
                    f"{self.coord.peer_timeout:g}s"
                )
                return
            sock = self._sock
            if sock is not None and self._read_leader(sock, buf):
                last_heard = time.monotonic()
            if self._sock is None and not self._welcomed:
                self._backoff.failed(turned_away=True)  # closed without a welcome

    def _heartbeat(self, now: float) -> None:
        fields: dict[str, Any] = {"idle": round(now - self._last_activity, 2)}
        if self.coord.hang_timeout is not None:
            cpu = descendants_cpu()
            if cpu is not None:
                fields["cpu"] = round(cpu, 2)
        self._send("hb", **fields)

    def _read_leader(self, sock: socket.socket, buf: LineBuffer) -> bool:
        """What node 0 sent within 0.2 s, handled; True when a message of the job's came."""
        try:
            ready, _, _ = select.select([sock], [], [], 0.2)
        except (OSError, ValueError):
            self._disconnect()
            return False
        if not ready:
            return False
        try:
            data = sock.recv(1 << 16)
        except OSError:
            data = b""
        if not data:
            self._disconnect()
            return False
        try:
            lines = buf.feed(data)
        except ProtocolError:
            self._disconnect()
            return False
        heard = False
        for line in lines:
            try:
                body = decode(self._secret, self.coord.job, line)
                self._seq_in = fresh(body, self._mine, self._seq_in)
            except ProtocolError as exc:
                self._log("job_message_refused", "warning", source="leader", reason=str(exc))
                continue
            heard = True
            self._handle(body)
        return heard

    def _connect(self) -> bool:
        self._tries += 1
        try:
            sock = socket.create_connection(self._target, timeout=2.0)
        except OSError as exc:
            self._last_error = exc.strerror or str(exc)
            return False
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            peer, self._seq_in, self._buf = read_challenge(
                sock, self._secret, self.coord, self._host
            )
        except (OSError, ProtocolError) as exc:
            self._last_error = f"no challenge from node {self.coord.leader}'s marun: {exc}"
            if isinstance(exc, ProtocolError) and "another job" in str(exc):
                self._clash = f"{self._target[0]}:{self._target[1]} is another job's marun: {exc}"
                self._say_once(self._clash)
            with contextlib.suppress(OSError):
                sock.close()
            return False
        with self._send_lock:
            self._peer, self._mine, self._seq_out = peer, new_nonce(), 0
            self._sock = sock
            self._welcomed = False
        self._send(
            "hello",
            host=self._host,
            daemons_only=self._daemons_only,
            nonce=self._mine,
            instance=self.instance,
            leader=self._leader_instance,
            started=self._started_at is not None,
            version=PROTOCOL,
        )
        with self._send_lock:
            said = list(self._state.items())
        for kind, fields in said:
            self._send(kind, **fields)
        return self._sock is not None

    def _disconnect(self) -> None:
        with self._sock_lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def _handle(self, body: dict[str, Any]) -> None:
        kind = body["type"]
        if kind == "welcome":
            self._leader_instance = str(body.get("instance", ""))
            self._welcomed = True
            self._backoff.reset()
        elif kind == "refused":
            self._clash = f"node {self.coord.leader}'s marun refused this one: {body.get('why')}"
            self._say_once(self._clash)
            self._last_error = f"refused: {body.get('why')}"
        elif kind == "start":
            self._on_start(body)
        elif kind == "restart" and int(body.get("round", 0)) > self._round:
            self._round = int(body["round"])
            if self._started_at is not None and self.phase is MemberPhase.RUNNING:
                self._enter(MemberPhase.RESTARTING)
            self._push(JobEvent("restart", self._round, body.get("cause")))
        elif kind == "stop":
            event = JobEvent("stop", int(body.get("code", LOST_EXIT)), body.get("failure"))
            if self._stop_event is None:
                self._stop_event = event
                self._enter(MemberPhase.STOPPING)
                self._push(event)
        elif kind == "dump":
            # code 1: a sample for the watchdog to compare, not the dump of a hang
            self._push(JobEvent("dump", 1 if body.get("sample") else 0, None))
        elif kind == "done":
            self._done_code = int(body.get("code", 0))
            self._enter(MemberPhase.DONE)

    def _on_start(self, body: dict[str, Any]) -> None:
        """`start` of round 0 or of restart round k, each once; with the round's ports."""
        round_ = int(body.get("round", 0))
        if round_ == 0 and self._started_at is not None:
            return
        if round_ and self._started_at is not None and self.phase is not MemberPhase.RESTARTING:
            return  # a reconnection's reminder of the round this node runs
        if round_ < self._round or self.phase not in (MemberPhase.WAITING, MemberPhase.RESTARTING):
            return  # (stopping or done: no start of anything now)
        self._round = round_
        self._started_at = self._started_at or time.monotonic()
        self._enter(MemberPhase.RUNNING)
        ports = body.get("ports") or {}
        clean = {
            str(k)[:64]: str(v)
            for k, v in ports.items()
            if isinstance(v, int) and not isinstance(v, bool) and is_port(v)
        }
        self._push(JobEvent("start", round_, {"ports": clean} if round_ else None))

    def _say_once(self, why: str) -> None:
        if why not in self._said:
            self._said.add(why)
            self._log("job_refused", "error", reason=why)

    def _lost_leader(self, when: str) -> JobEvent:
        if self._clash and not self._leader_instance:  # turned away every time: say why
            why = (
                f"{self._clash}; stopped trying after arrival_timeout "
                f"{self.coord.arrival_timeout:g}s ({self._tries} tries): two jobs on one job "
                "port (set job_port, or MA_VJ_NAME / MARUN_JOB_TOKEN per job)"
            )
        else:
            why = (
                f"node {self.coord.leader} ({self.coord.host}:{self.coord.port}) not reachable "
                f"{when}: {self._tries} tries over "
                f"{self.coord.arrival_timeout + self.coord.peer_timeout:g}s"
                + (f", last: {self._last_error}" if self._last_error else "")
            )
        return _leader_stop(self.coord.leader, why)

    def _lost(self, why: str) -> None:
        event = _leader_stop(self.coord.leader, why)
        self._disconnect()
        if self._stop_event is None:
            self._stop_event = event
            self._push(event)
        self._enter(MemberPhase.DONE)

    def _push(self, event: JobEvent) -> None:
        self._events.put(event)
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"!")

    def _send(self, kind: str, **fields: Any) -> None:
        body = {"job": self.coord.job, "node": self.coord.index, "slot": self.coord.slot}
        body.update(fields, type=kind)
        with self._send_lock:
            if kind in _STATE:
                self._state.pop(kind, None)  # (in the order said)
                self._state[kind] = fields
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


def _leader_stop(leader: int, why: str) -> JobEvent:
    """This node's own stop for node 0's loss (it never answered, or went silent)."""
    return JobEvent("stop", LOST_EXIT, {"node": leader, "exit_code": LOST_EXIT, "why": why})
