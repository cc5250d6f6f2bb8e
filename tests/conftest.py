"""Shared test helpers.

`marun(...)` runs the real CLI in a subprocess with a clean platform environment (nothing of the
developer's MA_*/VC_*/RANK_* leaks in). Tests marked `e2e` start real frameworks or system tools;
with MARUN_REQUIRE_E2E=1 (as CI sets it) a skipped e2e test is reported as a failure, so a
missing install can never pass silently.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

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


def run_marun(
    args: Sequence[str],
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run `python -m marun ARGS` (the real CLI) and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "marun", *args],
        env=clean_env(env),
        cwd=str(cwd) if cwd else None,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


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
