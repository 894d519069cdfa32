"""The score of the perf example: every result produce.py wrote must equal the reference
implementation's for the same $AUTOLOOP_SEED.

autoloop runs it as a separate process in a tree of the commit the run started from, so the
candidate's slowstats.py is not what runs here; it exits 1 naming the first wrong result (the
cycle is then a guard_fail), 0 when all agree.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))

import check  # noqa: E402
import workload  # noqa: E402


def main() -> int:
    inputs = workload.inputs(int(os.environ.get("AUTOLOOP_SEED", "0")))
    expected = {
        "word_counts": check.ref_word_counts(inputs["text"]),
        "top_words": check.ref_top_words(inputs["text"], inputs["k"]),
        "pairs_with_sum": check.ref_pairs_with_sum(inputs["numbers"], inputs["target"]),
        "primes_below": check.ref_primes_below(inputs["n"]),
    }
    try:
        got = json.loads((Path(os.environ.get("AUTOLOOP_OUTPUT", ".")) / "results.json").read_text())
    except (OSError, ValueError) as exc:
        print(f"score: no results from produce.py ({exc})")
        return 1
    for name, want in json.loads(json.dumps(expected)).items():   # tuples compared as JSON lists
        if got.get(name) != want:
            print(f"score: {name} returned {str(got.get(name))[:200]}, expected {str(want)[:200]}")
            return 1
    print(f"score: all {len(expected)} results agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
