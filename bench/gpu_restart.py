"""Restarts on a GPU: crash -> the first NCCL all-reduce of the next round, on one CUDA device,
under torchrun, `marun run --max-restarts` and the same with `--preload torch` (warm spares,
docs/warm-restarts.md), in the same run; and what a waiting spare holds of the device.

Needs a machine with one NVIDIA GPU and a CUDA build of torch in this interpreter (CI has none:
not in run_all.py). One node, one rank (`--standalone --nproc-per-node 1`): NCCL refuses two
ranks on one device. In each round but the last, the rank imports torch, creates its CUDA
context, joins an NCCL process group (world 1), passes one all-reduce of 64 MiB on the device,
runs `--uptime` seconds (the spare imports meanwhile) and crashes (exit 1). Per crash: crash ->
that all-reduce done in the next round. Before its crash the rank also looks at every waiting
spare of its node (marun-warm: a process started with marun's spare program, not itself): its
open files under /dev/nvidia*, whether `nvidia-smi` lists it as a compute process (either is a
CUDA context: a spare must show neither), and whether libcuda is mapped (torch's CUDA build maps
it at import, in a cold start too: said, not held against it).

The variants take turns, one job of `--crashes` crashes each, `--repeat` times. Figures are
p50/p95 over the crashes; ratios are against torchrun and against marun cold. Nothing asserted.

    python bench/gpu_restart.py [--crashes 4] [--repeat 2] [--uptime 5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Row, bench_env, load_note, pct, print_rows

from marun.sim.ports import free_port

RANK = r"""
import json, os, subprocess, sys, time
d = sys.argv[1]
rnd = int(os.environ.get("MARUN_RESTART_COUNT") or os.environ.get("TORCHELASTIC_RESTART_COUNT"))
t_start = time.time()
import torch
import torch.distributed as dist
t_imported = time.time()
cuda = torch.cuda.is_available()  # (without one: gloo on the CPU, to try the bench anywhere)
if cuda:
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
else:
    dist.init_process_group("gloo")
x = torch.ones(16 << 20, device="cuda" if cuda else "cpu")
dist.all_reduce(x)
if cuda:
    torch.cuda.synchronize()
t_reduced = time.time()
rec = {"start": t_start, "imported": t_imported, "reduced": t_reduced, "pid": os.getpid()}
if rnd < int(os.environ["BENCH_CRASHES"]):
    time.sleep(float(os.environ["BENCH_UPTIME"]))
    spares = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                words = f.read().split(b"\0")
        except OSError:
            continue
        if b"-c" in words and any(b"marun" in w and b"spare" in w for w in words):
            fds = []
            try:
                for fd in os.listdir(f"/proc/{entry}/fd"):
                    target = os.readlink(f"/proc/{entry}/fd/{fd}")
                    if target.startswith("/dev/nvidia"):
                        fds.append(target)
                with open(f"/proc/{entry}/maps") as f:
                    libcuda = "libcuda.so" in f.read()
            except OSError:
                continue
            spares.append({"pid": int(entry), "nvidia_fds": fds, "libcuda": libcuda})
    try:
        smi = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.split()
    except OSError:
        smi = []
    rec["spares"], rec["gpu_pids"] = spares, [int(p) for p in smi if p.isdigit()]
    with open(os.path.join(d, f"rec.{rnd}"), "w") as f:
        json.dump(rec, f)
    with open(os.path.join(d, f"crash.{rnd}"), "w") as f:
        f.write(repr(time.time()))
    os._exit(1)
with open(os.path.join(d, f"rec.{rnd}"), "w") as f:
    json.dump(rec, f)
