"""PyTorch start file: DDP on CPU over gloo, from torchrun's environment.

marun (like torchrun) starts one process per device with MASTER_ADDR, MASTER_PORT, RANK,
WORLD_SIZE, LOCAL_RANK, ... set, so the script only calls `init_process_group("gloo")`. It does
one all-reduce, then trains a tiny model for a few steps and prints, per rank, the all-reduced sum
and a checksum of the final weights: every rank must print the same two numbers.

On the platform the start command is `marun run --mode pytorch -- pytorch_ddp.py [--steps N]`
(the platform appends --init_method). Here, with PyTorch importable by marun's interpreter
(`bash scripts/frameworks.sh torch`; docs/engines/pytorch.md):

    .cache/venvs/torch/bin/marun simulate --mode pytorch --nodes 2 --devices 2 \
        -- examples/pytorch_ddp.py
"""

from __future__ import annotations

import argparse
import os
import sys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=3, help="training steps")
    # The platform appends --init_method/--rank/--world_size; marun turns them into torchrun's
    # environment, but tolerate them if they are passed through (--keep-platform-args).
    args, _ = parser.parse_known_args()

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    print(f"rank {rank}/{world} (local rank {local_rank}) joined", flush=True)

    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)

    torch.manual_seed(0)  # the same initial weights everywhere (DDP also broadcasts rank 0's)
    model = DistributedDataParallel(nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(100 + rank)  # each rank its own shard of data
    for step in range(args.steps):
        x = torch.randn(16, 8, generator=data)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()  # DDP averages the gradients across ranks here
        optimizer.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)

    checksum = sum(p.detach().double().sum().item() for p in model.parameters())
    print(
        f"rank {rank}/{world}: all_reduce sum {total.item():g} "
        f"(expected {world * (world + 1) // 2}); weights checksum {checksum:.6f}",
        flush=True,
    )
    # Rank 0 hosts the rendezvous store: without this barrier it can tear the store down while a
    # slower rank still talks to it. The ranks then leave without destroy_process_group: under
    # heavy load torch's gloo teardown was seen to abort a rank whose work was done ("terminate
    # called without an active exception"), which the launcher rightly reports as a failure.
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
