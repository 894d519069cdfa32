"""When a failed sandboxed run counts as bwrap's set-up meeting a host that changed under it
(autoloop.isolation.failures.stale): only a path the line hid, gone from the host now, named by
bwrap's own words on the first line, and under no folder the line binds writable."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoloop.isolation.failures import stale
from autoloop.process.proc import ProcResult


def _failed(tmp_path: Path, said: str, code: int = 1) -> ProcResult:
    err = tmp_path / "verifier.err"
    err.write_text(said)
    return ProcResult(code, False, False, 0.01, tmp_path / "verifier.out", err, 0)


def _line(tmp_path: Path, *extra: str) -> list[str]:
    return ["bwrap", "--ro-bind", "/", "/", "--bind", str(tmp_path / "w"), str(tmp_path / "w"), *extra,
            "--", "/bin/sh", "-c", "python3 score.py"]


@pytest.mark.parametrize("hide,gone", [
    (["--ro-bind", "/dev/null", "{gone}/d.sock"], "{gone}/d.sock"),      # a host socket
    (["--tmpfs", "{gone}"], "{gone}"),                                   # a hidden folder
])
@pytest.mark.parametrize("verb", ["Can't mkdir parents for", "Can't create file at", "Can't mkdir"])
def test_a_hidden_path_gone_from_the_host_is_the_hosts_doing(tmp_path: Path, hide: list[str], gone: str,
                                                             verb: str) -> None:
    where = str(tmp_path / "gone")
    argv = _line(tmp_path, *(a.format(gone=where) for a in hide))
    said = f"bwrap: {verb} {gone.format(gone=where)}: Read-only file system\n"
    assert stale(argv, _failed(tmp_path, said))
    # the same words are not enough: the command's exit status, a path still there
    assert not stale(argv, _failed(tmp_path, said, code=2))
    (tmp_path / "gone").mkdir()
    (tmp_path / "gone" / "d.sock").write_text("")
    assert not stale(argv, _failed(tmp_path, said))


def test_what_the_line_does_not_hide_is_no_reason_to_start_again(tmp_path: Path) -> None:
    gone = str(tmp_path / "w" / "d.sock")   # under the writable bind: the command could remove it
    argv = _line(tmp_path, "--ro-bind", "/dev/null", gone)
    assert not stale(argv, _failed(tmp_path, f"bwrap: Can't create file at {gone}: Read-only file system\n"))
    words = str(tmp_path / "nowhere")       # in the command's words, after bwrap's "--"
    argv = [*_line(tmp_path), "--tmpfs", words]
    assert not stale(argv, _failed(tmp_path, f"bwrap: Can't mkdir {words}: Read-only file system\n"))
    other = str(tmp_path / "never-hidden")  # a path the line never named
    assert not stale(_line(tmp_path), _failed(tmp_path, f"bwrap: Can't mkdir {other}: Read-only file system\n"))
    hidden = str(tmp_path / "h.sock")       # bwrap's words not on the first line: the command's
    argv = _line(tmp_path, "--ro-bind", "/dev/null", hidden)
    assert not stale(argv, _failed(tmp_path, f"starting\nbwrap: Can't create file at {hidden}: x\n"))
