"""Two floats and an int on a surface with many local minima."""
X = 2.5  # tune: -3..3
Y = -2.5  # tune: -3..3
K = 5  # tune: -5..5 int
