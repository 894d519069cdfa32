"""Two floats in Rosenbrock's narrow curved valley (minimum 0 at X=1, Y=1)."""
X = -1.5  # tune: -2..2
Y = 1.5  # tune: -2..2
