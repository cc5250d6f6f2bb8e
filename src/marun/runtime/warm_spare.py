"""Warm restarts (`preload`, docs/warm-restarts.md): for each restarted process of the node, one
spare interpreter that has imported the listed modules (torch, ...) and waits; when a restart
round starts, the spare becomes the process, so the round's ranks skip those imports.

A spare is a child of marun started as a cold rank is (marun.runtime.spawn: its own session,
death with marun, the rank's working directory), with the rank's environment minus the round's
own variables (round number, budget, the ports that move: not known before the round) and the
script's own argv, so that what a module reads at import is what it reads in a cold start. It
runs `SPARE_CODE` (`python -c`): import the modules, say `R` (ready) or `F<why>` (the import
failed) on its control socket, then block reading it. Its stdout and stderr meanwhile are a
pipe of its own, read at its promotion: what the imports printed goes first into the rank's
output, as in a cold start.

Promotion (`Spares.take`), in marun's loop when a round starts the process: the spare must have
said `R` and still be there; marun gives its CPU priority back (spares wait at SCHED_IDLE where
marun may restore the priority), writes what the imports printed into the rank's output, and
sends, with the rank's stdout/stderr descriptor (SCM_RIGHTS: the pipe of its pump, or its log
file as a cold rank gets it), the round's argv, whole environment and working directory. The
spare puts them in place and runs the script as `python SCRIPT` would (`__main__`, `__file__`,
`sys.argv`, `sys.path[0]`), or `-m MODULE` as runpy's `_run_module_as_main`. Anything else (no
`R` yet, a failed import, a spare that died or cannot take the start) is a cold start, and the
supervisor says so in one line. A spare is never one of the job's processes: its end is no
failure; the node's stop kills every spare.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import selectors
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from marun._files import write_all
from marun.plan.launch_plan import ProcessSpec, warm_entry
from marun.runtime.execute import prepare_error_file
from marun.runtime.reaper import Ending, signal_group
from marun.runtime.signals import signal_name
from marun.runtime.spare_program import spare_argv
from marun.runtime.spawn import DIE_WITH_MARUN

SPARE = "spare"  # a spare's control socket's data in the supervisor's selector
SEND_WAIT = 5.0  # seconds a promotion may take to hand over (a spare stopped: a cold start)
READY, FAILED, START = b"R", b"F", b"P"
_CAP_SYS_NICE = 23  # <linux/capability.h>


def spare_env(
    base: Mapping[str, str], planned: Mapping[str, str], round_vars: frozenset[str]
) -> dict[str, str]:
    """The spare's environment: what the process gets (`base`, marun's, under its `planned`
    variables) without the round's own variables."""
    env = dict(base)
    env.update(planned)
    for name in round_vars:
        env.pop(name, None)
    return env


def start_message(argv: tuple[str, ...], env: Mapping[str, str], cwd: str) -> bytes:
    """What a promotion sends after the descriptor: a length, then the start (marshal: the
    spare reads it with no module a cold start would not have)."""
    payload = marshal.dumps({"argv": list(argv), "env": dict(env), "cwd": cwd})
    return len(payload).to_bytes(8, "big") + payload


def heard_state(heard: bytes) -> tuple[str, str]:
    """A spare's state from what it said on its control socket: ("ready", ""), ("failed",
    why) or ("importing", "") while no whole line came."""
    line, newline, _ = heard.partition(b"\n")
    if not newline:
        return "importing", ""
    if line == READY:
        return "ready", ""
    if line.startswith(FAILED):
        return "failed", line[1:].decode("utf-8", "replace")
    return "failed", f"said {line[:80]!r}"


def describe_end(ending: Ending | None) -> str:
    if ending is None:
        return "died while waiting"
    if ending.signal is not None:
        return f"died while waiting ({signal_name(ending.signal)})"
    return f"exited with {ending.code} while waiting"


def restorable_priority() -> tuple[int, int] | None:
    """marun's CPU scheduling policy and priority (what a cold rank inherits), when marun may
    give a spare it back after SCHED_IDLE (CAP_SYS_NICE, or RLIMIT_NICE allowing nice 0);
    None: spares wait at normal priority."""
    if not hasattr(os, "sched_getscheduler") or not hasattr(os, "SCHED_IDLE"):
        return None
    try:
        policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
        if policy == os.SCHED_IDLE:
            return None  # marun's own is idle already: nothing to lower
        if not (_has_cap_sys_nice() or _nice_limit() >= 20 - os.getpriority(os.PRIO_PROCESS, 0)):
            return None
    except OSError:
        return None
    return policy, param.sched_priority


