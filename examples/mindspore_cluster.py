"""MindSpore start file: a dynamic cluster on CPU (no rank table), data-parallel training.

marun starts, from the platform's variables, one scheduler (MS_ROLE=MS_SCHED, on node 0) and
one worker per device (MS_ROLE=MS_WORKER) on every node, all with the same MS_SCHED_HOST,
MS_SCHED_PORT and MS_WORKER_NUM. The scheduler runs this same file: its `init()` serves the
cluster and ends the process once the workers are done. Each worker does one AllReduce, then a
few data-parallel steps on a tiny model, and prints the reduced sum and a checksum of its final
weights: every rank must print the same two numbers.

On the platform the start command is `marun run --mode mindspore -- mindspore_cluster.py
[--steps N]`. Here, with MindSpore importable by marun's interpreter (`bash scripts/frameworks.sh
mindspore` makes that venv; docs/engines/mindspore.md):

    .cache/venvs/mindspore/bin/marun simulate --mode mindspore --nodes 2 --devices 2 \
        -- examples/mindspore_cluster.py
"""

from __future__ import annotations

import argparse
import faulthandler
import os


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=3, help="training steps")
    args, _ = parser.parse_known_args()
    # Where MindSpore's rare SIGSEGV at the interpreter's exit comes from (seen twice in CI, on
    # busy cores, after release()): every thread's Python stack into the rank's log, then the
    # signal as before (the process still dies of it).
    faulthandler.enable()

    import mindspore as ms
    import numpy as np
    from mindspore import Tensor, nn, ops
    from mindspore.communication import get_group_size, get_rank, init, release

    role = os.environ.get("MS_ROLE", "MS_WORKER")
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    if "MARUN_MS_TLS_CONFIG" in os.environ:  # marun's ms_ssl: TLS between the cluster's processes
        e = os.environ
        ms.set_ps_context(
            config_file_path=e["MARUN_MS_TLS_CONFIG"],
            enable_ssl=True,
            client_password=e["MARUN_MS_CLIENT_PASSWORD"],
            server_password=e["MARUN_MS_SERVER_PASSWORD"],
        )
    init()  # joins the cluster; on the scheduler, serves it and exits when the workers finish
    if role == "MS_SCHED":  # not reached with MindSpore 2.10, whose scheduler exits in init()
        return

    rank, size = get_rank(), get_group_size()
    print(f"rank {rank}/{size} joined (MS_NODE_ID={os.environ.get('MS_NODE_ID')})", flush=True)

    total = ops.AllReduce()(Tensor(np.array([float(rank + 1)], dtype=np.float32)))

    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    ms.set_seed(0)  # the same initial weights everywhere
    net = nn.Dense(8, 1)
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.05)
    # TrainOneStepCell averages the gradients across workers in data-parallel mode.
    train_step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), optimizer)
    train_step.set_train()
    data = np.random.default_rng(100 + rank)  # each rank its own shard of data
    for step in range(args.steps):
        x = data.standard_normal((16, 8)).astype(np.float32)
        loss = train_step(Tensor(x), Tensor(x.sum(1, keepdims=True)))
        print(f"rank {rank} step {step} loss {float(loss.asnumpy()):.4f}", flush=True)

    checksum = sum(float(p.asnumpy().astype(np.float64).sum()) for p in net.trainable_params())
    print(
        f"rank {rank}/{size}: all_reduce sum {float(total.asnumpy()[0]):g} "
        f"(expected {size * (size + 1) // 2}); weights checksum {checksum:.6f}",
        flush=True,
    )
    # MindSpore's documented teardown of its communication, here rather than in its destructors
    # at the interpreter's exit, where a worker under load once died of SIGSEGV after its last
    # line (MindSpore 2.10, CPU).
    release()


if __name__ == "__main__":
    main()
