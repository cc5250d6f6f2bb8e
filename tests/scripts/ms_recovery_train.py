"""A MindSpore CPU worker for the recovery test: joins the cluster, then one AllReduce a second
for `--steps` steps, printing each; every start prints its MS_NODE_ID and MS_RECOVERY_PATH, so a
restart shows under which identity it came back."""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    args, _ = parser.parse_known_args()
    role = os.environ.get("MS_ROLE")
    print(
        f"start role={role} MS_NODE_ID={os.environ.get('MS_NODE_ID')} "
        f"MS_RECOVERY_PATH={os.environ.get('MS_RECOVERY_PATH')} pid={os.getpid()}",
        flush=True,
    )
    import mindspore as ms
    import numpy as np
    from mindspore import Tensor, ops
    from mindspore.communication import get_rank, init

    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    init()
    rank = get_rank()
    reduce = ops.AllReduce()
    for step in range(args.steps):
        total = reduce(Tensor(np.array([1.0], dtype=np.float32)))
        print(f"rank {rank} step {step} sum {float(total.asnumpy()[0]):g}", flush=True)
        time.sleep(1)
    print(f"rank {rank} done", flush=True)


if __name__ == "__main__":
    main()
