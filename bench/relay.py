"""The log relay: N ranks each writing SIZE of 100-byte lines as fast as they can.

Under `marun run` (4 processes supervised: every byte to each rank's log file, every line to
marun's stdout prefixed `[0:<rank>] `, stdout going to a file) against the same N writers
started here with their stdout on files directly. Every line is counted on every channel (log
files and console, intact: exactly the bytes written, with the prefix on the console), and each
writer times each of its writes: the longest is how long the relay kept it blocked on its pipe.
Each run starts with no file of the one before and nothing left to write back (os.sync).

`--before SRC` also runs another checkout's marun (its src/ directory), interleaved with this
one's in the same runs, and prints its rows too: a before/after on the same load.

    python bench/relay.py [--small] [--runs 3] [--mb 50] [--ranks 4] [--before /tmp/old/src]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    PYTHON,
    Row,
    bench_env,
    interleaved,
    load_note,
    ms,
    print_rows,
    standard_args,
    timed,
)

LINE = 100
WRITER = r"""
import json, os, sys, time
size, stats = int(sys.argv[1]), sys.argv[2]
name = os.environ.get("RANK", sys.argv[3] if len(sys.argv) > 3 else "0")
line = (f"rank {name} ".encode() + b"x" * 100)[:99] + b"\n"
chunk = line * 640  # 64,000 bytes: whole lines
worst = 0.0
for _ in range(size // len(chunk)):
    view = memoryview(chunk)
    while view:
        t = time.perf_counter()
        n = os.write(1, view)
        worst = max(worst, time.perf_counter() - t)
        view = view[n:]
with open(os.path.join(stats, name), "w") as fh:
    json.dump({"lines": size // len(chunk) * 640, "worst_write": worst}, fh)
"""


def _line(rank: int) -> bytes:
    return (f"rank {rank} ".encode() + b"x" * 100)[:99] + b"\n"


def _check(path: Path, rank: int, lines: int, prefix: bytes = b"") -> None:
    data = path.read_bytes()
    expected = prefix + _line(rank)
    if data.count(expected) != lines:
        raise SystemExit(f"{path}: {data.count(expected)} intact lines of rank {rank}, not {lines}")


def run(
    small: bool, runs: int, mb: float | None = None, ranks: int = 4, before: str | None = None
) -> list[Row]:
    size = int((mb if mb is not None else (2 if small else 50)) * 1_000_000)
    size -= size % 64_000
    lines = size // LINE
    env = bench_env()
    worst: dict[str, list[float]] = {"now": [], "before": []}
    with tempfile.TemporaryDirectory(prefix="marun-relay-") as tmp:
        root = Path(tmp)
        writer = root / "writer.py"
        writer.write_text(WRITER)
        stats = root / "stats"
        stats.mkdir()

        def fresh() -> None:
            """Every run starts as in a new container: no file of an earlier run to truncate
            (ext4 writes a truncated file back when it is closed: marun closes its logs before
            it exits, the raw baseline after its timer), no earlier run's data being written
            back to the disk meanwhile."""
            for old in [*root.glob("raw*.log"), root / "console.out"]:
                old.unlink(missing_ok=True)
            shutil.rmtree(root / "logs", ignore_errors=True)
            os.sync()

        def raw() -> tuple[float]:
            fresh()
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
            out = [os.open(root / f"raw{r}.log", flags, 0o600) for r in range(ranks)]
            start = time.perf_counter()
            procs = [
                subprocess.Popen([PYTHON, str(writer), str(size), str(stats), str(r)],
                                 stdout=out[r], env=env)
                for r in range(ranks)
            ]  # fmt: skip
            codes = [p.wait() for p in procs]
            seconds = time.perf_counter() - start
            for fd in out:
                os.close(fd)
            assert codes == [0] * ranks, codes
            for r in range(ranks):
                _check(root / f"raw{r}.log", r, lines)
            return (seconds,)

        def relayed(console_ranks: str, which: str = "now") -> tuple[float]:
            logs = root / "logs"
            console = root / "console.out"
            argv = [
                PYTHON, "-m", "marun", "run", "--mode", "pytorch", "--nproc-per-node", str(ranks),
                "--log-dir", str(logs), "--console-ranks", console_ranks, "--",
                str(writer), str(size), str(stats), "--init_method", "tcp://127.0.0.1:29500",
            ]  # fmt: skip
            fresh()
            run_env = env if which == "now" else {**env, "PYTHONPATH": str(before)}
            with open(console, "wb") as fh:
                seconds, _ = timed(argv, run_env, root, stdout=fh.fileno())
            shown = range(ranks) if console_ranks == "all" else [int(console_ranks)]
            for r in range(ranks):
                _check(logs / f"rank_{r}.log", r, lines)
                if r in shown:
                    _check(console, r, lines, prefix=f"[0:{r}] ".encode())
                worst[which].append(json.loads((stats / str(r)).read_text())["worst_write"])
            return (seconds,)

        cases = [raw, lambda: relayed("all"), lambda: relayed("0")]
        if before:
            cases += [lambda: relayed("all", "before"), lambda: relayed("0", "before")]
        (base,), *figures = interleaved(cases, runs)
    what = f"{ranks} ranks x {size / 1e6:.0f} MB of {LINE}-byte lines"
    rows: list[Row] = []
    for which, label in (("now", ""), ("before", "before: ")):
        if not worst[which]:
            continue
        (shown_all,), (shown_one,) = figures[:2] if which == "now" else figures[2:]
        blocked = max(worst[which])
        rows += [
            Row("relay", f"{label}{what}, all shown", ms(shown_all), ms(base),
                f"{base / shown_all:.2f}x raw", ">= 0.5x raw", base / shown_all >= 0.5),
            Row("relay", f"{label}{what}, --console-ranks 0", ms(shown_one), ms(base),
                f"{base / shown_one:.2f}x raw", ">= 0.5x raw", base / shown_one >= 0.5),
            Row("relay", f"{label}longest write blocked on the pipe", ms(blocked), "-", "-",
                "<= 100 ms", blocked <= 0.1),
        ]  # fmt: skip
    return rows


def main() -> None:
    parser = standard_args(__doc__, 3)
    parser.add_argument("--mb", type=float, default=None, help="MB per rank (default 50)")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--before", help="another checkout's src/, run interleaved with this one")
    args = parser.parse_args()
    rows = run(args.small, args.runs, args.mb, args.ranks, args.before)
    print(f"medians of {args.runs} runs, {load_note()}; every line counted on every channel")
    print_rows(rows)


if __name__ == "__main__":
    main()
