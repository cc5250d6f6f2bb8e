"""What reading the job's progress costs (marun.progress, runtime.node_progress), in this process:

- per line: `Recogniser.read` on every line (and `\\r` redraw) of the real samples in
  tests/data/progress, and on lines that hold no counter (a log line, a warning);
- per look: `Recogniser.latest` on a 4 KiB block's end (what a node's report looks at per rank);
- per report: `NodeProgress.report` of a node of 8 ranks, each with new output;
- in the relay: what a read costs the pump for the progress (one deque append).

The relay itself parses nothing: a node's ranks are looked at when the node reports (with its
heartbeat), so the per-line figure is what a line would cost if every line were parsed.

    python bench/progress_parse.py [--runs 5]
"""

from __future__ import annotations

import re
import statistics
import sys
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, Row, load_note, print_rows, standard_args

sys.path.insert(0, str(REPO / "src"))
from marun.plan.launch_plan import ProcessSpec
from marun.progress.recognise import Recogniser
from marun.runtime.node_progress import NodeProgress

DATA = REPO / "tests" / "data" / "progress"
PLAIN = [
    "2026-11-26 17:00:01 INFO loading shard 3 of 8 from /data/train-00003.parquet",
    "UserWarning: TypedStorage is deprecated. It will be removed in the future.",
    '  File "/usr/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1501',
]


def _per_call(fn, items: list, runs: int) -> float:  # type: ignore[no-untyped-def]
    """Median seconds per item of `fn(item)` over `runs` passes."""
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        for _ in range(20):
            for item in items:
                fn(item)
        times.append((time.perf_counter() - began) / (20 * len(items)))
    return statistics.median(times)


def main() -> None:
    args = standard_args(__doc__, 5).parse_args()
    recogniser = Recogniser()
    pieces = [
        piece.decode("utf-8", "replace")
        for path in sorted(DATA.glob("*.txt"))
        for piece in re.split(rb"[\r\n]", path.read_bytes())
        if piece.strip()
    ]
    block = b"".join(p.encode() + b"\n" for p in (PLAIN * 30 + pieces))[-4096:]
    specs = [
        ProcessSpec(f"r{r}", ("x",), {}, "/", f"/nonexistent/{r}.log", rank=r) for r in range(8)
    ]
    progress = NodeProgress(0, specs)
    streams = [progress.stream(f"[0:{r}] ".encode()) for r in range(8)]

    def report(now: float) -> None:
        for recent in streams:
            assert recent is not None
            recent.append(b"step %d\n" % now + block)  # new output on every rank
        progress.report(now)

    recent: deque[bytes] = deque(maxlen=8)
    rows = [
        Row("progress", f"per line with a counter ({len(pieces)} real lines)",
            f"{_per_call(recogniser.read, pieces, args.runs) * 1e6:.2f} us", "-", "-", "-"),
        Row("progress", "per line without one (log, warning, traceback)",
            f"{_per_call(recogniser.read, PLAIN, args.runs) * 1e6:.2f} us", "-", "-", "-"),
        Row("progress", "per look: the latest counter in a 4 KiB end",
            f"{_per_call(recogniser.latest, [block], args.runs) * 1e6:.1f} us", "-", "-", "-"),
        Row("progress", "per report: a node of 8 ranks, each with new output",
            f"{_per_call(report, list(range(10)), args.runs) * 1e6:.0f} us", "-", "-", "-"),
        Row("progress", "in the relay, per read: the block kept by reference",
            f"{_per_call(recent.append, [block], args.runs) * 1e9:.0f} ns", "-", "-", "-"),
    ]  # fmt: skip
    print(f"medians of {args.runs} runs, {load_note()}")
    print_rows(rows)


if __name__ == "__main__":
    main()
