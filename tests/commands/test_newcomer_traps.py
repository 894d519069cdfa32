"""A newcomer's path, as tried on a real project: each message says what is wrong in the user's
words and what to do (issue 25), run through the real CLI on real repositories."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import git, run_cli

PROGRAM = """\
---
goal: Lower the time
allowed: [a.py]
verifier:
  command: {command}
  metric: {metric}
  direction: minimize
---
Make a.py faster.
"""


def write(repo: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)


def test_verify_without_a_commit_says_so_not_that_the_command_is_a_placeholder(make_repo) -> None:
    repo = make_repo({"a.py": "x = 1\n", "program.md": PROGRAM.format(
        command="python3 bench/run.py", metric="seconds")}, commit=False)
    res = run_cli("verify", "program.md", cwd=repo)
    assert res.returncode == 2, res.stderr
    assert "the repository has no commit yet" in res.stderr
    assert "commit your files first: git add -A && git commit -m start" in res.stderr
    assert "placeholder" not in res.stderr


def test_a_users_own_missing_script_is_not_called_the_templates_placeholder(make_repo) -> None:
    repo = make_repo({"a.py": "x = 1\n", "program.md": PROGRAM.format(
        command="python3 bench/run.py", metric="seconds")})
    res = run_cli("verify", "program.md", cwd=repo)
    assert res.returncode == 2, res.stderr
    assert "placeholder" not in res.stderr
    assert ("program.md:5: verifier.command runs bench/run.py, which is neither in your checkout "
            "nor in HEAD") in res.stderr


def test_a_missing_generator_script_is_called_missing_not_unexecutable(make_repo) -> None:
    repo = make_repo({"a.py": "x = 1\n", "score.py": "print('seconds: 1')\n", "program.md": PROGRAM.format(
        command="python3 score.py", metric="seconds").replace(
        "---\nMake", "generator: {kind: command, command: ./agent.sh}\n---\nMake")})
    res = run_cli("run", "program.md", "--tag", "t", "--cycles", "1", cwd=repo)
    assert res.returncode != 0
    assert ("program.md:8: generator.command: no such file ./agent.sh (neither in your checkout nor in HEAD; paths "
            "are relative to the repository root); fix generator.command, or create and commit the "
            "script") in res.stderr, res.stderr
    assert "chmod" not in res.stderr and "bwrap" not in res.stderr
    absolute = repo / "nowhere" / "agent.sh"
    (repo / "program.md").write_text((repo / "program.md").read_text().replace("./agent.sh", str(absolute)))
    git(repo, "commit", "-qam", "absolute")
    res = run_cli("run", "program.md", "--tag", "u", "--cycles", "1", cwd=repo)
    assert f"generator.command: no such file {absolute}; fix generator.command" in res.stderr, res.stderr
    assert "chmod" not in res.stderr


def test_a_wrong_metric_name_gets_a_did_you_mean_from_what_the_verifier_printed(make_repo) -> None:
    repo = make_repo({"a.py": "x = 1\n", "score.py": "print('warming up')\nprint('seconds: 0.42')\n",
                      "program.md": PROGRAM.format(command="python3 score.py", metric="secs")})
    res = run_cli("verify", "program.md", cwd=repo)
    assert res.returncode == 1, res.stderr
    assert ("no line 'secs: NUMBER' in the verifier's output; it printed 'seconds: 0.42' — did you "
            "mean verifier.metric: seconds (program.md:6)?") in res.stdout, res.stdout


def test_a_verifier_that_printed_nothing_is_told_so_with_its_stderr(make_repo) -> None:
    repo = make_repo({"a.py": "x = 1\n", "quiet.py": "", "noisy.py":
                      "import sys\nprint('reading config.toml', file=sys.stderr)\n"
                      "print('no workload given', file=sys.stderr)\n",
                      "program.md": PROGRAM.format(command="python3 quiet.py", metric="seconds")})
    res = run_cli("verify", "program.md", cwd=repo)
    assert res.returncode == 1, res.stderr
    assert ("no line 'seconds: NUMBER' in the verifier's output; it printed nothing on stdout (nor "
            "anything on stderr)") in res.stdout, res.stdout
    (repo / "program.md").write_text(PROGRAM.format(command="python3 noisy.py", metric="seconds"))
    git(repo, "commit", "-qam", "noisy")
    res = run_cli("verify", "program.md", cwd=repo)
    assert ("no line 'seconds: NUMBER' in the verifier's output; it printed nothing on stdout; its "
            "stderr ends with 'no workload given'") in res.stdout, res.stdout


def test_a_resumed_tag_with_its_patience_spent_says_how_to_go_on(make_repo) -> None:
    program = PROGRAM.format(command="python3 score.py", metric="seconds").replace(
        "---\nMake", "generator: {kind: command, command: ./gen.sh}\nstop:\n  patience: 2\n---\nMake")
    repo = make_repo({"a.py": "x = 1\n", "score.py": "import a\nprint(f'seconds: {a.x}')\n",
                      "gen.sh": "#!/bin/sh\necho 'x = 9' > a.py\necho 'Hypothesis: nine'\n",
                      "program.md": program, ".gitignore": "__pycache__/\n"}, commit=False)
    (repo / "gen.sh").chmod(0o755)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "start")
    first = run_cli("run", "program.md", "--tag", "t", "--cycles", "5", cwd=repo)
    assert "patience exhausted (2 cycles without a keep)" in first.stdout + first.stderr
    assert "to go on" not in first.stdout + first.stderr        # this run used the patience
    again = run_cli("run", "program.md", "--tag", "t", "--cycles", "50", cwd=repo)
    said = again.stdout + again.stderr
    assert ("patience exhausted (2 cycles without a keep) before this run started: to go on, raise "
            "stop.patience (2, program.md:10), or start afresh with a new --tag") in said, said


def _two_runs(make_repo) -> Path:
    """Tag 'a' keeps one commit; tag 'b' (the most recent) keeps none and renders the journal."""
    program = PROGRAM.format(command="python3 score.py", metric="seconds").replace(
        "---\nMake", "generator: {kind: command, command: ./gen.sh}\n---\nMake")
    repo = make_repo({"a.py": "x = 5\n", "score.py": "import a\nprint(f'seconds: {a.x}')\n",
                      "gen.sh": "#!/bin/sh\necho 'x = 1' > a.py\necho 'Hypothesis: one'\n",
                      "program.md": program, ".gitignore": "__pycache__/\n"}, commit=False)
    (repo / "gen.sh").chmod(0o755)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "start")
    assert run_cli("run", "program.md", "--tag", "a", "--cycles", "1", cwd=repo).returncode == 0
    (repo / "gen.sh").write_text("#!/bin/sh\necho 'x = 9' > a.py\necho 'Hypothesis: nine'\n")
    git(repo, "commit", "-qam", "a worse generator")
    assert run_cli("run", "program.md", "--tag", "b", "--cycles", "1", cwd=repo).returncode == 0
    return repo


def test_clean_yes_without_a_tag_removes_nothing_and_listings_say_what_is_true(make_repo) -> None:
    repo = _two_runs(make_repo)
    logs = sorted(p.relative_to(repo) for p in (repo / ".autoloop").rglob("*"))
    res = run_cli("clean", "program.md", "--yes", cwd=repo)
    assert res.returncode == 2, res.stdout + res.stderr
    assert ("clean --yes needs the tag named: add --tag b (the most recent run here), or leave out "
            "--yes to see the listing first") in res.stderr
    assert sorted(p.relative_to(repo) for p in (repo / ".autoloop").rglob("*")) == logs
    res = run_cli("clean", "program.md", "--tag", "a", "--yes", cwd=repo)
    assert res.returncode == 0, res.stderr
    # experiments.md and results.tsv are b's (rendered last), not a's
    assert "keeps the journal (.autoloop/a/ledger.jsonl): --journal removes it" in res.stdout, res.stdout
    assert "keeps branch autoloop/a at " in res.stdout and "(with 1 kept commit)" in res.stdout
    res = run_cli("clean", "program.md", "--tag", "b", "--yes", cwd=repo)
    assert ("keeps the journal (.autoloop/b/ledger.jsonl, experiments.md, results.tsv): --journal "
            "removes it") in res.stdout, res.stdout
    assert "(nothing kept on it)" in res.stdout and "kept commits" not in res.stdout, res.stdout
