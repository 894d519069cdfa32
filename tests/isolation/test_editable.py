"""Black-box, issue 14 item 1: after `pip install -e .` of a src-layout package (a REAL venv, a
REAL setuptools editable install), the verifier imports the package through the installation,
which points into your checkout. Sandboxed (the default on Linux with bubblewrap) the
candidate is bound at the checkout's path, so each candidate is what gets measured; without a
sandbox the run refuses before the baseline (exit 2) naming the installation and the fix."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scripts.e2e import git, make_project, program_text
from tests.isolation.test_sandbox import PROBLEM

PYPROJECT = """\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "mypkg"
version = "0.1"

[tool.setuptools.packages.find]
where = ["src"]
"""

SCORE = "import mypkg\nprint(f'score: {mypkg.VALUE}')\n"


def _venv(base: Path) -> Path:
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
    py = venv / "bin" / "python"
    check = "import setuptools, sys; sys.exit(tuple(map(int, setuptools.__version__.split('.')[:2])) < (70, 1))"
    if subprocess.run([str(py), "-c", check], capture_output=True).returncode != 0:
        # An editable build without build isolation needs a setuptools that builds wheels by
        # itself (>= 70.1); Python >= 3.12 venvs come with none: from the registry
        res = subprocess.run([str(py), "-m", "pip", "install", "-q", "setuptools>=70.1"], capture_output=True,
                             text=True, timeout=600)
        if res.returncode != 0:
            pytest.skip(f"no setuptools for the test venv: {res.stderr.strip()[-200:]}")
    return py


@pytest.fixture(scope="module")
def editable(tmp_path_factory):
    base = tmp_path_factory.mktemp("editable")
    py = _venv(base)
    files = {"pyproject.toml": PYPROJECT, "src/mypkg/__init__.py": "VALUE = 10\n", "score.py": SCORE,
             ".gitignore": "*.log\n__pycache__/\n*.egg-info/\n"}
    p = make_project(base, {1: 'W("src/mypkg/__init__.py", "VALUE = 5\\n")'}, guards=False,
                     files=files, verifier=f"{py} score.py")
    # the same program without a sandbox, beside it
    text = (p.repo / "program.md").read_text().replace("sandbox:\n", "sandbox:\n  kind: none\n", 1)
    (p.repo / "none.md").write_text(text)
    git(p.repo, "add", "none.md", env=p.env)
    git(p.repo, "commit", "-q", "-m", "unsandboxed program", env=p.env)
    res = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                          "-e", str(p.repo)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    # the installation really points into the checkout: outside it, the checkout's value
    out = subprocess.run([str(py), "-c", "import mypkg; print(mypkg.__file__)"], capture_output=True,
                         text=True, cwd=base).stdout.strip()
    assert out.startswith(str(p.repo)), out
    return p


def test_unsandboxed_run_refuses_an_editable_install_into_the_checkout(editable):
    p = editable
    head = git(p.repo, "rev-parse", "HEAD", env=p.env)
    res = p.cli("run", "none.md", "--tag", "n1", "--cycles", "1")
    assert res.returncode == 2, res.stdout + res.stderr
    err = res.stderr.strip()
    assert err.startswith("none.md:"), err
    assert "points into your checkout" in err and str(p.repo) in err, err
    assert "sandbox: auto" in err and "`PYTHONPATH=src python …`" in err, err
    # a non-editable install is no fix: the verifier would import that copy in every cycle
    assert "Not `pip install .`" in err, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    # nothing changed: no branch, no journal, the checkout as it was
    assert git(p.repo, "branch", "--list", "autoloop/n1", env=p.env) == ""
    assert not (p.repo / ".autoloop" / "n1").exists()
    assert git(p.repo, "rev-parse", "HEAD", env=p.env) == head


@pytest.mark.skipif(PROBLEM is not None, reason=PROBLEM or "")
def test_sandboxed_run_measures_the_candidate_through_the_editable_install(editable):
    p = editable
    res = p.run("--cycles", "1")
    assert res.returncode == 0, res.stdout + res.stderr
    # the candidate's VALUE = 5 was measured (the checkout still says 10)
    assert [(r["status"], r["metric"]) for r in p.rows()] == [("baseline", "10"), ("keep", "5")]
    assert (p.repo / "src" / "mypkg" / "__init__.py").read_text() == "VALUE = 10\n"


def test_unsandboxed_verify_refuses_an_editable_install_like_run(editable):
    # CONTRACT §9: verify makes the same program checks as run; without it verify measured
    # through the installation (here: the checkout's VALUE = 10) and said nothing
    p = editable
    head = git(p.repo, "rev-parse", "HEAD", env=p.env)
    trees = git(p.repo, "worktree", "list", env=p.env)
    run = p.cli("run", "none.md", "--tag", "n2", "--cycles", "1")
    res = p.cli("verify", "none.md")
    assert res.returncode == 2, res.stdout + res.stderr
    err = res.stderr.strip().splitlines()[-1]
    assert err == run.stderr.strip(), (err, run.stderr)
    assert "points into your checkout" in err and "Traceback" not in res.stderr
    assert "score:" not in res.stdout and "verifying" not in res.stdout, res.stdout
    assert git(p.repo, "rev-parse", "HEAD", env=p.env) == head
    assert git(p.repo, "worktree", "list", env=p.env) == trees


def test_unsandboxed_gate_refuses_an_editable_install_like_run(editable):
    # without it, base and head would both import the checkout: "no change" whatever the PR did
    p = editable
    trees = git(p.repo, "worktree", "list", env=p.env)
    res = p.cli("gate", "none.md", "--base", "HEAD~1", "--pairs", "1", "--alpha", "0.5")
    assert res.returncode == 2, res.stdout + res.stderr
    err = res.stderr.strip().splitlines()[-1]
    assert err.startswith("none.md:") and "points into your checkout" in err, res.stderr
    assert "Traceback" not in res.stderr
    assert git(p.repo, "worktree", "list", env=p.env) == trees


def _ray_program(p, name: str, extra: str = "") -> None:
    text = (p.repo / "program.md").read_text()
    head, sep, body = text[4:].partition("---\n")
    (p.repo / name).write_text("---\n" + head + "parallel:\n  executor: ray\n" + extra + sep + body)
    git(p.repo, "add", name, env=p.env)
    git(p.repo, "commit", "-q", "-m", name, env=p.env)


@pytest.mark.ray
@pytest.mark.skipif(PROBLEM is not None, reason=PROBLEM or "")
def test_ray_measurements_measure_the_candidate_through_the_editable_install(editable, tmp_path):
    # a local Ray instance's node is this machine: the candidate unpacked there is shown at the
    # checkout's path too, or the verifier would import the checkout's VALUE = 10 every time
    pytest.importorskip("ray")
    p = editable
    _ray_program(p, "ray.md")
    res = p.cli("run", "ray.md", "--tag", "ray1", "--cycles", "1", timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    rows = [r.split("\t") for r in (p.repo / "results.tsv").read_text().splitlines()[1:]]
    assert [(r[3], r[2]) for r in rows[-2:]] == [("baseline", "10"), ("keep", "5")], rows
    assert (p.repo / "src" / "mypkg" / "__init__.py").read_text() == "VALUE = 10\n"


@pytest.mark.ray
def test_unsandboxed_ray_measurements_refuse_an_editable_install_like_run(editable, tmp_path):
    # the node cannot make a sandbox (no bwrap on the PATH its measurements get): nothing would
    # bind the candidate at the checkout's path, so the run refuses as an unsandboxed one does
    pytest.importorskip("ray")
    p = editable
    nobin = tmp_path / "nobin"
    nobin.mkdir()
    _ray_program(p, "raynone.md", f"  env:\n    - {{PATH: {nobin}}}\n")
    head = git(p.repo, "rev-parse", "HEAD", env=p.env)
    res = p.cli("run", "raynone.md", "--tag", "ray2", "--cycles", "1", timeout=300)
    assert res.returncode == 2, res.stdout + res.stderr[-3000:]
    err = res.stderr.strip().splitlines()[-1]
    assert err.startswith("raynone.md:") and "points into your checkout" in err, res.stderr
    assert "on the Ray node" in err and "Traceback" not in res.stderr
    assert git(p.repo, "branch", "--list", "autoloop/ray2", env=p.env) == ""
    assert git(p.repo, "rev-parse", "HEAD", env=p.env) == head


def test_following_the_unsandboxed_advice_measures_each_candidate(editable):
    # last in this module: it uninstalls the package. The advice the refusal gives, followed
    # word for word: uninstall, and the verifier's Python finds the package at the path it names
    p = editable
    err = p.cli("run", "none.md", "--tag", "n4", "--cycles", "1").stderr
    entry = re.search(r"`PYTHONPATH=(\S+) python …`", err)
    assert entry, err
    py = re.search(r"verifier:\n  command: (\S+) score.py", (p.repo / "none.md").read_text()).group(1)
    res = subprocess.run([py, "-m", "pip", "uninstall", "-y", "-q", "mypkg"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    text = (p.repo / "none.md").read_text().replace(f"command: {py} score.py",
                                                     f"command: PYTHONPATH={entry.group(1)} {py} score.py")
    (p.repo / "advised.md").write_text(text)
    git(p.repo, "add", "advised.md", env=p.env)
    git(p.repo, "commit", "-q", "-m", "the advice followed", env=p.env)
    res = p.cli("run", "advised.md", "--tag", "n4", "--cycles", "1")
    assert res.returncode == 0, res.stdout + res.stderr
    # the candidate's VALUE = 5 was measured, not an installed copy's 10
    assert [(r["status"], r["metric"]) for r in p.rows()] == [("baseline", "10"), ("keep", "5")]
