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


def _with_inputs(repo: Path, command: str, score: str, inputs: str):
    p = program(repo, "cpu")
    return dataclasses.replace(p, verifier=dataclasses.replace(p.verifier, command=command, score=score,
                                                                inputs=inputs))


def _measured(p, repo: Path, tmp_path: Path, seed: int, bwrap=None):
    from autoloop.engine.verify import measure
    from autoloop.isolation.sandbox import tree_box

    n = len(list(tmp_path.glob("tree-*")))
    tree = Worktree(repo, repo / ".git", tmp_path / f"tree-{n}")
    tree.open(git(repo, "rev-parse", "HEAD"))
    scratch = tmp_path / f"scratch-{n}" / "tmp"
    scratch.mkdir(parents=True)
    env = {**os.environ, "TMPDIR": str(scratch)}
    box = None if bwrap is None else tree_box(bwrap, p, tree.path, repo / ".git", scratch.parent, env.get("PATH", ""))
    (tmp_path / f"logs-{n}").mkdir()
    return measure(p, cwd=tree.path, env=env, log_dir=tmp_path / f"logs-{n}", marker=proc.new_marker(),
                   with_guards=False, box=box, seed=seed, scorer=_SCORERS[id(p)])


_SCORERS: dict = {}


def test_inputs_are_made_before_the_command_given_on_its_stdin_and_read_by_the_score(make_repo, tmp_path: Path) -> None:
    repo = make_repo({"model.py": "x = 1\n"})
    p = _with_inputs(repo, 'cat > "$AUTOLOOP_OUTPUT/got"',
                     'test "$(cat "$AUTOLOOP_OUTPUT/got")" = "$(cat "$AUTOLOOP_INPUTS")" && echo same',
                     'echo "calls for $AUTOLOOP_SEED"; echo made >> "$HOME_MARK"')
    mark = tmp_path / "made.txt"
    os.environ["HOME_MARK"] = str(mark)
    try:
        _SCORERS[id(p)] = Scorer(p, Worktree(repo, repo / ".git", tmp_path / "score-tree"),
                                 git(repo, "rev-parse", "HEAD"), None, tmp_path / "score-scratch")
        first = _measured(p, repo, tmp_path, 7)
        again = _measured(p, repo, tmp_path, 7)   # the pair's other run: the same seed, made once
        other = _measured(p, repo, tmp_path, 8)
    finally:
        del os.environ["HOME_MARK"]
    for m in (first, again, other):
        assert m.metric is not None and m.guards_ok, m
        assert "same" in m.score_said
    assert mark.read_text().count("made") == 2


def test_failing_inputs_leave_no_metric_and_say_why(make_repo, tmp_path: Path) -> None:
    repo = make_repo({"model.py": "x = 1\n"})
    p = _with_inputs(repo, "true", "true", "echo no inputs >&2; exit 4")
    _SCORERS[id(p)] = Scorer(p, Worktree(repo, repo / ".git", tmp_path / "score-tree"),
                             git(repo, "rev-parse", "HEAD"), None, tmp_path / "score-scratch")
    m = _measured(p, repo, tmp_path, 3)
    assert m.metric is None and m.error is not None and m.error.startswith("verifier.inputs: exit 4"), m


def test_the_sandboxed_command_cannot_open_the_inputs_file(make_repo, tmp_path: Path) -> None:
    import pytest

    from autoloop.isolation.sandbox import probed
    from tests.isolation.test_sandbox import PROBLEM

    if PROBLEM is not None:
        pytest.skip(PROBLEM)
    repo = make_repo({"model.py": "x = 1\n"})
    p = _with_inputs(repo, 'cat > "$AUTOLOOP_OUTPUT/got"; ls -d /tmp/autoloop-inputs-* > "$AUTOLOOP_OUTPUT/seen" 2>&1; true',
                     'grep -q "No such file" "$AUTOLOOP_OUTPUT/seen" && test -s "$AUTOLOOP_OUTPUT/got" '
                     '&& cat "$AUTOLOOP_INPUTS" >/dev/null && echo sealed',
                     'echo "calls for $AUTOLOOP_SEED"')
    bwrap, why = probed(p)
    assert bwrap is not None, why
    _SCORERS[id(p)] = Scorer(p, Worktree(repo, repo / ".git", tmp_path / "score-tree"),
                             git(repo, "rev-parse", "HEAD"), bwrap, tmp_path / "score-scratch")
    m = _measured(p, repo, tmp_path, 5, bwrap)
    assert m.metric is not None and "sealed" in m.score_said, m


def test_inputs_need_a_score(tmp_path: Path) -> None:
    import pytest

    text = TEXT.replace("  score: echo\n", "  inputs: echo\n")
    with pytest.raises(Exception, match=r"program.md:\d+: verifier.inputs: needs verifier.score"):
        parse_program(text, tmp_path / "program.md", tmp_path)
