"""A MindSpore (CPU, PyNative) training script that survives a restart round: what
docs/supervision.md ("What a training script must do to resume") asks of one.

At start it reloads the newest checkpoint in --ckpt-dir with `load_checkpoint` (worker 0 writes
one with `save_checkpoint` after every step, atomically, then every worker passes an AllReduce
used as a barrier, so none reaches step s+1 before the checkpoint of step s is on disk) and goes
on from the step after it. `--crash-rank R --crash-step S` makes worker R exit 1 at the start of
step S in round 0 only (MARUN_RESTART_COUNT is "0"); `--pause-round R --pause-step S` makes every
worker print `rank N paused at step S` at the start of step S in round R and wait to be stopped
(a test deletes a node's pod there). Gradients are averaged over the workers by
an AllReduce; each step prints the mean loss over the workers. The model, data and initial
weights are tests/scripts/resume_math.py's (float32 here). The scheduler process (MS_ROLE
MS_SCHED) runs the same file: `init()` serves the cluster and returns at its end.
"""

from __future__ import annotations

import argparse
import os
import re
import time
from pathlib import Path

import resume_math as rm


def newest_checkpoint(directory: Path) -> tuple[int, Path] | None:
    found = [
        (int(m[1]), p)
        for p in directory.glob("step_*.ckpt")
        if (m := re.fullmatch(r"step_(\d+)\.ckpt", p.name))
    ]
    return max(found) if found else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ckpt-dir", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--crash-rank", type=int, default=-1)
    parser.add_argument("--crash-step", type=int, default=-1)
    parser.add_argument("--pause-round", default="")
    parser.add_argument("--pause-step", type=int, default=-1)
    args, _ = parser.parse_known_args()

    round_ = os.environ.get("MARUN_RESTART_COUNT")
    worker = os.environ.get("MS_ROLE") == "MS_WORKER"
    rank = int(os.environ.get("RANK_ID", "0"))
    if worker:
        print(
            f"rank {rank} round {round_} MARUN_MAX_RESTARTS={os.environ.get('MARUN_MAX_RESTARTS')}"
            f" MS_SCHED_PORT={os.environ.get('MS_SCHED_PORT')}",
            flush=True,
        )

    import mindspore as ms
    import numpy as np
    from mindspore import Tensor, nn, ops
    from mindspore.communication import get_group_size, init

    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    init()
    if not worker:
        return  # the scheduler: the cluster has ended
    world = get_group_size()

    net = nn.Dense(
        rm.FEATURES,
        1,
        weight_init=Tensor(np.array([rm.INIT_W], dtype=np.float32)),
        bias_init=Tensor(np.array([rm.INIT_B], dtype=np.float32)),
    )
    start = 0
    args.ckpt_dir.mkdir(parents=True, exist_ok=True)
    newest = newest_checkpoint(args.ckpt_dir)
    if newest is not None:
        step, path = newest
        ms.load_param_into_net(net, ms.load_checkpoint(str(path)))
        start = step + 1
        print(f"rank {rank} resumed from step {step} ({path.name})", flush=True)

    loss_fn = nn.MSELoss()
    optimizer = nn.SGD(net.trainable_params(), learning_rate=rm.LR)
    grad_fn = ms.value_and_grad(lambda x, t: loss_fn(net(x), t), None, optimizer.parameters)
    allreduce = ops.AllReduce()

    loss_value = float("nan")
    for step in range(start, args.steps):
        if round_ == "0" and rank == args.crash_rank and step == args.crash_step:
            print(f"rank {rank} crashes at step {step}", flush=True)
            os._exit(1)
        if round_ == args.pause_round and step == args.pause_step:
            print(f"rank {rank} paused at step {step}", flush=True)
            time.sleep(3600)  # until its round ends (its marun stops it)
        xs, ts = rm.batch(rank, step)
        x = Tensor(np.array(xs, dtype=np.float32))
        t = Tensor(np.array(ts, dtype=np.float32).reshape(-1, 1))
        loss, grads = grad_fn(x, t)
        optimizer(tuple(allreduce(g) / world for g in grads))
        loss_value = float(allreduce(loss).asnumpy()) / world
        print(f"rank {rank} step {step} loss {loss_value!r}", flush=True)
        if rank == 0:
            tmp = args.ckpt_dir / f"tmp_step_{step}.ckpt"
            ms.save_checkpoint(net, str(tmp))
            os.replace(tmp, args.ckpt_dir / f"step_{step}.ckpt")
        allreduce(Tensor(np.ones(1, dtype=np.float32)))  # a barrier: the checkpoint is on disk
        # MindSpore's CPU AllReduce was seen to let a worker past before worker 0's rename (a
        # round resumed from step s-1 once in four runs): every worker also waits for the file.
        done = args.ckpt_dir / f"step_{step}.ckpt"
        for _ in range(600):
            if done.exists():
                break
            time.sleep(0.1)

    print(f"rank {rank} final loss {loss_value!r}", flush=True)


if __name__ == "__main__":
    main()
