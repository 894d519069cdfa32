"""The decide step: the keep rules, pure. Measurements come in through a `core.Runner`
(autoloop.engine.measure binds it to real verifier processes), a `core.Verdict` goes out;
nothing here starts a process. cycle: the strict rule (contract §5) and the sequential paired one
(ABBA pairs, a rank-based e-process); baseline: cycle 0 and its noise calibration; end: the
end-of-run check and the ledger's views; ratchet: what "better" means; stats: the statistics;
wording: the one wording of a verdict. Every raw value goes into the cycle's `stats` record:
everything reported can be recomputed.

May import: `base`, `errors` (and numpy/scipy). Never `process`, `git` or `disk`: checked by
import-linter (pyproject.toml).
"""
