"""Hyperparameters of a make-believe network: an integer, log-scaled and categorical mix."""
DEPTH = 2  # tune: 1..12 int
LEARNING_RATE = 0.1  # tune: 1e-5..1 log
WIDTH = 16  # tune: 8..1024 int log
ACTIVATION = "sigmoid"  # tune: relu|tanh|gelu|sigmoid
OPTIMIZER = "sgd"  # tune: sgd|adam|rmsprop
