"""Three floats and an int whose effect comes in steps: most small moves change nothing."""
A = 0.0  # tune: 0..10
B = 10.0  # tune: 0..10
C = 0.0  # tune: 0..10
N = 0  # tune: 0..20 int
