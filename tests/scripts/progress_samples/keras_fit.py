"""Real Keras output for tests/data/progress (keras_fit.txt): a tiny model.fit on CPU, its stdout
a pipe as under marun (Keras' progress bar then prints a line per update, not `\\r`).

    .cache/venvs/tensorflow/bin/python tests/scripts/progress_samples/keras_fit.py | cat > out
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras
import numpy as np

x = np.random.default_rng(0).normal(size=(640, 8)).astype("float32")
y = (x.sum(axis=1) > 0).astype("float32")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
model.fit(x, y, epochs=3, batch_size=32, verbose=1)
