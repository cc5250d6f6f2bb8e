"""Shared test helpers.

`marun(...)` runs the real CLI in a subprocess with a clean platform environment (nothing of the
developer's MA_*/VC_*/RANK_* leaks in). Tests marked `e2e` start real frameworks or system tools;
with MARUN_REQUIRE_E2E=1 (as CI sets it) a skipped e2e test is reported as a failure, so a
missing install can never pass silently.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from subprocess import CompletedProcess

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"

_PLATFORM_PREFIXES = ("MA_", "VC_", "VK_", "RANK", "ASCEND_", "DEVICE_ID", "MS_", "MARUN_", "TF_")


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_PLATFORM_PREFIXES)}
    env.pop("MASTER_ADDR", None)
    env.pop("MASTER_PORT", None)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


# `marun plan` starts nothing and reads only its environment, working directory and arguments:
# tests/unit runs it in this process (the same entry point, `marun.entry.main`), so that a unit
# test starts no process; tests/cli keeps driving the real command. MARUN_TEST_SUBPROCESS=1
# runs it as `python -m marun` in tests/unit too.
_IN_PROCESS = ("plan",)
_SUBPROCESS = os.environ.get("MARUN_TEST_SUBPROCESS") == "1"


def _in_process(args: Sequence[str], env: Mapping[str, str], cwd: str | None) -> CompletedProcess:
    import contextlib
    import io

    from marun.entry import main

    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    out, err = io.StringIO(), io.StringIO()
    code = 0
    try:
        os.environ.clear()
        os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(list(args))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
    return subprocess.CompletedProcess(
        [sys.executable, "-m", "marun", *args], code, out.getvalue(), err.getvalue()
    )


def run_marun(
    args: Sequence[str],
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run `marun ARGS` (the real CLI) and capture its output: `marun plan` in this process,
    anything else as `python -m marun` in a process of its own."""
    full = clean_env(env)
    # An interpreter setting (PYTHONPROFILEIMPORTTIME, ...) needs an interpreter of its own.
    interpreter = any(k.startswith("PYTHON") for k in (env or {}))
    unit = "/tests/unit/" in sys._getframe(1).f_code.co_filename  # tests/cli: a real process
    if unit and args[:1] and args[0] in _IN_PROCESS and not interpreter and not _SUBPROCESS:
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


def free_port() -> int:
    """A port free now and outside the kernel's ephemeral range (32768-60999 here), for a test
    whose marun binds it later, maybe again and again for minutes: a port from that range (what
    bind(0) gives) can be taken meanwhile as the local end of any outgoing connection, and a
    fixed default (8118, 36666) by anything else on the machine."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    while True:
        port = random.randrange(10000, min(low, 32768))
        with socket.socket() as sock:
            try:
                sock.bind(("", port))
            except OSError:
                continue
            return port


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
