"""Black-box: the settings of `verifier.score` and `private` that cannot keep their promise are
refused before anything runs, with exit 2 at program.md:LINE and the fix (contract §10)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import git, run_cli

FILES = {
    "model.py": "def predict(x):\n    return 0\n",
    "produce.py": "import os\nopen(os.path.join(os.environ['AUTOLOOP_OUTPUT'], 'p'), 'w').write('1')\n",
    "score.py": "print('acc: 0.5')\n",
}


def program(score: str = "python score.py", extra: str = "", allowed: str = "[model.py]") -> str:
    return ("---\ngoal: better predictions\n"
            f"allowed: {allowed}\n"
            "verifier:\n  command: python produce.py\n"
            f"  score: {score}\n"
            "  metric: acc\n  direction: maximize\n"
            f"{extra}---\nbody\n")


def project(make_repo, text: str) -> Path:
    repo = make_repo({**FILES, "program.md": text})
    git(repo, "add", "-A")
    return repo


def refused(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    before = git(repo, "status", "--porcelain", "--ignored")
    res = run_cli("verify", "program.md", *args, cwd=repo, env=env)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    assert git(repo, "status", "--porcelain", "--ignored") == before   # nothing changed
    return res.stderr.strip()


def test_private_inside_the_repository(make_repo) -> None:
    repo = make_repo({**FILES, "labels/y.txt": "1\n"})
    (repo / "program.md").write_text(program(extra=f"private: [{repo / 'labels'}]\n"))
    assert refused(repo) == ("program.md:9: private[0]: '" + str(repo / "labels") + "' is inside the "
                             "repository, where the generator can read it (and its git history); "
                             "move it outside the repository")


def test_private_that_holds_the_repository(make_repo) -> None:
    repo = make_repo(FILES)
    (repo / "program.md").write_text(program(extra=f"private: [{repo.parent}]\n"))
    assert "holds the repository" in refused(repo)


def test_private_that_does_not_exist(make_repo, tmp_path: Path) -> None:
    repo = make_repo(FILES)
    (repo / "program.md").write_text(program(extra=f"private:\n  - {tmp_path / 'nowhere'}\n"))
    assert refused(repo) == (f"program.md:10: private[0]: '{tmp_path / 'nowhere'}' does not exist; "
                             "create it or fix the path")


def test_private_with_sandbox_none(make_repo, tmp_path: Path) -> None:
    (tmp_path / "labels").mkdir()
    repo = make_repo(FILES)
    (repo / "program.md").write_text(program(extra=f"sandbox: none\nprivate: [{tmp_path / 'labels'}]\n"))
    msg = refused(repo)
    assert msg.startswith("program.md:10: private: ") and "remove `sandbox: none`" in msg


def test_private_where_no_sandbox_can_be_made(make_repo, tmp_path: Path) -> None:
    (tmp_path / "labels").mkdir()
    repo = make_repo(FILES)
    (repo / "program.md").write_text(program(extra=f"private: [{tmp_path / 'labels'}]\n"))
    # a PATH without bwrap: what a machine without bubblewrap looks like to autoloop
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("git", "sh"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    env = {"PATH": f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}"}
    msg = refused(repo, env=env)
    assert msg.startswith("program.md:9: private: needs a sandbox") and "bwrap is not installed" in msg
    assert msg.endswith("apt-get install bubblewrap; Fedora: dnf install bubblewrap)); make bubblewrap work, "
                        "or remove private"), msg


def test_score_naming_a_file_the_generator_may_change(make_repo) -> None:
    repo = make_repo(FILES)
    (repo / "program.md").write_text(program(allowed="[model.py, score.py]"))
    assert refused(repo) == ("program.md:6: verifier.score runs score.py, which 'allowed' lets the "
                             "generator change, so it could rewrite its own judge; keep the measurement "
                             "in a file the generator cannot edit (e.g. prepare.py) and allow only what "
                             "it tunes")


def test_a_holdout_reading_private_paths_with_ray(make_repo, tmp_path) -> None:
    """On Ray the score runs here and the private paths stay here; a holdout runs on a node."""
    private = tmp_path / "labels"
    private.mkdir()
    repo = make_repo(FILES)
    (repo / "program.md").write_text(program(extra=f"private: [{private}]\nholdout: {{command: python score.py, metric: acc}}\n"
                                                   "parallel: {executor: ray}\n"))
    res = run_cli("run", "program.md", "--tag", "t1", "--cycles", "1", cwd=repo)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.strip().endswith("program.md:10: holdout reads the private paths, which never leave this "
                                       "machine, and with parallel.executor: ray it runs on a node; score the "
                                       "held-out data with verifier.score instead (it runs here), or use "
                                       "parallel.executor: local")
    assert git(repo, "branch", "--list", "autoloop/*") == ""


@pytest.mark.parametrize("other", ["sandbox: {writable: [WHERE]}\n", "data:\n  - {path: WHERE, as: data/x}\n"])
def test_private_overlapping_what_the_boxes_reach(make_repo, tmp_path: Path, other: str) -> None:
    (tmp_path / "shared" / "labels").mkdir(parents=True)
    repo = make_repo(FILES)
    (repo / "program.md").write_text(program(extra=other.replace("WHERE", str(tmp_path / "shared"))
                                             + f"private: [{tmp_path / 'shared' / 'labels'}]\n"))
    msg = refused(repo)
    assert f"private[0]: '{tmp_path / 'shared' / 'labels'}' overlaps " in msg, msg
    assert msg.endswith("where the generator or the candidate's code can reach it; keep private paths "
                        "apart from both")
