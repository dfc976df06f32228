"""A plain loop with a tqdm bar (postfix loss) and a print every few steps; no gpujob import."""

import sys
import time

from tqdm import tqdm

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
delay = float(sys.argv[2]) if len(sys.argv) > 2 else 0.01
bar = tqdm(range(steps), mininterval=0)
for step in bar:
    loss = 2.0 / (step + 1)
    bar.set_postfix(loss=round(loss, 4))
    if step % 10 == 0:
        print(f"step {step} loss: {loss:.4f}", flush=True)
    time.sleep(delay)
