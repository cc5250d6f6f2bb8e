"""The log relay: N ranks each writing SIZE of 100-byte lines as fast as they can.

Under `marun run` (4 processes supervised: every byte to each rank's log file, every line of a
rank shown to marun's stdout prefixed `[0:<rank>] `, stdout going to a file) against the same N
writers started here with their stdout on files directly ("raw"). Three selections: every rank
shown, `--console-ranks 0` (rank 0 relayed, the others write their logs themselves) and
`--console-ranks none`. Every line is counted on every channel (log files and console, intact:
exactly the bytes written, with the prefix on the console), and each writer times each of its
writes: the longest is how long the relay kept it blocked on its pipe. Each run starts with no
file of the one before and nothing left to write back (os.sync).

Two times per run: the whole command (marun's own start and end included: a fixed cost of
about 0.1 s whatever the output, bench/startup.py) and the writers' time, from the first
writer's first write to the last writer's last write done (each writer notes both): what the
output path costs the ranks.

`--before SRC` also runs another checkout's marun (its src/ directory), interleaved with this
one's in the same runs, and prints its rows too: a before/after on the same load.

    python bench/relay.py [--small] [--runs 3] [--mb 50] [--ranks 4] [--before /tmp/old/src]
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
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
began = time.time()
for _ in range(size // len(chunk)):
    view = memoryview(chunk)
    while view:
        t = time.perf_counter()
        n = os.write(1, view)
        worst = max(worst, time.perf_counter() - t)
        view = view[n:]
with open(os.path.join(stats, name), "w") as fh:
    json.dump({"lines": size // len(chunk) * 640, "worst_write": worst, "began": began,
               "ended": time.time()}, fh)
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

        def writers(first: int = 0) -> float:
            """First write to last write done, over the writers of the run just ended from
            rank `first` on (1: those `--console-ranks 0` does not show)."""
            got = [json.loads((stats / str(r)).read_text()) for r in range(first, ranks)]
            return float(max(g["ended"] for g in got) - min(g["began"] for g in got))

        def spread() -> float:
            """From the first writer's first write to the last writer's: how staggered the
            starts were (marun forks each rank; the raw baseline spawns them)."""
            began = [json.loads((stats / str(r)).read_text())["began"] for r in range(ranks)]
            return float(max(began) - min(began))

        def raw() -> tuple[float, float, float, float]:
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
            return (seconds, writers(), writers(1), spread())

        def relayed(console_ranks: str, which: str = "now") -> tuple[float, float, float, float]:
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
            picked = {"all": list(range(ranks)), "none": []}
            shown = picked[console_ranks] if console_ranks in picked else [int(console_ranks)]
            for r in range(ranks):
                _check(logs / f"rank_{r}.log", r, lines)
                if r in shown:
                    try:
                        _check(console, r, lines, prefix=f"[0:{r}] ".encode())
                    except SystemExit as exc:  # which run, and keep its console to look at
                        keep = Path(tempfile.mkdtemp(prefix="marun-relay-failed-")) / "console.out"
                        shutil.copy(console, keep)
                        raise SystemExit(
                            f"{which}, --console-ranks {console_ranks}: {exc}; {keep}"
                        ) from None
                worst[which].append(json.loads((stats / str(r)).read_text())["worst_write"])
            return (seconds, writers(), writers(1), spread())

        selections = ("all", "0", "none")
        cases: list[Callable[[], tuple[float, float, float, float]]] = [raw]
        cases += [functools.partial(relayed, s) for s in selections]
        if before:
            cases += [functools.partial(relayed, s, "before") for s in selections]
        (base, base_writers, base_others, base_spread), *figures = interleaved(cases, runs)
    what = f"{ranks} ranks x {size / 1e6:.0f} MB of {LINE}-byte lines"
    goals = {"all": 0.5, "0": 0.5, "none": 0.9}
    rows: list[Row] = []
    for which, label in (("now", ""), ("before", "before: ")):
        if not worst[which]:
            continue
        mine = figures[:3] if which == "now" else figures[3:]
        for selection, (whole, writing, others, started) in zip(selections, mine):
            shown = "all shown" if selection == "all" else f"--console-ranks {selection}"
            goal = goals[selection]
            rows += [
                Row("relay", f"{label}{what}, {shown}", ms(whole), ms(base),
                    f"{base / whole:.2f}x raw", "-"),
                Row("relay", f"{label}  the writers' time, {shown}", ms(writing),
                    ms(base_writers), f"{base_writers / writing:.2f}x raw", f">= {goal}x raw",
                    base_writers / writing >= goal),
            ]  # fmt: skip
            if selection == "none":
                rows.append(
                    Row("relay", f"{label}  first to last rank's first write, {shown}",
                        ms(started), ms(base_spread), "-", "-")
                )  # fmt: skip
            if selection == "0":
                rows.append(
                    Row("relay", f"{label}  ranks 1-{ranks - 1} (not shown), --console-ranks 0",
                        ms(others), ms(base_others), f"{base_others / others:.2f}x raw",
                        ">= 0.9x raw", base_others / others >= 0.9)
                )  # fmt: skip
        blocked = max(worst[which])
        rows.append(
            Row("relay", f"{label}longest write blocked (any rank)", ms(blocked), "-", "-",
                "<= 100 ms", blocked <= 0.1)
        )  # fmt: skip
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
