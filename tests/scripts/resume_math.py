"""What the resume tests train, in plain Python: a linear model y = x . w + b fitted to
t = sum(x), the same initial weights everywhere, each rank's batch of step s drawn from its own
seeded `random.Random` (so a rank resumed at step s sees the batch it would have seen), plain SGD
on the mean squared error with the gradients averaged over the ranks (what DDP and an AllReduce /
world do).

The training scripts (tests/scripts/torch_resume.py, ms_resume.py) import it for the data and
the initial weights; the tests import it for the reference: the mean loss over the ranks of each
step of a run that never crashed, computed here in doubles.
"""

from __future__ import annotations

import random

FEATURES = 4
BATCH = 8
LR = 0.05
INIT_W = [0.1, -0.2, 0.3, 0.05]
INIT_B = 0.0


def batch(rank: int, step: int) -> tuple[list[list[float]], list[float]]:
    """Rank `rank`'s inputs and targets at step `step`."""
    rng = random.Random(1000 * step + rank)
    xs = [[rng.uniform(-1.0, 1.0) for _ in range(FEATURES)] for _ in range(BATCH)]
    return xs, [sum(x) for x in xs]


def reference_losses(world: int, steps: int) -> list[float]:
    """The mean over the ranks of each step's loss (before that step's update)."""
    w, b = list(INIT_W), INIT_B
    losses = []
    for step in range(steps):
        grad_w, grad_b, total = [0.0] * FEATURES, 0.0, 0.0
        for rank in range(world):
            xs, ts = batch(rank, step)
            errs = [sum(wi * xi for wi, xi in zip(w, x)) + b - t for x, t in zip(xs, ts)]
            total += sum(e * e for e in errs) / BATCH
            for i in range(FEATURES):
                grad_w[i] += sum(2 * e * x[i] for e, x in zip(errs, xs)) / BATCH / world
            grad_b += sum(2 * e for e in errs) / BATCH / world
        losses.append(total / world)
        w = [wi - LR * gi for wi, gi in zip(w, grad_w)]
        b -= LR * grad_b
    return losses
