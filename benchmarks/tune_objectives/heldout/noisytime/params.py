"""Settings of a make-believe program whose run time is measured: noisy, with bursts."""
THREADS = 1  # tune: 1..32 int
CHUNK_KB = 4096  # tune: 1..4096 int log
PREFETCH = 0.0  # tune: 0..1
ALLOC = "malloc"  # tune: malloc|arena|pool
