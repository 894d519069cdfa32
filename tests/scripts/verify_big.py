"""Verifier for the huge-output tests: prints E2E_BIG_MB MiB (lines, or one line when E2E_BIG_ONE_LINE
is set) between a decoy metric line and the real one. Writes in 1 MiB chunks (stays small).
E2E_BIG_STDERR=1 floods stderr instead; E2E_BIG_EXIT=N exits with N after printing."""

import os
import sys

v = open("val.txt").read().strip()
mb = int(os.environ.get("E2E_BIG_MB", "300"))
one_line = bool(os.environ.get("E2E_BIG_ONE_LINE"))
flood = sys.stderr.buffer if os.environ.get("E2E_BIG_STDERR") else sys.stdout.buffer
sys.stdout.buffer.write(b"score: 99999\n")
chunk = b"y" * (1 << 20) if one_line else (b"y" * 1023 + b"\n") * 1024
for _ in range(mb):
    flood.write(chunk)
flood.flush()
sys.stdout.buffer.write(f"\nscore: {v}\n".encode())
sys.stdout.flush()
sys.exit(int(os.environ.get("E2E_BIG_EXIT", "0")))
