"""Two log-scaled floats whose good values lie along a curve in log space."""
LR = 1e-6  # tune: 1e-6..1 log
GAP = 1.0  # tune: 1e-4..1 log
