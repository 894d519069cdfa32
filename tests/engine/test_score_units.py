"""verifier.score on real processes: where the metric is read from, the score as a correctness
check under `measure: wall|cpu`, and the environment the score gets (the command's $AUTOLOOP_*,
fresh temp and bytecode folders)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from autoloop.process import proc
from autoloop.program.reader import parse_program
from autoloop.engine.score import Scorer
from autoloop.engine.verify import summarize
from autoloop.git.workspace import Worktree
from tests.conftest import git

TEXT = ("---\ngoal: g\nallowed: [model.py]\nverifier:\n  command: echo\n  score: echo\n"
        "  metric: acc\n  direction: maximize\n---\n")


def program(repo: Path, measure: str = "output"):
    p = parse_program(TEXT, repo / "program.md", repo)
    return dataclasses.replace(p, verifier=dataclasses.replace(p.verifier, measure=measure))


def ran(tmp_path: Path, name: str, command: str) -> proc.ProcResult:
    return proc.run(command, cwd=tmp_path, env=dict(os.environ), timeout=30, log_stem=tmp_path / name)


def test_the_metric_is_the_scores_never_the_commands(tmp_path: Path) -> None:
    p = program(tmp_path)
    todo = [proc.Step("verifier", "x", 30, False)]
    command = ran(tmp_path, "verifier", "echo acc: 1.0")   # what candidate code would print
    m = summarize(p, todo, [command], score=ran(tmp_path, "score", "echo acc: 0.5"))
    assert (m.metric, m.error, m.log_stem) == (0.5, None, tmp_path / "score")
    failed = summarize(p, todo, [command], score=ran(tmp_path, "score", "echo acc: 0.9; exit 3"))
    assert failed.metric is None and failed.error.startswith("verifier.score: exit 3")
    assert summarize(p, todo, [command]).error == "verifier.score did not run"


def test_with_wall_or_cpu_a_failing_score_is_a_guard_fail(tmp_path: Path) -> None:
    p = program(tmp_path, "cpu")
    todo = [proc.Step("verifier", "x", 30, False)]
    command = ran(tmp_path, "verifier", "echo acc: 2")
    m = summarize(p, todo, [command], score=ran(tmp_path, "score", "echo wrong answer >&2; exit 1"))
    assert m.metric is None and m.error is None
    assert m.failed_guard is not None and m.failed_guard.name == "score"
    assert "wrong answer" in m.failed_guard.detail
    passed = summarize(p, todo, [command], score=ran(tmp_path, "score", "exit 0"))
    assert passed.guards_ok and passed.metric is not None
    linked = summarize(p, todo, [command], score="not run: $AUTOLOOP_OUTPUT holds a link")
    assert linked.failed_guard is not None and linked.failed_guard.detail.endswith("holds a link")


def test_the_score_gets_the_commands_seed_and_its_own_temp(make_repo, tmp_path: Path) -> None:
    repo = make_repo({"score.py": "x = 1\n"})
    p = dataclasses.replace(program(repo), verifier=dataclasses.replace(
        program(repo).verifier, score='echo "$AUTOLOOP_SEED $AUTOLOOP_OUTPUT $TMPDIR $PYTHONPYCACHEPREFIX"'))
    head = git(repo, "rev-parse", "HEAD")
    tree = Worktree(repo, repo / ".git", tmp_path / "score-tree")
    scorer = Scorer(p, tree, head, None, tmp_path / "scratch")
    output = tmp_path / "output"
    output.mkdir()
    env = {**os.environ, "AUTOLOOP_SEED": "12345", "AUTOLOOP_OUTPUT": str(output),
           "TMPDIR": "/the/commands/tmp", "PYTHONPYCACHEPREFIX": "/the/commands/pycache"}
    res = scorer(env, output, tmp_path / "logs", proc.new_marker())
    assert res.ok
    seed, out, tmp, pycache = res.stdout_path.read_text().split()
    assert (seed, out) == ("12345", str(output))
    assert not tmp.startswith("/the/commands") and not pycache.startswith("/the/commands")
    # unsandboxed, a score tree someone changed is made the start commit again before the score
    (tree.path / "score.py").write_text("x = 2\n")
    (tree.path / "conftest.py").write_text("planted\n")
    assert scorer(env, output, tmp_path / "logs", proc.new_marker()).ok
    assert (tree.path / "score.py").read_text() == "x = 1\n" and not (tree.path / "conftest.py").exists()


def test_private_paths_are_unreadable_in_every_box_but_the_scores(make_repo, tmp_path: Path) -> None:
    """Outside /tmp (which the sandboxes replace anyway): a folder and a file beside the tests."""
    import shutil
    import subprocess
    import tempfile

    import pytest

    from autoloop.isolation.sandbox import probed, tree_box
    from tests.isolation.test_sandbox import PROBLEM

    if PROBLEM is not None:
        pytest.skip(PROBLEM)
    outside = Path(tempfile.mkdtemp(prefix="private-", dir=Path(__file__).resolve().parent))
    try:
        (outside / "labels").mkdir()
        (outside / "labels" / "y.txt").write_text("secret\n")
        (outside / "key.txt").write_text("secret\n")
        repo = make_repo({"model.py": "x = 1\n"})
        text = TEXT.replace("---\ngoal", f"---\nprivate: [{outside / 'labels'}, {outside / 'key.txt'}]\ngoal")
        p = parse_program(text, repo / "program.md", repo)
        bwrap, why = probed(p)
        assert bwrap is not None, why
        read = f"cat {outside / 'labels' / 'y.txt'}; cat {outside / 'key.txt'}"

        def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
            return subprocess.run(argv, capture_output=True, text=True, timeout=60)

        generator = run(bwrap.argv(read, workdir=repo))
        command = run(tree_box(bwrap, p, repo, repo / ".git", tmp_path / "s1").argv(read))
        score = run(tree_box(bwrap, p, repo, repo / ".git", tmp_path / "s2", show_private=True).argv(read))
        for res in (generator, command):
            assert "secret" not in res.stdout
            assert res.stderr.count("Permission denied") == 2, res.stderr
        assert score.stdout == "secret\nsecret\n", score.stderr
    finally:
        shutil.rmtree(outside)


def test_output_that_is_more_than_plain_files(tmp_path: Path) -> None:
    from autoloop.engine.verify import not_plain

    out = tmp_path / "output"
    out.mkdir()
    made = os.lstat(out)
    (out / "sub").mkdir()
    (out / "sub" / "preds.txt").write_text("1\n")
    assert not_plain(out, made) is None
    os.symlink("/etc/hostname", out / "sub" / "labels.txt")
    assert not_plain(out, made) == "holds sub/labels.txt, not a regular file or folder"
    (out / "sub" / "labels.txt").unlink()
    os.mkfifo(out / "pipe")
    assert not_plain(out, made) == "holds pipe, not a regular file or folder"
    # the folder itself swapped for a link to another (a private one)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.rename(out, tmp_path / "gone")
    os.symlink(elsewhere, out)
    assert not_plain(out, made) == "was replaced"
    out.unlink()
    out.mkdir()   # a new folder at the same place is not the one the command was given
    assert not_plain(out, made) == "was replaced"


def test_a_venv_inside_the_checkout_is_there_for_the_sandboxed_score(make_repo, tmp_path: Path) -> None:
    """The getting-started layout: a gitignored `.venv/` at the top of the checkout. The score's
    tree is bound read-only, so bwrap cannot make the venv's mount point there itself."""
    import pytest

    from autoloop.isolation.sandbox import probed
    from tests.isolation.test_sandbox import PROBLEM

    if PROBLEM is not None:
        pytest.skip(PROBLEM)
    repo = make_repo({".gitignore": ".venv/\n", "model.py": "x = 1\n"})
    (repo / ".venv").mkdir()
    (repo / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    p = dataclasses.replace(program(repo), verifier=dataclasses.replace(
        program(repo).verifier, score="cat .venv/pyvenv.cfg && echo acc: 1"))
    bwrap, why = probed(p)
    assert bwrap is not None, why
    tree = Worktree(repo, repo / ".git", tmp_path / "score-tree")
    scorer = Scorer(p, tree, git(repo, "rev-parse", "HEAD"), bwrap, tmp_path / "scratch")
    output = tmp_path / "output"
    output.mkdir()
    res = scorer({**os.environ, "AUTOLOOP_OUTPUT": str(output)}, output, tmp_path / "logs", proc.new_marker())
    assert res.ok, res.stderr_path.read_text()
    assert res.stdout_path.read_text() == "home = /usr/bin\nacc: 1\n"
    assert git(repo, "status", "--porcelain") == ""
