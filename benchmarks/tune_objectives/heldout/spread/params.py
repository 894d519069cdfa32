"""Eight settings of very different widths, four of them log-scaled."""
P1 = 0.0  # tune: 0..1
P2 = 100.0  # tune: 0..100
P3 = 0.001  # tune: 0.001..10 log
P4 = 1000.0  # tune: 1..1000 log
P5 = 1  # tune: 1..50 int
P6 = -5.0  # tune: -5..5
P7 = 1e-5  # tune: 1e-5..1 log
P8 = 64  # tune: 1..64 int log
