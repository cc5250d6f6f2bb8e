"""PyTorch start file written for the platform's own arguments: one start per node, which spawns
one process per GPU itself (as PyTorch's ImageNet example does with torch.multiprocessing.spawn)
and computes each global rank from the appended `--init_method --rank --world_size` (the node's
rank and the node count).

marun starts such a file as the platform does with `--keep-platform-args`: once per node, the
appended arguments unchanged, none of torchrun's variables; start command
`marun run --keep-platform-args -- pytorch_spawn.py`. To let marun start one process per device
instead (with torchrun's variables), drop the spawn and call
`dist.init_process_group("gloo")` (init_method `env://`, the default): examples/pytorch_ddp.py.

On CPU, gloo: MA_NUM_GPUS (or --gpus) says how many processes to spawn. Each prints
`rank R/W: all_reduce sum S (expected E)`.
"""

from __future__ import annotations

import argparse
import os


def worker(local_rank: int, args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    rank = args.rank * args.gpus + local_rank
    world = args.world_size * args.gpus
    dist.init_process_group("gloo", init_method=args.init_method, rank=rank, world_size=world)
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    expected = world * (world + 1) // 2
    print(f"rank {rank}/{world}: all_reduce sum {total.item():g} (expected {expected})", flush=True)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--init_method", required=True, help="tcp://HOST:PORT (the platform's)")
    parser.add_argument("--rank", type=int, default=0, help="this node's rank (the platform's)")
    parser.add_argument("--world_size", type=int, default=1, help="nodes (the platform's)")
    parser.add_argument("--gpus", type=int, default=int(os.environ.get("MA_NUM_GPUS") or 1))
    args = parser.parse_args()

    import torch.multiprocessing as mp

    mp.spawn(worker, args=(args,), nprocs=max(1, args.gpus))


if __name__ == "__main__":
    main()
