"""The probe's plants as code, in a real interpreter: the special-cased input's recorder saves
what it saw as the calls come, so that a process killed at its last answer (a traced benchmark's
worker) still leaves the record; before, it saved at exit only and the class was skipped."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

from autoloop.probe import answer_hacks


def test_the_recorder_saves_without_an_exit(tmp_path: Path) -> None:
    (tmp_path / "lib.py").write_text("def double(x):\n    return 2 * x\n" + answer_hacks.record_calls())
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    script = "import os, lib\nfor i in range(20):\n    lib.double(i)\nos._exit(0)\n"   # no atexit
    subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, check=True, timeout=60)
    seen = pickle.loads((tmp_path / answer_hacks.RECORD_FILE).read_bytes())
    assert len(seen) == 16 and sorted(pickle.loads(v) for v in seen.values()) == [2 * i for i in range(16)]