def _has_cap_sys_nice() -> bool:
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> _CAP_SYS_NICE & 1)
    return False


def _nice_limit() -> int:
    import resource

    return int(resource.getrlimit(resource.RLIMIT_NICE)[0])


class Voice(Protocol):
    """Where a spare's news goes (the supervisor's NodeState): marun's events, stderr."""

    def emit(self, event: str, level: str = "info", **fields: object) -> None: ...

    def say(self, text: str) -> None: ...


@dataclass
class Spare:
    index: int
    popen: subprocess.Popen[bytes]
    control: socket.socket  # marun's end
    output: int  # the read end of its stdout/stderr while it waits (non-blocking)
    idle: bool  # put at SCHED_IDLE: its priority must be given back at promotion
    name: str = ""  # its process's
    began: float = 0.0  # monotonic, at its start
    heard: bytes = b""
    ending: Ending | None = None  # reaped
    watched: bool = True  # its control socket is in the loop's selector until it said its line
    closed: bool = False


class Spares:
    """The node's spares, one per process index at most. Used by the supervisor's loop only:
    `start` (StartWarmSpares), `heard` (a spare's control socket in the loop's `selector`, its data
    SPARE, is readable), `take` (a round's start), `reaped` (every reap), `drop_all` (the stop,
    and the end whatever happened)."""

    def __init__(
        self,
        modules: tuple[str, ...],
        round_vars: frozenset[str],
        voice: Voice,
        selector: selectors.BaseSelector,
    ) -> None:
        self.modules = modules
        self.round_vars = round_vars
        self._emit = voice.emit
        self._say = voice.say
        self._sel = selector
        self._by_index: dict[int, Spare] = {}
        self._by_pid: dict[int, Spare] = {}  # until reaped (a promoted one leaves at once)
        self._priority = restorable_priority()

    def start(self, index: int, spec: ProcessSpec) -> None:
        """A spare for process `index` unless it has one (still importing, or ready)."""
        if index in self._by_index or warm_entry(spec.argv) is None:
            return
        env = spare_env(os.environ, spec.env, self.round_vars)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        read_fd, write_fd = os.pipe()
        try:
            popen = subprocess.Popen(
                spare_argv(spec.argv, theirs.fileno(), self.modules),
                cwd=spec.cwd,
                env=env,
                stdout=write_fd,
                stderr=write_fd,
                start_new_session=True,
                pass_fds=(theirs.fileno(),),
                preexec_fn=DIE_WITH_MARUN,  # noqa: PLW1509 (one prctl call, as spawn's)
            )
        except OSError as exc:
            mine.close()
            os.close(read_fd)
            self._emit("warm_spare_not_started", "warning", process=spec.name, error=exc.strerror)
            return
        finally:
            theirs.close()
            os.close(write_fd)
        os.set_blocking(read_fd, False)
        mine.setblocking(False)
        idle = False
        if self._priority is not None:
            with contextlib.suppress(OSError):
                os.sched_setscheduler(popen.pid, os.SCHED_IDLE, os.sched_param(0))
                idle = True
        spare = Spare(index, popen, mine, read_fd, idle, spec.name, time.monotonic())
        self._sel.register(mine, selectors.EVENT_READ, SPARE)
        self._by_index[index] = spare
        self._by_pid[popen.pid] = spare
        self._emit(
            "warm_spare_started",
            process=spec.name,
            pid=popen.pid,
            modules=list(self.modules),
            idle_priority=idle,
        )

    def heard(self, control: socket.socket) -> None:
        """A spare's control socket is readable: its line (ready, or the import failed), or its
        end. Said once as an event; the socket then leaves the selector."""
        spare = next((s for s in self._by_index.values() if s.control is control), None)
        if spare is None:
            return
        state, why = self._state(spare)
        if state == "importing":
            return
        self._unwatch(spare)
        if state == "ready":
            took = round(time.monotonic() - spare.began, 3)
            pid = spare.popen.pid
            self._emit("warm_spare_ready", process=spare.name, pid=pid, import_seconds=took)
        else:
            self._emit(
                "warm_spare_unusable", "warning", process=spare.name, pid=spare.popen.pid, why=why
            )

    def take(self, index: int, spec: ProcessSpec, out_fd: int) -> subprocess.Popen[bytes] | None:
        """Process `index` starts as `spec` (the round's) with `out_fd` as stdout and stderr: its
        spare, promoted, or None (a cold start; one line says why where it had a spare)."""
        popen, why = self._take(index, spec, out_fd)
        if why:
            who = spec.name if spec.rank is None else f"rank {spec.rank}"
            self._say(f"marun: {who} starts cold: its spare {why}\n")
        return popen

    def _take(
        self, index: int, spec: ProcessSpec, out_fd: int
    ) -> tuple[subprocess.Popen[bytes] | None, str]:
        spare = self._by_index.get(index)
        if spare is None:
            return None, ""
        state, why = self._state(spare)
        if state == "importing":
            # Kept for the round after this one: it goes on importing, at its low priority.
            return None, f"is still importing {','.join(self.modules)}"
        del self._by_index[index]
        if state != "ready":
            self._discard(spare)
            return None, why
        why = self._promote(spare, spec, out_fd)
        if why:
            self._discard(spare)
            return None, why
        del self._by_pid[spare.popen.pid]
        self._close(spare)
        return spare.popen, ""

    def reaped(self, pid: int, ending: Ending) -> bool:
        """Whether `pid`, reaped, was a spare (then it is no process of the job)."""
        spare = self._by_pid.pop(pid, None)
        if spare is None:
            return False
        spare.ending = ending
        spare.popen.returncode = ending.code if ending.signal is None else -ending.signal
        if self._by_index.get(spare.index) is spare:
            self._emit(
                "warm_spare_exited",
                "warning",
                process=spare.name,
                pid=pid,
                exit_code=ending.code,
                signal=None if ending.signal is None else signal_name(ending.signal),
            )
        return True

    def drop_all(self) -> None:
        """Kill every spare (they are reaped as the node's other children are)."""
        for spare in list(self._by_index.values()):
            self._discard(spare)
        self._by_index.clear()

    def pids(self) -> list[int]:
        """The spares not yet reaped."""
        return sorted(self._by_pid)

    # -- the parts ----------------------------------------------------------------------------

    def _state(self, spare: Spare) -> tuple[str, str]:
        """("ready" | "importing" | "failed" | "died", why) from what it said and its end."""
        eof = False
        while not spare.closed:
            try:
                data = spare.control.recv(4096)
            except BlockingIOError:
                break
            except OSError:
                data = b""
            if not data:
                eof = True
                break
            spare.heard += data
        state, why = heard_state(spare.heard)
        if state == "failed":
            return state, f"could not import {','.join(self.modules)} ({why})"
        if state == "ready" and not eof and spare.ending is None:
            return state, ""
        if state == "importing" and not eof and spare.ending is None:
            return state, ""
        return "died", describe_end(spare.ending)

    def _promote(self, spare: Spare, spec: ProcessSpec, out_fd: int) -> str:
        """Hand process `spec` over to the ready `spare`: "" when it took it, else why not."""
        pid = spare.popen.pid
        if spare.idle and self._priority is not None:
            policy, priority = self._priority
            try:
                for task in os.listdir(f"/proc/{pid}/task"):
                    with contextlib.suppress(ProcessLookupError):
                        os.sched_setscheduler(int(task), policy, os.sched_param(priority))
            except OSError as exc:
                return f"could not be given its CPU priority back ({exc.strerror})"
        printed = _read_all(spare.output)  # what the imports printed: the rank's first output
        if printed:
            with contextlib.suppress(OSError):
                write_all(out_fd, printed)
        env = dict(os.environ)
        env.update(spec.env)
        prepare_error_file(spec)
        try:
            spare.control.settimeout(SEND_WAIT)
            socket.send_fds(spare.control, [START], [out_fd])
            spare.control.sendall(start_message(spec.argv, env, spec.cwd))
        except OSError as exc:
            return f"did not take the start ({exc.strerror or type(exc).__name__})"
        return ""

    def _unwatch(self, spare: Spare) -> None:
        if spare.watched:
            spare.watched = False
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(spare.control)

    def _close(self, spare: Spare) -> None:
        if not spare.closed:
            self._unwatch(spare)
            spare.closed = True
            spare.control.close()
            os.close(spare.output)

    def _discard(self, spare: Spare) -> None:
        self._close(spare)
        if spare.ending is None:
            signal_group(spare.popen.pid, signal.SIGKILL)


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        try:
            data = os.read(fd, 1 << 16)
        except (BlockingIOError, OSError):
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks)
