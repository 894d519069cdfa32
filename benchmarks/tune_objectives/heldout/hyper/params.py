"""Training settings of a make-believe model: int, int log, float log, float and a categorical."""
BATCH = 256  # tune: 4..512 int log
WEIGHT_DECAY = 0.1  # tune: 1e-6..0.1 log
DROPOUT = 0.7  # tune: 0..0.8
LAYERS = 8  # tune: 1..8 int
NORM = "none"  # tune: none|batch|layer
