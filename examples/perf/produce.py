"""The verifier's command in the perf example: runs slowstats.py once on inputs drawn from
$AUTOLOOP_SEED and writes what it returns to $AUTOLOOP_OUTPUT/results.json.

autoloop times this process from outside (`measure: wall`: until the last process it started
has ended), so nothing printed here is read, and score.py checks every result against a reference
implementation for the same seed: a faster wrong answer, an answer remembered for an earlier
input or a run that stops early is never kept.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.dont_write_bytecode = True   # leave nothing behind in the work tree
sys.path.insert(0, str(Path(__file__).resolve().parent))

import workload  # noqa: E402


def main() -> int:
    inputs = workload.inputs(int(os.environ.get("AUTOLOOP_SEED", "0")))
    target = workload.load_target()
    results = {
        "word_counts": target.word_counts(inputs["text"]),
        "top_words": target.top_words(inputs["text"], inputs["k"]),
        "pairs_with_sum": target.pairs_with_sum(inputs["numbers"], inputs["target"]),
        "primes_below": target.primes_below(inputs["n"]),
    }
    out = Path(os.environ.get("AUTOLOOP_OUTPUT", ".")) / "results.json"
    out.write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