dist.destroy_process_group()
"""

VARIANTS = ("torchrun", "marun", "marun-warm")


def one_job(root: Path, variant: str, crashes: int, uptime: float) -> list[dict[str, float]]:
    root.mkdir(parents=True)
    (root / "rank.py").write_text(RANK)
    env = bench_env({"BENCH_CRASHES": str(crashes), "BENCH_UPTIME": str(uptime),
                     "MARUN_QUICK_FAILURE": "0", "MARUN_PREFLIGHT": "off"})  # fmt: skip
    if os.environ.get("PYTHONPATH"):  # (wheels carried beside this checkout's src)
        env["PYTHONPATH"] += os.pathsep + os.environ["PYTHONPATH"]
    port = str(free_port(""))
    if variant == "torchrun":
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node", "1", "--max-restarts", str(crashes)]  # fmt: skip
    else:
        argv = [sys.executable, "-m", "marun", "run", "--standalone", "--nproc-per-node", "1",
                "--master-port", port, "--max-restarts", str(crashes),
                *(["--preload", "torch"] if variant == "marun-warm" else [])]  # fmt: skip
    limit = crashes * (uptime + 60) + 120
    done = subprocess.run([*argv, "rank.py", str(root)], cwd=root, env=env, capture_output=True,
                          text=True, check=False, timeout=limit)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{variant} failed ({done.returncode}): {done.stderr[-3000:]}")
    if variant == "marun-warm" and " starts cold: " in done.stderr:
        print(f"  warm: {done.stderr.count(' starts cold: ')} cold start(s)", flush=True)
    out = []
    for k in range(crashes):
        crash = float((root / f"crash.{k}").read_text())
        before = json.loads((root / f"rec.{k}").read_text())
        after = json.loads((root / f"rec.{k + 1}").read_text())
        for spare in before["spares"]:
            listed = spare["pid"] in before["gpu_pids"]
            # A CUDA context opens /dev/nvidia* and lists the process in nvidia-smi; libcuda
            # mapped alone is torch's import (a cold start's import maps it too).
            held = spare["nvidia_fds"] or listed
            print(f"  {variant} round {k}: spare {spare['pid']}: nvidia fds "
                  f"{spare['nvidia_fds']}, libcuda mapped {spare['libcuda']}, in nvidia-smi "
                  f"{listed} -> {'HOLDS THE DEVICE' if held else 'no device'}"
                  f" (nvidia-smi's compute pids {before['gpu_pids']}, the rank {before['pid']})",
                  flush=True)  # fmt: skip
        out.append({"start": after["start"] - crash, "import": after["imported"] - after["start"],
                    "reduce": after["reduced"] - crash})  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)  # fmt: skip
    parser.add_argument("--crashes", type=int, default=4, help="crashes per job")
    parser.add_argument("--repeat", type=int, default=2, help="jobs per variant, taking turns")
    parser.add_argument("--uptime", type=float, default=5.0, help="seconds before each crash")
    args = parser.parse_args()
    import torch

    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device"
    print(f"gpu restart bench: 1 node x 1 rank on {name}, torch {torch.__version__}, "
          f"{args.crashes} crashes x {args.repeat} jobs per variant, {load_note()}",
          flush=True)  # fmt: skip
    figures: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="marun-gpu-bench-") as tmp:
        for n in range(args.repeat):
            order = VARIANTS if n % 2 == 0 else tuple(reversed(VARIANTS))
            for variant in order:
                got = one_job(Path(tmp) / f"{variant}{n}", variant, args.crashes, args.uptime)
                print(f"{variant} job {n}: crash -> all-reduce "
                      + " ".join(f"{g['reduce']:.2f}" for g in got)
                      + "; import " + " ".join(f"{g['import']:.2f}" for g in got),
                      flush=True)  # fmt: skip
                figures[variant] += got
    rows = []
    for q in (50, 95):
        base = pct([f["reduce"] for f in figures["torchrun"]], q)
        cold = pct([f["reduce"] for f in figures["marun"]], q)
        warm = pct([f["reduce"] for f in figures["marun-warm"]], q)
        rows.append(Row("gpu-restart", f"crash -> first NCCL all-reduce p{q}, marun",
                        f"{cold:.2f} s", f"{base:.2f} s (torchrun)", f"{cold / base:.2f}",
                        "-", None))  # fmt: skip
        rows.append(Row("gpu-restart", f"crash -> first NCCL all-reduce p{q}, marun-warm",
                        f"{warm:.2f} s", f"{base:.2f} s (torchrun)", f"{warm / base:.2f}",
                        "<= 0.5x", warm / base <= 0.5))  # fmt: skip
        rows.append(Row("gpu-restart", f"  the same against marun cold p{q}", f"{warm:.2f} s",
                        f"{cold:.2f} s (marun)", f"{warm / cold:.2f}", "<= 0.5x",
                        warm / cold <= 0.5))  # fmt: skip
    print()
    print_rows(rows)
    print(f"({load_note()} at the end)")


if __name__ == "__main__":
    main()
