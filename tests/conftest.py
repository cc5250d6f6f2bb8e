"""Shared test helpers.

`marun(...)` runs the real CLI in a subprocess with a clean platform environment (nothing of the
developer's MA_*/VC_*/RANK_* leaks in). Tests marked `e2e` start real frameworks or system tools;
with MARUN_REQUIRE_E2E=1 (as CI sets it) a skipped e2e test is reported as a failure, so a
missing install can never pass silently.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"

_PLATFORM_PREFIXES = ("MA_", "VC_", "VK_", "RANK", "ASCEND_", "DEVICE_ID", "MS_", "MARUN_", "TF_")

# Every phase change a test causes, in this process or in a marun it starts, is checked against
# its machine's table and raises when not allowed (marun.runtime.transitions).
#
# The preflight at the start barrier (marun.preflight) is off in the jobs the suite starts: they
# pretend to have GPUs (MA_NUM_GPUS) on a machine that has none, and the preflight's device check
# rightly refuses them. The preflight's own tests turn it on (tests/cli/test_preflight_barrier.py,
# tests/e2e/test_preflight_netns.py).
STRICT_PHASES = {"MARUN_STRICT_PHASES": "1", "MARUN_PREFLIGHT": "off"}
os.environ.update(STRICT_PHASES)

# The tests send stop signals to maruns as a user's ^C, a terminal's hangup or the platform
# would, and a marun keeps a stop signal ignored by whoever started it (marun.runtime.signals):
# a suite started in the background by a non-interactive shell (`cmd &`: SIGINT and SIGQUIT
# ignored) or under `nohup` (SIGHUP) would pass that on to every marun it starts, and a test of
# a ^C would wait for nothing. The suite starts from the usual dispositions, however it is run.
for _signum in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
    if signal.getsignal(_signum) is signal.SIG_IGN:
        _usual = signal.default_int_handler if _signum == signal.SIGINT else signal.SIG_DFL
        signal.signal(_signum, _usual)


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_PLATFORM_PREFIXES)}
    env.pop("MASTER_ADDR", None)
    env.pop("MASTER_PORT", None)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(STRICT_PHASES)
    env.update(extra or {})
    return env


# `marun plan` starts nothing and reads only its environment, working directory and arguments:
# tests/unit runs it (and every other command: `--help`, usage errors) in this process (the same
# entry point, `marun.command.entry.main`), so that a unit test starts no process; tests/cli keeps
# driving the real command. So does `marun run` up to
# the point where it would start the plan (`runtime.execute.execute`): a unit test of `run`
# is one of input it refuses, and a run that gets that far fails the test (WouldStart) instead
# of replacing the test's process. MARUN_TEST_SUBPROCESS=1 runs them as `python -m marun` in
# tests/unit too.
_SUBPROCESS = os.environ.get("MARUN_TEST_SUBPROCESS") == "1"
# What changes how an interpreter starts needs one of its own; PYTHONPATH is only passed on
# (MPI's sshd sessions get it), the in-process marun is already the checkout's.
_INTERPRETER_ONLY = "PYTHONPATH"
WOULD_START = 99  # the code an in-process `marun run` "ends" with when it would start the plan


class WouldStart(BaseException):
    """An in-process `marun run` reached `execute`: it would start (or exec) the plan here."""


def _would_start(plan: Any, open_link: Any = None) -> int:
    """`execute` in a unit test: a plan that starts nothing (another device's start on Ascend)
    is carried out for real (it writes files, starts nothing); any other raises WouldStart."""
    if all(not node.processes for node in plan.nodes):
        return int(_REAL_EXECUTE[0](plan, open_link))
    raise WouldStart(plan)


_REAL_EXECUTE: list[Any] = []


def _exit_here(code: int) -> None:
    sys.exit(code)


def _in_process(args: Sequence[str], env: Mapping[str, str], cwd: str | None) -> CompletedProcess:
    import contextlib
    import io

    from marun.command.entry import main

    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    out, err = io.StringIO(), io.StringIO()
    import marun.runtime.execute as runtime_execute
    from marun.command import entry

    saved_execute, saved_exit = runtime_execute.execute, entry._exit_at_once
    _REAL_EXECUTE[:] = [saved_execute]
    code = 0
    try:
        os.environ.clear()
        os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        runtime_execute.execute = _would_start
        entry._exit_at_once = _exit_here  # it ends the process with os._exit: the test's
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(list(args))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except WouldStart:
                code = WOULD_START
                err.write("(test) marun run would start the plan here\n")
    finally:
        runtime_execute.execute = saved_execute
        entry._exit_at_once = saved_exit
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
    return subprocess.CompletedProcess(
        [sys.executable, "-m", "marun", *args], code, out.getvalue(), err.getvalue()
    )


def _called_from(part: str) -> bool:
    """Whether the nearest test module on the stack (a tests/<part>/ file, past shared helpers
    such as tests/mpi_plans.py) is under `part`."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if any(p in name for p in ("/tests/unit/", "/tests/cli/", "/tests/e2e/")):
            return part in name
        frame = frame.f_back  # type: ignore[assignment]
    return False


def run_marun(
    args: Sequence[str],
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run `marun ARGS` (the real CLI) and capture its output: from tests/unit in this process
    (`marun run` up to the start: WOULD_START), from anywhere else as `python -m marun` in a
    process of its own."""
    full = clean_env(env)
    # An interpreter setting (PYTHONPROFILEIMPORTTIME, ...) needs an interpreter of its own.
    interpreter = any(k.startswith("PYTHON") and k != _INTERPRETER_ONLY for k in (env or {}))
    unit = _called_from("/tests/unit/")  # tests/cli and tests/e2e: a real process
    if unit and not interpreter and not _SUBPROCESS:
        return _in_process(args, full, str(cwd) if cwd else None)
    return subprocess.run(
        [sys.executable, "-m", "marun", *args],
        env=full,
        cwd=str(cwd) if cwd else None,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def shown_while_running(
    shown: Callable[[], bool], proc: subprocess.Popen[Any], limit: float, every: float = 0.05
) -> bool:
    """Whether `shown()` comes true within `limit` s, while `proc` runs or in what it left once it
    ended: it is polled before each look, so the look after its end reads its last lines (a
    process that printed the line and exited between a look and a poll is not a failure)."""
    deadline = time.monotonic() + limit
    while True:
        ended = proc.poll() is not None
        if shown():
            return True
        if ended or time.monotonic() > deadline:
            return False
        time.sleep(every)


def free_port() -> int:
    """A port free now on every address and outside the kernel's ephemeral range (32768-60999
    here), for a test whose marun binds it later, maybe again and again for minutes
    (marun.sim.ports.free_port says why); from MARUN_SIM_PORTS's range when set: scripts/test.sh
    gives each lane that runs beside another a range of its own."""
    from marun.sim.ports import free_port as choose

    return choose("")


def free_ports_after(count: int) -> int:
    """A free port (as free_port) whose next `count` ports are free too and inside the lane's
    range: a job's port with its liveness hubs' (the job's port plus each group's number)."""
    import socket

    from marun.sim.ports import port_range

    top = (port_range() or (0, 65536))[1]
    for _ in range(100):
        port = free_port()
        if port + count >= top:
            continue
        try:
            for other in range(port + 1, port + count + 1):
                with socket.socket() as sock:
                    sock.bind(("", other))
        except OSError:
            continue
        return port
    raise AssertionError(f"no {count + 1} free ports in a row")


@pytest.fixture
def marun() -> Iterator[object]:
    yield run_marun


@pytest.fixture
def script(tmp_path: Path) -> Path:
    """A trivial training script in a fresh working directory."""
    path = tmp_path / "train.py"
    path.write_text("import os, sys\nprint('hello', sys.argv[1:])\n")
    return path


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if (
        report.skipped
        and os.environ.get("MARUN_REQUIRE_E2E") == "1"
        and item.get_closest_marker("e2e") is not None
    ):
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"MARUN_REQUIRE_E2E=1 but this end-to-end test skipped: {reason}"


# tests/unit: a unit test starts no process (part 12). Every process start while a unit test
# runs (subprocess, fork, exec, posix_spawn, os.system: Python's audit events, so whatever the
# API) fails that test, unless it is marked `starts_processes` with the reason; tests that need a
# process live in tests/cli. `marun plan` and `marun run` run in this process (above).
_STARTS = ("subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.system")
_watching: list[list[str]] = []  # the running unit test's list of starts, while one runs
_PID = os.getpid()


def _audit(event: str, args: tuple[object, ...]) -> None:
    if _watching and event in _STARTS and os.getpid() == _PID:
        what = args[1] if event == "subprocess.Popen" and len(args) > 1 else args[:1]
        _watching[0].append(f"{event} {what!r}"[:200])


sys.addaudithook(_audit)  # for the session; it records only while a unit test runs


@pytest.fixture(autouse=True)
def _no_process(request: pytest.FixtureRequest) -> Iterator[None]:
    unit = "/tests/unit/" in str(request.node.path)
    if not unit or request.node.get_closest_marker("starts_processes") is not None:
        yield
        return
    started: list[str] = []
    _watching[:] = [started]
    try:
        yield
    finally:
        _watching.clear()
    if started:
        pytest.fail(
            "a unit test starts no process (move it to tests/cli, or mark it "
            f"starts_processes with the reason); it started: {started[:3]}",
            pytrace=False,
        )
