"""Black-box: two program files in one folder share `.autoloop/`; `log` and `report` of one of
them must show that program's runs, never another program's cycles under this one's goal."""

from __future__ import annotations

from pathlib import Path

from tests.scripts.e2e import PY, error_lines, git
from tests.test_e2e_badinput import VALID, _cli, _repo

PY_VALID = VALID.format(py=PY)


def _run(repo: Path, env: dict, program: str, tag: str) -> None:
    res = _cli(repo, env, "run", program, "--tag", tag, "--cycles", "1")
    assert res.returncode == 0, (res.stdout, res.stderr)


def test_log_and_report_pick_this_programs_run(tmp_path: Path) -> None:
    repo, env = _repo(tmp_path)
    (repo / "other.md").write_text(PY_VALID.replace("goal: Lower the score", "goal: The other goal"))
    (repo / "third.md").write_text(PY_VALID.replace("goal: Lower the score", "goal: Never run"))
    git(repo, "add", "-A", env=env)
    git(repo, "commit", "-qm", "two more programs", env=env)
    _run(repo, env, "program.md", "mine")
    _run(repo, env, "other.md", "theirs")        # the most recent run in the folder

    res = _cli(repo, env, "log")
    assert res.returncode == 0, res.stderr
    assert "autoloop/mine" in res.stdout and "Lower the score" in res.stdout, res.stdout
    assert "autoloop/theirs" not in res.stdout and "The other goal" not in res.stdout

    res = _cli(repo, env, "log", "other.md")
    assert res.returncode == 0, res.stderr
    assert "autoloop/theirs" in res.stdout and "The other goal" in res.stdout, res.stdout

    out = tmp_path / "r.html"
    res = _cli(repo, env, "report", "program.md", "-o", str(out))
    assert res.returncode == 0, res.stderr
    html = out.read_text()
    assert "Lower the score" in html and "The other goal" not in html

    # another program's tag, named explicitly: refused, pointing at the right file
    res = _cli(repo, env, "log", "program.md", "--tag", "theirs")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    errs = error_lines(res.stderr)
    assert len(errs) == 1 and "made with other.md" in errs[0], res.stderr
    assert "autoloop log other.md --tag theirs" in errs[0], errs[0]

    # a tag that does not exist: the message lists this program's runs, and only them
    res = _cli(repo, env, "log", "--tag", "nope")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    errs = error_lines(res.stderr)
    assert len(errs) == 1 and errs[0].endswith("its runs: mine"), res.stderr

    # clean without --tag offers this program's latest run, not the folder's
    res = _cli(repo, env, "clean", "program.md")
    assert "tag 'mine'" in res.stdout and "theirs" not in res.stdout, (res.stdout, res.stderr)

    # a program never run, next to others' runs: says so instead of showing theirs
    res = _cli(repo, env, "report", "third.md")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    errs = error_lines(res.stderr)
    assert len(errs) == 1 and "no run of third.md" in errs[0], res.stderr
    assert "autoloop report other.md" in errs[0], errs[0]
