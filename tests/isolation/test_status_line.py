"""Whether a sandboxed command started is bwrap's word: its status descriptor (--json-status-fd)
holds the command's exit code only once bwrap has set the sandbox up and started it. A set-up that
failed (a hidden host socket gone before its mount point was made) is started again; a command
that failed, whatever it printed, is not."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from autoloop.base.specs import SandboxSpec
from autoloop.isolation.sandbox import Bwrap, Confinement, status_line
from autoloop.process import proc
from autoloop.process.line import Line

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def _box(tmp_path: Path) -> Confinement:
    wt = tmp_path / "wt"
    wt.mkdir(exist_ok=True)
    return Confinement(Bwrap(SandboxSpec(kind="bwrap")), tree=wt, checkout=None, path=os.environ["PATH"])


def _run(tmp_path: Path, line: Line) -> tuple[proc.ProcResult, bool]:
    try:
        res = proc.run(line.argv, cwd=tmp_path, env=dict(os.environ), timeout=30, log_stem=tmp_path / "logs" / "x",
                       pass_fds=line.fds)
        return res, line.started()
    finally:
        line.close()


def test_a_command_that_ran_and_failed_started(tmp_path: Path) -> None:
    box = _box(tmp_path)
    said = "echo \"bwrap: Can't mkdir parents for /x/d.sock: Read-only file system\" >&2; exit 1"
    res, started = _run(tmp_path, box.line(said))
    assert res.exit_code == 1 and started


def test_a_command_cannot_write_bwraps_status(tmp_path: Path) -> None:
    box = _box(tmp_path)
    line = box.line("true")
    fd = line.fds[0]
    line.close()
    forging = box.line(f"echo '{{ \"exit-code\": 0 }}' >&{fd}; exit 1")
    assert forging.fds == (fd,)   # the same number, for the test: the sandbox has no such descriptor
    res, started = _run(tmp_path, forging)
    assert res.exit_code != 0 and "Bad fd number" in res.stderr_tail() and started


def test_a_setup_that_failed_did_not_start_the_command(tmp_path: Path) -> None:
    box = _box(tmp_path)
    line = box.line("echo ran")
    at = line.argv.index("--")   # after the root's bind: a mount point the read-only root cannot take
    gone = f"/autoloop-test-gone-{os.getpid()}/d.sock"   # on the read-only root, not the private /tmp
    assert not os.path.lexists(os.path.dirname(gone))
    broken = Line([*line.argv[:at], "--ro-bind", "/dev/null", gone, *line.argv[at:]],
                  line.fds, line.started, line.close)
    res, started = _run(tmp_path, broken)
    assert res.exit_code == 1 and "Can't mkdir parents" in res.stderr_tail() and not started
    assert res.stdout_path.read_text() == ""


def test_a_line_with_no_bwrap_option_is_left_as_it_is() -> None:
    line = status_line(["sh", "-c", "true"])
    assert line.argv == ["sh", "-c", "true"] and line.fds == () and line.started()


def test_without_a_memfd_every_run_counts_as_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel or a container that refuses memfd_create: the line runs as it is, never restarted."""
    box = _box(tmp_path)

    def refused(*_: object) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "memfd_create", refused)
    line = box.line("exit 1")
    assert "--json-status-fd" not in line.argv and line.fds == ()
    res, started = _run(tmp_path, line)
    assert res.exit_code == 1 and started
