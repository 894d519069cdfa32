"""Prompt size as a run grows: the memory must stay flat (target: cycle 1000 ≤ 1.2 × cycle 50).

    python benchmarks/prompt_size.py

Builds a synthetic ledger (a mix of statuses, varied and repeated hypotheses, long lessons) and
prints the prompt's size in characters at several cycle counts.
"""

from __future__ import annotations

import random
from pathlib import Path

from autoloop.program.reader import Program, VerifierSpec
from autoloop.generators.prompt import build_prompt

IDEAS = ["raise the learning rate", "lower the learning rate", "add weight decay", "use a wider hidden layer",
         "switch to cosine schedule", "increase batch size", "decrease batch size", "add dropout",
         "use gelu instead of relu", "warm up the learning rate", "clip gradients", "tie embeddings",
         "use rmsnorm", "remove bias terms", "change init scale", "add label smoothing"]


def synthetic_history(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    hist = [{"cycle": 0, "status": "baseline", "metric": 1.0, "best": 1.0, "hypothesis": "baseline",
             "lesson": "baseline: val_loss = 1"}]
    best = 1.0
    for c in range(1, n + 1):
        status = rng.choices(["keep", "discard", "crash", "guard_fail", "violation", "no_change"],
                             [15, 55, 12, 6, 4, 8])[0]
        idea = rng.choice(IDEAS)
        value = rng.choice([0.5, 1, 2, 3, 4, 8])
        hyp = f"{idea} by a factor of {value} because cycle {rng.randint(1, c)} suggested the loss was {rng.random():.3f}"
        metric = best * (0.99 if status == "keep" else 1.01) if status in ("keep", "discard") else None
        if status == "keep":
            best = metric  # type: ignore[assignment]
        hist.append({"cycle": c, "status": status, "metric": metric, "best": best, "hypothesis": hyp,
                     "lesson": f"{status}: val_loss {metric} vs best {best}; " + "details " * 20,
                     "delta_pct": -1.0 if status == "keep" else 1.0})
    return hist


def main() -> None:
    program = Program(path=Path("/repo/program.md"), repo_root=Path("/repo"), goal="Lower val_loss",
                      allowed=("train.py",), verifier=VerifierSpec(command="python prepare.py", metric="val_loss",
                                                                   direction="minimize"),
                      body="Try ideas one at a time.\n" * 5)
    full = synthetic_history(1000)
    sizes = {}
    for n in (1, 50, 200, 1000):
        hist = full[: n + 1]
        sizes[n] = len(build_prompt(program, cycle=n + 1, best=hist[-1]["best"], baseline=1.0, history=hist))
    for n, size in sizes.items():
        print(f"cycle {n:>5}: {size:>6} characters")
    print(f"ratio cycle 1000 / cycle 50: {sizes[1000] / sizes[50]:.2f} (target ≤ 1.2)")


if __name__ == "__main__":
    main()
