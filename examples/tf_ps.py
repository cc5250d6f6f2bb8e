"""TensorFlow start file: a parameter-server job (ParameterServerStrategy) from TF_CONFIG.

marun builds TF_CONFIG for each container from the platform's appended `--task_index
--ps_hosts --worker_hosts --job_name`; with `--tf-chief`, worker 0 becomes the chief. The ps and
worker tasks run a `tf.distribute.Server` and block until the launcher stops them (they never
end by themselves); the chief coordinates a few training steps on the workers and exits 0.

On the platform the start command is `marun run --mode tensorflow --tf-chief -- tf_ps.py
[--steps N]`. Here, with TensorFlow importable by marun's interpreter (`bash
scripts/frameworks.sh tensorflow`; docs/engines/tensorflow.md):

    .cache/venvs/tensorflow/bin/marun simulate --mode tensorflow --tf-chief --nodes 2 \
        -- examples/tf_ps.py
"""

from __future__ import annotations

import argparse
import json
import os
import signal

STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


def serve(task_type: str, index: int) -> None:
    """Run this task's server until SIGTERM/SIGINT, then exit 0: a stop is its normal end."""
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=task_type,
        task_index=index,
        protocol=resolver.rpc_layer or "grpc",
        start=True,
    )
    print(f"{task_type} {index}: server listening at {server.target}", flush=True)
    stopped_by = signal.sigwait(STOP_SIGNALS)
    print(f"{task_type} {index}: stopped by {signal.Signals(stopped_by).name}", flush=True)


def coordinate(steps: int) -> None:
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():  # the variables live on the parameter servers
        w = tf.Variable(tf.zeros([8, 1]), name="w")
        b = tf.Variable(tf.zeros([1]), name="b")
        global_step = tf.Variable(0, dtype=tf.int64, name="global_step")

    @tf.function
    def train_step() -> tf.Tensor:  # runs on whichever worker the coordinator picks
        x = tf.random.normal([16, 8])
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) + b - tf.reduce_sum(x, 1, keepdims=True)) ** 2)
        grad_w, grad_b = tape.gradient(loss, [w, b])
        w.assign_sub(0.05 * grad_w)
        b.assign_sub(0.05 * grad_b)
        global_step.assign_add(1)
        return loss

    losses = [coordinator.schedule(train_step) for _ in range(steps)]
    coordinator.join()
    first, last = float(losses[0].fetch()), float(losses[-1].fetch())
    print(
        f"chief: {steps} steps done, global_step={int(global_step.numpy())}, "
        f"loss {first:.3f} -> {last:.3f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=5, help="training steps (chief)")
    args, _ = parser.parse_known_args()

    task = json.loads(os.environ["TF_CONFIG"])["task"]
    task_type, index = task["type"], int(task["index"])
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if task_type in ("ps", "worker"):
        # Block the stop signals before TensorFlow starts its threads (they inherit the mask), so
        # the signal is taken by `sigwait` in this thread instead of killing the process mid-call.
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        serve(task_type, index)
    else:
        coordinate(args.steps)


if __name__ == "__main__":
    main()
