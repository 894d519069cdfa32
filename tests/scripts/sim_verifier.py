"""A simulated noisy verifier for end-to-end tests (stdlib only, fast).

It reads work.py in its working directory: every `GAIN` in it lowers the score 5%, every `MEM`
raises `mem` 50%, every `HOLD` lowers the held-out score 5% (`--holdout`). Each run draws its
noise from a seed made of SIM_SEED and a run counter kept in the file SIM_STATE (outside the
tree), so a whole run is reproducible. SIM_CV is the noise (0 = deterministic); SIM_BURST_RATE
the share of runs that are bursts of +40% (another job, a GC pause), SIM_BURSTS the run numbers
that are bursts whatever the draw (comma-separated).
"""
import os
import random
import sys

state = os.environ["SIM_STATE"]
try:
    with open(state) as f:
        n = int(f.read() or 0)
except FileNotFoundError:
    n = 0
with open(state, "w") as f:
    f.write(str(n + 1))
rng = random.Random(f"{os.environ.get('SIM_SEED', '0')}:{n}")
cv = float(os.environ.get("SIM_CV", "0"))
with open("work.py") as f:
    text = f.read()
burst = 1.4 if (rng.random() < float(os.environ.get("SIM_BURST_RATE") or 0)
                or str(n) in os.environ.get("SIM_BURSTS", "").split(",")) else 1.0
if "--holdout" in sys.argv:
    print(f"heldout: {100.0 * 0.95 ** text.count('HOLD') * (1 + cv * rng.gauss(0, 1)):.6f}")
else:
    print(f"mem: {100.0 * 1.5 ** text.count('MEM'):.1f}")
    print(f"score: {100.0 * 0.95 ** text.count('GAIN') * (1 + cv * rng.gauss(0, 1)) * burst:.6f}")
