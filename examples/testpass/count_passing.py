"""The verifier of the testpass example: runs tests/ and prints `passed: N`.

A test with sub-tests passes only if all of them do; a skipped test does not pass. The suite
runs in this process with unittest (standard library), whatever the working directory.
"""

from __future__ import annotations

import io
import os
import sys
import types
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.dont_write_bytecode = True   # leave nothing behind in the work tree


def preload_textkit() -> None:
    """Put textkit, compiled from its current source, in sys.modules for the tests' `import
    textkit`: a cached .pyc of an earlier version (same size, same mtime second) must never
    be what gets tested. If it does not even compile, the tests' own import fails and counts."""
    path = HERE / "textkit.py"
    module = types.ModuleType("textkit")
    module.__file__ = str(path)
    sys.modules["textkit"] = module   # as an import would: dataclasses, pickle need it
    try:
        exec(compile(path.read_bytes(), str(path), "exec", dont_inherit=True), module.__dict__)
    except Exception:
        del sys.modules["textkit"]


def main() -> int:
    preload_textkit()
    suite = unittest.TestLoader().discover(str(HERE / "tests"), pattern="test_*.py",
                                           top_level_dir=str(HERE / "tests"))
    stream = io.StringIO()
    result = unittest.TextTestRunner(stream=stream, verbosity=2).run(suite)
    failed: set[str] = set()
    for test, _ in (*result.failures, *result.errors):
        failed.add(getattr(test, "test_case", test).id())    # a sub-test counts for its test
    skipped = len(result.skipped)
    passed = result.testsRun - len(failed) - skipped
    sys.stderr.write(stream.getvalue())
    print(f"total: {result.testsRun}")
    print(f"passed: {passed}", flush=True)
    sys.stderr.flush()
    # The code under test must not get to print after us (an atexit hook writing
    # `passed: 999` would otherwise be the last metric line).
    os._exit(0)


if __name__ == "__main__":
    main()
