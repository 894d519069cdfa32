"""Two floats in a curved valley at another scale than Rosenbrock's (minimum 0 at X=3, Y=9)."""
X = -5.0  # tune: -6..6
Y = -8.0  # tune: -10..40
