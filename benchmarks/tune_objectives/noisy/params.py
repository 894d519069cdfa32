"""Settings of a make-believe program whose run time is measured: noisy, about 2% per run."""
BLOCK = 0.9  # tune: 0..1
CACHE_MB = 1.0  # tune: 0.1..1000 log
THREADS = 1  # tune: 1..16 int
