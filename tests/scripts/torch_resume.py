"""A PyTorch (gloo, CPU) training script that survives a restart round: what docs/supervision.md
("What a training script must do to resume") asks of one.

At start it loads the newest complete checkpoint in --ckpt-dir (rank 0 writes one after every
step, atomically, then every rank passes a barrier, so no rank reaches step s+1 before the
checkpoint of step s is on disk) and goes on from the step after it. `--crash-rank R
--crash-step S` makes rank R exit 1 at the start of step S in round 0 only (MARUN_RESTART_COUNT
is "0"), as a fault would (`--crash-when FILE`: once FILE exists, at most 2 minutes later);
`--pause-step S` makes every rank stop at the start of step S in round 0 (a test then kills a
node). Every rank prints what marun gave it, each step's mean loss over the
ranks and, at the end, the last step's mean loss and a checksum of the weights. The model, data
and initial weights are tests/scripts/resume_math.py's, in float64.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

import resume_math as rm


def newest_checkpoint(directory: Path) -> Path | None:
    steps = [
        (int(m[1]), p)
        for p in directory.glob("step_*.pt")
        if (m := re.fullmatch(r"step_(\d+)\.pt", p.name))
    ]
    return max(steps)[1] if steps else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ckpt-dir", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--crash-rank", type=int, default=-1)
    parser.add_argument("--crash-step", type=int, default=-1)
    # The crash waits for this file (bounded): a test lets it come once marun's spares are ready.
    parser.add_argument("--crash-when", type=Path, default=None)
    # every rank stops at the start of this step in round 0 (a test then kills a node)
    parser.add_argument("--pause-step", type=int, default=-1)
    args, _ = parser.parse_known_args()

    round_ = os.environ.get("MARUN_RESTART_COUNT")
    print(
        f"rank {os.environ.get('RANK')} round {round_}"
        f" MARUN_MAX_RESTARTS={os.environ.get('MARUN_MAX_RESTARTS')}"
        f" TORCHELASTIC_RESTART_COUNT={os.environ.get('TORCHELASTIC_RESTART_COUNT')}"
        f" TORCHELASTIC_MAX_RESTARTS={os.environ.get('TORCHELASTIC_MAX_RESTARTS')}"
        f" MASTER_PORT={os.environ.get('MASTER_PORT')}",
        flush=True,
    )

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    layer = nn.Linear(rm.FEATURES, 1).double()
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([rm.INIT_W], dtype=torch.float64))
        layer.bias.fill_(rm.INIT_B)
    optimizer = torch.optim.SGD(layer.parameters(), lr=rm.LR)
    start = 0
    args.ckpt_dir.mkdir(parents=True, exist_ok=True)
    newest = newest_checkpoint(args.ckpt_dir)
    if newest is not None:
        state = torch.load(newest)
        layer.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"] + 1
        print(f"rank {rank} resumed from step {state['step']} ({newest.name})", flush=True)
    model = DistributedDataParallel(layer)

    loss_value = float("nan")
    for step in range(start, args.steps):
        if round_ == "0" and step == args.pause_step:
            print(f"rank {rank} paused at step {step}", flush=True)
            time.sleep(3600)
        if round_ == "0" and rank == args.crash_rank and step == args.crash_step:
            waited = 0
            while args.crash_when is not None and not args.crash_when.exists() and waited < 1200:
                time.sleep(0.1)
                waited += 1
            print(f"rank {rank} crashes at step {step}", flush=True)
            os._exit(1)
        xs, ts = rm.batch(rank, step)
        x = torch.tensor(xs, dtype=torch.float64)
        t = torch.tensor(ts, dtype=torch.float64).unsqueeze(1)
        loss = ((model(x) - t) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()  # DDP averages the gradients over the ranks
        optimizer.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        loss_value = mean.item() / world
        print(f"rank {rank} step {step} loss {loss_value!r}", flush=True)
        if rank == 0:
            tmp = args.ckpt_dir / f".step_{step}.pt.tmp"
            torch.save(
                {"step": step, "model": layer.state_dict(), "optimizer": optimizer.state_dict()},
                tmp,
            )
            os.replace(tmp, args.ckpt_dir / f"step_{step}.pt")
        dist.barrier()  # the checkpoint of this step is on disk before any rank goes on

    checksum = sum(p.detach().sum().item() for p in layer.parameters())
    print(f"rank {rank} final loss {loss_value!r} checksum {checksum!r}", flush=True)
    dist.barrier()
    # No destroy_process_group: under heavy load torch's gloo teardown aborted a rank after its
    # work was done ("terminate called without an active exception", in a rank other than the
    # store's host, twice in full runs). Every rank's work is on disk and printed; rank 0 hosts
    # the round's store and leaves last, once every rank has said it is leaving (bounded: 60 s).
    sys.stdout.flush()
    (args.ckpt_dir / f".left.{round_}.{rank}").touch()
    if rank == 0:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(
            (args.ckpt_dir / f".left.{round_}.{r}").exists() for r in range(world)
        ):
            time.sleep(0.05)
    os._exit(0)


if __name__ == "__main__":
    main()
