"""Shared fixtures: real git repositories in tmp_path, with an isolated HOME and git config so a
developer's global hooks, signing or templates, Ray token or caches never leak into a test."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def isolated_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "CI", "GITHUB_STEP_SUMMARY",
                "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL",
                "NO_COLOR", "PYTHONPATH"):
        monkeypatch.delenv(var, raising=False)
    for var in [v for v in os.environ if v.startswith("RAY_")]:   # a developer's Ray auth or address
        monkeypatch.delenv(var)
    (home / ".gitconfig").write_text(
        "[user]\n\tname = Test User\n\temail = test@example.com\n"
        "[init]\n\tdefaultBranch = main\n"
    )
    return home


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True)
    return out.stdout.strip()


@pytest.fixture
def make_repo(tmp_path: Path):
    """make_repo({"path": "content", ...}, program=None) -> Path of a committed repo."""

    def _make(files: dict[str, str], *, name: str = "repo", commit: bool = True) -> Path:
        repo = tmp_path / name
        repo.mkdir()
        git(repo, "init", "-q")
        for rel, content in files.items():
            p = repo / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(textwrap.dedent(content))
        if commit:
            git(repo, "add", "-A")
            git(repo, "commit", "-q", "-m", "initial")
        return repo

    return _make


@pytest.fixture
def python() -> str:
    return sys.executable


def run_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 300, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real CLI as a subprocess (`python -m autoloop`), as a user would."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    return subprocess.run([sys.executable, "-m", "autoloop", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout, input=input)
