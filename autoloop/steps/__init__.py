"""A cycle's six steps, in order: prepare, generate, scope, verify, decide, record."""
