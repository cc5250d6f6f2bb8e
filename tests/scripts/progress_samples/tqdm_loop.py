"""Real tqdm output for tests/data/progress (tqdm_loop.txt): a bar of 50 steps on a pipe.

python tests/scripts/progress_samples/tqdm_loop.py 2>&1 | cat > out
"""

import time

from tqdm import tqdm

for _ in tqdm(range(50), mininterval=0.01):
    time.sleep(0.01)
