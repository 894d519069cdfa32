"""The git runner's one environment and errors, and files of our own read and written without
following links — real git, real files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autoloop.git.gitrun import GitError, git, git_env
from autoloop.process.logfile import fresh_log, read_regular


def test_git_env_keeps_no_repository_location_from_outside(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_EXTERNAL_DIFF"):
        monkeypatch.setenv(name, str(tmp_path / "elsewhere"))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "cfg"))
    env = git_env()
    assert not {"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_EXTERNAL_DIFF"} & env.keys()
    assert env["GIT_CONFIG_GLOBAL"] == str(tmp_path / "cfg") and env["GIT_NO_REPLACE_OBJECTS"] == "1"


def test_git_runs_in_its_own_repository_whatever_git_dir_says(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    repo, other = tmp_path / "repo", tmp_path / "other"
    for r in (repo, other):
        r.mkdir()
        git(r, "init", "-q")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    assert Path(git(repo, "rev-parse", "--absolute-git-dir").strip()) == (repo / ".git").resolve()


def test_a_failed_git_call_names_the_command_and_gits_reason(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    with pytest.raises(GitError, match=r"^git rev-parse --verify nope failed: fatal: "):
        git(tmp_path, "rev-parse", "--verify", "nope")
    assert git(tmp_path, "rev-parse", "--verify", "-q", "nope", check=False) == ""


def test_regular_files_only_and_never_written_through_a_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"yours")
    os.symlink(victim, tmp_path / "link")
    os.mkfifo(tmp_path / "fifo")
    assert read_regular(tmp_path / "link", -1) == b"" and read_regular(tmp_path / "fifo", -1) == b""
    with fresh_log(tmp_path / "link") as f:
        f.write(b"ours")
    assert victim.read_bytes() == b"yours" and not (tmp_path / "link").is_symlink()
    assert read_regular(tmp_path / "link", -1) == b"ours"


def test_tree_names_answer_as_membership_does(tmp_path: Path) -> None:
    from autoloop.git.repomemo import RepoMemo
    repo = tmp_path / "r"
    (repo / "a" / "b").mkdir(parents=True)
    (repo / "a" / "b" / "f.py").write_text("x\n")
    (repo / "a" / "g.txt").write_text("y\n")
    (repo / "top").write_text("z\n")
    git(tmp_path, "init", "-q", str(repo))
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    trees = RepoMemo().trees(repo, "HEAD")
    asked = {"", "a", "a/b", "a/b/f.py", "a/g.txt", "top", "a/b/g.txt", "b", "a/", "top/x", "nope"}
    assert {p for p in asked if p in trees} == set(trees.names()) & asked
    assert trees.names() == {"a", "a/b", "a/b/f.py", "a/g.txt", "top"}
