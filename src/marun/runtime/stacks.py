"""Every running process's Python stacks, for the hang watchdog: `py-spy dump` per process
(the optional extra `marun[hang]` installs it), written into the process's log and returned for
the job's report."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

MISSING = "py-spy is not installed: no stacks (pip install 'marun[hang]')"


def py_spy() -> str | None:
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.is_file() else None


def dump_stacks(
    records: Sequence[Any],
    running: Mapping[int, Any],
    log_fds: Sequence[int],
    *,
    write: bool = True,
) -> str:
    """Every running rank's stacks; written into its log too unless `write` is False (the
    watchdog's samples, compared to tell a spinning job from a working one)."""
    from marun._files import write_all

    tool = py_spy()
    parts: list[str] = []
    for pid, (rec, _) in sorted(running.items()):
        if rec.spec.daemon:
            continue
        if tool is None:
            text = MISSING
        else:
            try:
                done = subprocess.run(
                    [tool, "dump", "--pid", str(pid)],
                    capture_output=True,
                    check=False,
                    text=True,
                    timeout=10,
                )
                text = (done.stdout + done.stderr).strip()
            except (OSError, subprocess.TimeoutExpired) as exc:
                text = f"py-spy dump failed: {exc}"
        block = f"[marun] hang: stacks of {rec.spec.name} (pid {pid}):\n{text}\n"
        if write:
            with contextlib.suppress(OSError, ValueError):
                write_all(log_fds[list(records).index(rec)], block.encode())
        parts.append(f"{rec.spec.name} (rank {rec.spec.rank}, pid {pid}):\n{text}\n")
    return "".join(parts) or "(no running process)\n"
