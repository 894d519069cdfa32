"""The decide step: the keep rules, pure. Measurements come in through a `core.Runner`
(autoloop.measure binds it to real verifier processes), a `core.Verdict` goes out; nothing here
starts a process.

- strict (contract §5): the median of `verifier.repeats` candidate runs must beat the
  incumbent's stored metric, by at least `min_effect` (cycle.judge_strict: the one strict rule).
- paired: incumbent (A) / candidate (B) pairs in ABBA order (B A, A B, ...: a linear drift
  cancels) until autoloop.stats' sequential test decides; with `confirm` a fresh test must too.
- baseline: cycle 0 and its noise calibration; end: the end-of-run check and the ledger's views.

Every raw value goes into the cycle's `stats` record: everything reported can be recomputed.
"""
