"""`marun run --supervise`: what supervision adds to one process, and how soon 8 processes are
all running.

- one process: wall time of `marun run --supervise -- noop.py` against a bare `python noop.py`,
  and marun's peak RSS (the largest of marun and its child: marun's own here);
- 8 processes: from the command's start to the moment the last of 8 scripts has begun (each
  writes time.time() first thing), against a shell loop starting the same 8 scripts with `&`.

    python bench/supervise.py [--small] [--runs 15]
"""

from __future__ import annotations

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
    mib,
    ms,
    print_rows,
    standard_args,
    timed,
)

INIT = ["--init_method", "tcp://127.0.0.1:29500"]
STAMP = "import os, sys, time\nt = time.time()\n" \
    "open(os.path.join(sys.argv[1], os.environ['RANK']), 'w').write(repr(t))\n"  # fmt: skip


def run(small: bool, runs: int, procs: int = 8) -> list[Row]:
    env = bench_env()
    with tempfile.TemporaryDirectory(prefix="marun-supervise-") as tmp:
        root = Path(tmp)
        (root / "noop.py").write_text("pass\n")
        (root / "stamp.py").write_text(STAMP)
        stamps = root / "stamps"
        stamps.mkdir()
        logs = ["--log-dir", str(root / "logs")]

        def bare() -> tuple[float, float]:
            return timed([PYTHON, "noop.py"], env, root)

        def supervised() -> tuple[float, float]:
            argv = [PYTHON, "-m", "marun", "run", "--supervise", *logs, "--", "noop.py", *INIT]
            return timed(argv, env, root)

        def all_started(argv: list[str]) -> tuple[float]:
            for old in stamps.iterdir():
                old.unlink()
            start = time.time()
            subprocess.run(argv, env=env, cwd=root, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)  # fmt: skip
            started = [float(p.read_text()) for p in stamps.iterdir()]
            assert len(started) == procs, started
            return (max(started) - start,)

        loop = " ".join(f"RANK={i} {PYTHON} stamp.py {stamps} &" for i in range(procs))
        shell = ["sh", "-c", loop + " wait"]
        eight = [PYTHON, "-m", "marun", "run", "--nproc-per-node", str(procs), *logs, "--",
                 "stamp.py", str(stamps), *INIT]  # fmt: skip
        (base, base_rss), (sup, sup_rss), (loop_s,), (eight_s,) = interleaved(
            [bare, supervised, lambda: all_started(shell), lambda: all_started(eight)],
            max(3, runs // 3) if small else runs,
        )
    return [
        Row("supervise", "marun run --supervise, 1 process", ms(sup), ms(base),
            f"+{ms(sup - base)}", "-", None),
        Row("supervise", "  peak RSS (marun's)", mib(sup_rss), mib(base_rss),
            f"+{mib(sup_rss - base_rss)}", "<= 40 MiB", sup_rss <= 40 * (1 << 20)),
        Row("supervise", f"{procs} processes all started", ms(eight_s), ms(loop_s) + " (sh loop)",
            f"+{ms(eight_s - loop_s)}", "<= +150 ms", eight_s - loop_s <= 0.150),
    ]  # fmt: skip


def main() -> None:
    parser = standard_args(__doc__, 15)
    args = parser.parse_args()
    rows = run(args.small, args.runs)
    print(f"medians of {args.runs} runs, {load_note()}")
    print_rows(rows)


if __name__ == "__main__":
    main()
