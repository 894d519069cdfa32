"""Settings of a make-believe program whose run time moves in steps, measured with noise."""
QUEUE = 1  # tune: 1..64 int log
RATIO = 1.0  # tune: 0..1
