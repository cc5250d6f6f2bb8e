"""TensorFlow MultiWorkerMirroredStrategy on a cluster of workers alone: each worker all-reduces
its task index + 1 and prints the sum (marun writes each worker's TF_CONFIG from the platform's
--task_index --worker_hosts --job_name; examples/volcano/tensorflow-workers-spares.yaml)."""

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf

index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
total = strategy.reduce("SUM", strategy.run(lambda: tf.constant(float(index + 1))), axis=None)
print(f"worker {index}: {strategy.num_replicas_in_sync} replicas, sum {float(total):g}", flush=True)
