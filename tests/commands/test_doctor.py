"""`autoloop doctor [PROGRAM]`: one line per check, exit 0 when a run could start, 1 when not,
2 on a bad program.md — and nothing changed in the repository either way."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import git, run_cli

PY = sys.executable
SCORE = 'print(f"score: {open(\'val.txt\').read().strip()}")\n'
GEN = "import pathlib; pathlib.Path('val.txt').write_text('4\\n')\n"


def _repo(make_repo, *, generator: str | None = None, verifier: str | None = None,  # type: ignore[no-untyped-def]
          extra: str = "", sandbox: str = "none") -> Path:
    repo = make_repo({"val.txt": "5\n", "score.py": SCORE, "gen.py": GEN,
                      ".gitignore": "program.md\nexperiments.md\nresults.tsv\n.autoloop/\n"})
    generator = generator or f"generator: {{kind: command, command: {PY} gen.py}}"
    verifier = verifier or f"{PY} score.py"
    (repo / "program.md").write_text(
        f"---\ngoal: Lower the score\nallowed: [val.txt]\n"
        f"verifier: {{command: {verifier}, metric: score, direction: minimize}}\n"
        f"{generator}\nsandbox: {sandbox}\n{extra}---\nLower it.\n")
    return repo


def _lines(out: str) -> dict[str, tuple[str, str]]:
    """name -> (state, detail) of each check line."""
    found = {}
    for line in out.splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[0] in ("ok", "warn", "FAIL"):
            found[parts[1]] = (parts[0], parts[2])
    return found


def _unchanged(repo: Path, refs_before: str) -> None:
    assert git(repo, "for-each-ref") == refs_before
    assert not (repo / "results.tsv").exists() and not (repo / "experiments.md").exists()
    assert git(repo, "status", "--porcelain") == ""


def test_healthy_setup_passes_every_check(make_repo) -> None:  # type: ignore[no-untyped-def]
    repo = _repo(make_repo, extra="guards: [\"python3 -c 'pass'\"]\n")
    refs = git(repo, "for-each-ref")
    res = run_cli("doctor", cwd=repo)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = _lines(res.stdout)
    head = git(repo, "rev-parse", "HEAD")[:12]
    assert lines["git"] == ("ok", f"{repo}: HEAD {head} on main, clean")
    assert lines["generator"][0] == "ok"
    assert lines["sandbox"][0] == "warn" and "unconfined" in lines["sandbox"][1]
    assert lines["verifier"][0] == "ok" and lines["verifier"][1].startswith(f"score = 5 on HEAD {head}")
    assert lines["guard"][0] == "ok" and "passes on HEAD" in lines["guard"][1]   # "guard NAME ..."
    assert res.stdout.rstrip().endswith("doctor: a run can start")
    _unchanged(repo, refs)
    # What doctor says is what the run then does.
    run = run_cli("run", "--tag", "t", "--cycles", "1", cwd=repo)
    assert run.returncode == 0, run.stdout + run.stderr


def test_verifier_measures_head_not_the_uncommitted_checkout(make_repo) -> None:  # type: ignore[no-untyped-def]
    repo = _repo(make_repo)
    (repo / "val.txt").write_text("99\n")     # not committed: the run's baseline will not see it
    res = run_cli("doctor", cwd=repo)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = _lines(res.stdout)
    assert lines["verifier"][1].startswith("score = 5 on HEAD")
    assert lines["git"][0] == "warn" and "1 uncommitted or untracked path" in lines["git"][1]
    assert (repo / "val.txt").read_text() == "99\n"


def test_broken_setup_names_each_problem(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    missing = tmp_path / "no-such-data"
    repo = _repo(make_repo, generator="generator: {kind: command, command: no-such-agent-xyz --go}",
                 extra=f"data: [{{path: {missing}, as: data}}]\n")
    refs = git(repo, "for-each-ref")
    res = run_cli("doctor", cwd=repo)
    assert res.returncode == 1, res.stdout + res.stderr
    lines = _lines(res.stdout)
    assert lines["generator"][0] == "FAIL" and "no-such-agent-xyz not found on PATH" in lines["generator"][1]
    assert lines["data"][0] == "FAIL" and str(missing) in lines["data"][1] and "program.md:" in lines["data"][1]
    assert lines["verifier"][0] == "FAIL"      # not measured without its data
    assert "a run would not start" in res.stdout
    assert "Traceback" not in res.stderr
    _unchanged(repo, refs)


def test_failing_verifier_is_a_problem_with_what_it_said(make_repo) -> None:  # type: ignore[no-untyped-def]
    repo = _repo(make_repo, verifier=f"{PY} -c 'import sys; sys.exit(\"no GPU here\")'")
    res = run_cli("doctor", cwd=repo)
    assert res.returncode == 1, res.stdout + res.stderr
    state, detail = _lines(res.stdout)["verifier"]
    assert state == "FAIL" and "no GPU here" in detail


def test_missing_agent_cli_fails_the_generator_check(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    repo = _repo(make_repo, generator="generator: {kind: codex}")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("git", "sh"):
        (bin_dir / tool).symlink_to(shutil.which(tool))  # type: ignore[arg-type]
    res = run_cli("doctor", cwd=repo, env={"PATH": str(bin_dir)})
    assert res.returncode == 1
    state, detail = _lines(res.stdout)["generator"]
    assert state == "FAIL" and "codex not found on PATH" in detail and "install the Codex CLI" in detail


def test_bad_program_is_exit_2(make_repo) -> None:  # type: ignore[no-untyped-def]
    repo = _repo(make_repo, extra="stopp: {max_cycles: 3}\n")
    res = run_cli("doctor", cwd=repo)
    assert res.returncode == 2
    assert res.stderr.startswith("program.md:") and "stopp" in res.stderr
    assert res.stdout == ""


def test_no_program_here_says_where_a_first_check_starts(tmp_path: Path) -> None:
    """Right after installing there is no program.md: one line, exit 2, naming the quickstart's
    program as the machine check (a file that exists but is unreadable keeps its own message)."""
    for args in (("doctor",), ("doctor", "--probe"), ("doctor", "elsewhere/program.md")):
        res = run_cli(*args, cwd=tmp_path)
        assert res.returncode == 2 and res.stdout == "", res
        assert res.stderr.count("\n") == 1 and "cannot read program file" in res.stderr, res.stderr
        assert "autoloop doctor examples/quickstart/program.md" in res.stderr
    (tmp_path / "program.md").mkdir()
    res = run_cli("doctor", cwd=tmp_path)
    assert res.returncode == 2 and "it is a directory" in res.stderr and "quickstart" not in res.stderr


def test_not_a_repository_state_it_works_on(make_repo) -> None:  # type: ignore[no-untyped-def]
    repo = _repo(make_repo)
    (repo / ".git" / "MERGE_HEAD").write_text(git(repo, "rev-parse", "HEAD") + "\n")
    res = run_cli("doctor", cwd=repo)
    assert res.returncode == 1
    state, detail = _lines(res.stdout)["git"]
    assert state == "FAIL" and "merge or rebase is in progress" in detail


def _bwrap_works() -> bool:
    return bool(shutil.which("bwrap")) and subprocess.run(
        ["bwrap", "--ro-bind", "/", "/", "--", "/bin/true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _bwrap_works(), reason="bubblewrap missing or unable to make a sandbox here")
def test_sandboxed_generator_is_checked_inside_the_sandbox(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    tool = tmp_path / "tools" / "claude"
    tool.parent.mkdir()
    tool.write_text('#!/bin/sh\n[ -w "$HOME" ] || { echo "cannot write $HOME" >&2; exit 3; }\necho 1.0\n')
    tool.chmod(0o755)
    repo = _repo(make_repo, generator=f"generator: {{kind: claude, command: {tool}}}", sandbox="bwrap")
    res = run_cli("doctor", cwd=repo)
    assert res.returncode == 1, res.stdout + res.stderr
    lines = _lines(res.stdout)
    assert lines["sandbox"][0] == "ok"
    assert lines["generator"][0] == "FAIL" and "cannot start inside the sandbox" in lines["generator"][1]
    assert lines["verifier"][0] == "ok"


def test_untouched_template_is_a_program_problem_and_not_measured(make_repo) -> None:  # type: ignore[no-untyped-def]
    # `run` and `verify` refuse a program.md still holding `autoloop init`'s placeholders;
    # doctor used to measure it anyway and blame the missing agent and the guards instead
    repo = make_repo({"README.md": "x\n"})
    assert run_cli("init", "--template", "speed", cwd=repo).returncode == 0
    res = run_cli("doctor", cwd=repo)
    assert res.returncode == 1, res.stdout + res.stderr
    program = [ln for ln in res.stdout.splitlines() if ln.split()[:2] == ["FAIL", "program"]]
    text = (repo / "program.md").read_text().splitlines()
    line = next(i for i, ln in enumerate(text, 1) if ln.startswith("  command: python bench/produce.py"))
    assert any(f"program.md:{line}: verifier.command is still the template's placeholder" in ln
               for ln in program), res.stdout
    assert any("the instructions still hold the template's placeholder" in ln for ln in program), res.stdout
    assert _lines(res.stdout)["verifier"] == ("FAIL", "not measured: program.md still holds the "
                                              "template's placeholders (the lines marked EDIT)")


def test_an_uncommitted_program_md_is_not_warned_about(make_repo) -> None:  # type: ignore[no-untyped-def]
    # `autoloop init` writes program.md untracked and the run reads it from the checkout:
    # "a run starts from HEAD and does not see them" was not true of it
    repo = _repo(make_repo)
    (repo / ".gitignore").write_text("experiments.md\nresults.tsv\n.autoloop/\n")
    git(repo, "commit", "-qam", "program.md no longer ignored")
    res = run_cli("doctor", cwd=repo)
    assert res.returncode == 0, res.stdout + res.stderr
    assert _lines(res.stdout)["git"][0] == "ok" and _lines(res.stdout)["git"][1].endswith(", clean"), res.stdout
    (repo / "notes.txt").write_text("x\n")
    state, detail = _lines(run_cli("doctor", cwd=repo).stdout)["git"]
    assert state == "warn" and "1 uncommitted or untracked path (notes.txt)" in detail, detail


def test_a_missing_verifier_script_is_a_program_problem_and_not_measured(make_repo) -> None:  # type: ignore[no-untyped-def]
    # `run` and `verify` refuse it (exit 2); doctor says the same instead of measuring a failure
    repo = _repo(make_repo, verifier=f"{PY} scroe.py")
    refs = git(repo, "for-each-ref")
    res = run_cli("doctor", cwd=repo)
    assert res.returncode == 1, res.stdout + res.stderr
    assert _lines(res.stdout)["program"] == ("FAIL", "program.md:4: verifier.command runs scroe.py, which is "
                                             "neither in your checkout nor in HEAD (did you mean score.py?); "
                                             "commands run from the repository root; `run` refuses the file "
                                             "until it is fixed")
    assert _lines(res.stdout)["verifier"] == ("FAIL", "not measured: a file its commands run is missing (above)")
    _unchanged(repo, refs)


def test_what_a_failing_guard_said_is_quoted_without_terminal_escapes(make_repo) -> None:  # type: ignore[no-untyped-def]
    # pytest with `addopts = --color=yes` (humanize, among others) ends on a coloured line
    said = "\\x1b[31m\\x1b[1m5 errors\\x1b[0m\\x1b[31m in 0.61s\\x1b[0m"
    repo = _repo(make_repo, extra=f"guards: [{{name: tests, command: \"{PY} -c 'print(\\\"{said}\\\"); raise SystemExit(2)'\"}}]\n")
    res = run_cli("doctor", cwd=repo)
    assert res.returncode == 1, res.stdout + res.stderr
    state, detail = _lines(res.stdout)["guard"]
    assert state == "FAIL" and "\x1b" not in detail, repr(detail)
    assert " ".join(detail.split()).startswith("tests fails on HEAD (exit 2: 5 errors in 0.61s, ") and detail.endswith("s)"), \
        repr(detail)
    assert detail.count("5 errors in 0.61s") == 1, repr(detail)   # quoted once, not again as "it said"


def test_a_verifier_failure_quotes_its_last_line_once(make_repo) -> None:  # type: ignore[no-untyped-def]
    repo = _repo(make_repo, verifier=f"{PY} -c 'import sys; sys.exit(\"no GPU found\")'")
    state, detail = _lines(run_cli("doctor", cwd=repo).stdout)["verifier"]
    assert state == "FAIL" and detail == ("exit 1: no GPU found on HEAD — the baseline would fail the same way "
                                          "(try `autoloop verify`)"), detail
    text = (repo / "program.md").read_text()
    (repo / "program.md").write_text(text.replace('sys.exit("no GPU found")', 'print("done")'))
    state, detail = _lines(run_cli("doctor", cwd=repo).stdout)["verifier"]   # exit 0, no metric
    assert state == "FAIL" and "; it said: done" in detail, detail


def test_allowed_entry_that_can_match_nothing_is_a_warning(make_repo) -> None:  # type: ignore[no-untyped-def]
    repo = _repo(make_repo)
    text = (repo / "program.md").read_text().replace("allowed: [val.txt]", "allowed: [val.txt, \"src/**\"]")
    (repo / "program.md").write_text(text)
    res = run_cli("doctor", cwd=repo)
    assert res.returncode == 0, res.stdout + res.stderr          # a warning does not stop a run
    assert _lines(res.stdout)["program"] == ("warn", "program.md:3: allowed entry 'src/**': its folder 'src' "
                                             "does not exist: changes to the files you mean would be refused "
                                             "as violations; paths are relative to the repository root")
