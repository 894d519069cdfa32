"""What a run writes and reads back: the ledger (`ledger`: typed records, experiments.md,
results.tsv), the CI journal on the branch (`persist`), the numbers of a run (`facts`), secrets
kept out of everything written (`redact`).

May import: `program`, `decide`, `git`, `disk`, `process`, `base`, `errors`.
"""
