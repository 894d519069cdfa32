"""A cycle's six steps, in order: prepare, generate, scope, verify, decide, record; one entry
point each, `step(state, round)`. Part of the engine: they may import what it may."""
