"""Every bench, one table: `python bench/run_all.py --small` is the CI size (each bench at a
small size, well under a minute in all, to keep them working; figures at this size are not the
ones docs/performance.md reports). Without --small: the full sizes (minutes).

    python bench/run_all.py [--small] [--runs N] [--only startup,relay,...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import formation
import plan_scale
import plan_unresolved
import relay
import spares
import startup
import supervise
from _common import Row, load_note, print_rows

BENCHES = {
    "startup": (startup.run, 20),
    "supervise": (supervise.run, 15),
    "relay": (relay.run, 3),
    "plan": (plan_scale.run, 5),
    "plan-unresolved": (plan_unresolved.run, 5),
    "formation": (formation.run, 1),
    "spares": (spares.run, 3),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--runs", type=int, default=None, help="runs per figure (default: each's)")
    parser.add_argument("--only", default=None, help="comma list of " + ", ".join(BENCHES))
    args = parser.parse_args()
    chosen = args.only.split(",") if args.only else list(BENCHES)
    rows: list[Row] = []
    started = time.monotonic()
    timings = []
    for name in chosen:
        bench, runs = BENCHES[name]
        began = time.monotonic()
        rows += bench(args.small, args.runs or runs)
        timings.append(f"{name} {time.monotonic() - began:.1f}s")
    size = "small (CI) sizes" if args.small else "full sizes"
    print(f"marun benches, {size}: {load_note()}; {time.monotonic() - started:.1f}s in all")
    print(f"({'; '.join(timings)})")
    print_rows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
