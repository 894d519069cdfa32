"""A measurement that fails on a path the sandbox hides (its own /tmp, /dev/shm) but that exists
outside it says so and names the fix (`data:`, `sandbox.writable`), instead of a bare
FileNotFoundError."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from tests.scripts.e2e import make_project

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


@pytest.mark.parametrize("root", ["/dev/shm", "/tmp"])
def test_a_verifier_reading_a_hidden_path_is_told_why(tmp_path: Path, root: str) -> None:
    folder = Path(root) / f"autoloop-test-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    try:
        (folder / "target.txt").write_text("40\n")
        score = f"print('score:', float(open('{folder}/target.txt').read()))\n"
        p = make_project(tmp_path / "p", files={"score.py": score})
        r = p.run("--cycles", "1")
        assert r.returncode != 0
        assert "FileNotFoundError" in r.stderr
        assert f"{folder}/target.txt exists outside the sandbox, but the measurement sandbox has its own, " \
               f"empty {root}" in r.stderr, r.stderr
        assert f"`- {{path: {folder}, as: data/{folder.name}}}`" in r.stderr
        assert "sandbox.writable" in r.stderr
    finally:
        shutil.rmtree(folder)
    # once it is gone outside too, no such hint: the path is simply missing
    r = p.run("--cycles", "1")
    assert r.returncode != 0 and "FileNotFoundError" in r.stderr
    assert "exists outside the sandbox" not in r.stderr

