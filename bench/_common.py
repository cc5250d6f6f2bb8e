"""What every bench shares: the environment marun runs in, timing with medians, peak RSS, and one
table format (bench/run_all.py prints the rows of all of them together).

Runs use bytecode caches in a private directory (an installed wheel has its .pyc files; this
repo's dev shell sets PYTHONDONTWRITEBYTECODE, which would make every start compile marun)."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
PYCACHE = Path("/tmp") / f"marun-bench-pycache-{os.getuid()}"


@dataclass
class Row:
    bench: str
    figure: str
    value: str
    baseline: str
    ratio: str
    goal: str
    met: bool | None = None


def bench_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment without the platform's variables, with this checkout's marun first
    ($MARUN_BENCH_SRC: another src/ directory, to measure a commit against another)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MA_", "VC_", "MARUN_"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    env["PYTHONPATH"] = os.environ.get("MARUN_BENCH_SRC", str(REPO / "src"))
    env.update(extra or {})
    return env


GNU_TIME = "/usr/bin/time"


def timed(
    argv: Sequence[str],
    env: dict[str, str],
    cwd: str | Path,
    stdout: int | None = None,
    stderr: int | None = None,
) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of one run of `argv`, which must exit 0.

    The peak is the process's own, exec included (marun's part counts in an exec'd script's
    peak). A child's peak also counts its parent's memory before the exec, so when GNU time is
    there it starts the command (about 2 MiB); else the peak is at least this Python's size.
    """
    with tempfile.NamedTemporaryFile(prefix="marun-bench-rss-") as rss_file:
        gnu_time = os.access(GNU_TIME, os.X_OK)
        full = [GNU_TIME, "-f", "%M", "-o", rss_file.name, *argv] if gnu_time else list(argv)
        start = time.perf_counter()
        proc = subprocess.Popen(
            full,
            env=env,
            cwd=str(cwd),
            stdout=subprocess.DEVNULL if stdout is None else stdout,
            stderr=subprocess.DEVNULL if stderr is None else stderr,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        if code != 0:
            raise SystemExit(f"{' '.join(argv)}: exit {code}")
        text = Path(rss_file.name).read_text().strip().splitlines() if gnu_time else []
    kib = int(text[-1]) if text and text[-1].isdigit() else usage.ru_maxrss
    return seconds, kib * 1024


def medians(one: Callable[[], tuple[float, ...]], runs: int, warmup: int = 1) -> tuple[float, ...]:
    """Per-figure medians of `runs` calls of `one`, after `warmup` calls thrown away."""
    for _ in range(warmup):
        one()
    samples = [one() for _ in range(runs)]
    return tuple(statistics.median(column) for column in zip(*samples))


def interleaved(
    cases: Sequence[Callable[[], tuple[float, ...]]], runs: int, warmup: int = 1
) -> list[tuple[float, ...]]:
    """Like `medians`, for several cases run in turn (case 1, 2, ..., 1, 2, ...), so a change in
    the machine's load during the run touches each case alike."""
    for _ in range(warmup):
        for case in cases:
            case()
    samples: list[list[tuple[float, ...]]] = [[] for _ in cases]
    for _ in range(runs):
        for i, case in enumerate(cases):
            samples[i].append(case())
    return [tuple(statistics.median(col) for col in zip(*s)) for s in samples]


def load_note() -> str:
    one, _, _ = os.getloadavg()
    cores = os.cpu_count() or 1
    busy = " (under load)" if one > 0.5 * cores else ""
    return f"{cores} cores, load {one:.2f}{busy}, Python {sys.version.split()[0]}"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds >= 0.01 else f"{seconds * 1000:.1f} ms"


def mib(size: float) -> str:
    return f"{size / (1 << 20):.1f} MiB"


def print_rows(rows: Sequence[Row], out: object = None) -> None:
    header = ("bench", "figure", "value", "baseline", "ratio", "goal", "met")
    table = [header] + [
        (r.bench, r.figure, r.value, r.baseline, r.ratio, r.goal,
         "-" if r.met is None else ("yes" if r.met else "NO"))
        for r in rows
    ]  # fmt: skip
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    stream = out or sys.stdout
    for line in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip(), file=stream)


def standard_args(doc: str | None, default_runs: int) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--small", action="store_true", help="CI size: seconds, not minutes")
    parser.add_argument("--runs", type=int, default=default_runs, help="runs per figure (median)")
    return parser


def pct(values: Sequence[float], q: float) -> float:
    """The q-th percentile (1-99) of `values`, inclusive; the value itself when there is one."""
    import statistics

    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    return statistics.quantiles(ordered, n=100, method="inclusive")[int(q) - 1]
