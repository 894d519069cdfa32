"""`sandbox.hide`: the shapes it takes and each refusal, one line naming the key (exit 2)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.program.test_program import error, parse, prog


@pytest.mark.parametrize("extra, expected", [
    ("sandbox: {hide: ~/.config/mytool}", ("~/.config/mytool",)),
    ("sandbox:\n  hide:\n    - /srv/keys\n    - ~/code/*/.env", ("/srv/keys", "~/code/*/.env")),
    ("sandbox: bwrap", ()),
])
def test_hide_shapes(extra, expected):
    assert parse(prog(extra)).sandbox.hide == expected


@pytest.mark.parametrize("extra, message", [
    ("sandbox: {hide: [relative/path]}", "program.md:8: sandbox.hide[0]: 'relative/path' must be absolute (or start with ~/)"),
    ("sandbox:\n  hide:\n    - /srv/x\n    - ~/**/.env",
     "program.md:11: sandbox.hide[1]: '~/**/.env': `**` is not supported (every sandbox would walk the whole "
     "tree to match it); name the folders, or use one `*` per level"),
    ("sandbox: {hide: [/]}", "program.md:8: sandbox.hide[0]: '/' would hide the whole file system; name the folders or files to hide"),
    ("sandbox: {hide: [/repo/secrets.txt]}",
     "program.md:8: sandbox.hide[0]: '/repo/secrets.txt' lies inside the repository, whose files every sandbox "
     "sees through its own tree; keep it out of the repository (then hide it), or list it in `forbidden` so the "
     "generator may not change it"),
    ("sandbox: {writable: [/srv/cache], hide: [/srv/cache/token]}",
     "program.md:8: sandbox.hide[0]: '/srv/cache/token' lies inside sandbox.writable '/srv/cache', which every "
     "sandbox shows over it; hide a path outside it, or narrow that path"),
    ("sandbox: {hide: 3}", "program.md:8: sandbox.hide"),
])
def test_hide_refusals(extra, message):
    assert error(prog(extra)).startswith(message)


def test_the_cli_says_it_in_one_line_with_exit_2(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "program.md").write_text(prog("sandbox: {hide: [~/**/.env]}"))
    res = subprocess.run([sys.executable, "-m", "autoloop", "run", "program.md", "--tag", "t"], cwd=repo,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    assert "program.md:8: sandbox.hide[0]: '~/**/.env': `**` is not supported" in res.stderr
    assert "Traceback" not in res.stderr


def test_unix_sockets_is_a_boolean():
    assert parse(prog("sandbox: {unix_sockets: true}")).sandbox.unix_sockets is True
    assert parse(prog("sandbox: bwrap")).sandbox.unix_sockets is False
    assert error(prog("sandbox: {unix_sockets: maybe}")).startswith("program.md:8: sandbox.unix_sockets")
