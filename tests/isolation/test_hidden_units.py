"""Which places are hidden (autoloop.isolation.hidden), without a sandbox: the homes, links,
places that do not exist, globs, the host's socket table, and where they go in bwrap's argv."""

from __future__ import annotations

import os
import socket

from autoloop.base.specs import SandboxSpec
from autoloop.isolation import hidden
from autoloop.isolation.sandbox import Bwrap


def test_places_exist_now_and_links_are_followed(tmp_path):
    home = tmp_path / "h"
    (home / ".aws").mkdir(parents=True)
    (home / ".netrc").write_text("x")
    real = tmp_path / "elsewhere"
    real.mkdir()
    (home / ".kube").symlink_to(real)
    (home / ".docker").symlink_to(tmp_path / "missing")          # dangling: nothing to hide
    got = dict(hidden.places(environ={"HOME": str(home)}))
    assert got[str(home / ".aws")] is True and got[str(home / ".netrc")] is False
    assert got[str(real)] is True
    assert not [p for p in got if p.startswith(str(home / ".ssh")) or "missing" in p]


def test_sandbox_hide_expands_tilde_and_one_level_globs(tmp_path, monkeypatch):
    home = tmp_path / "h"
    for name in ("a", "b"):
        (home / "code" / name).mkdir(parents=True)
        (home / "code" / name / ".env").write_text("K=1")
    monkeypatch.setenv("HOME", str(home))
    assert hidden.expand(["~/code/*/.env", "~/nothing*"]) == [str(home / "code" / n / ".env") for n in ("a", "b")]
    assert hidden.expand(["~/x"]) == [str(home / "x")]


def test_outermost_drops_what_an_outer_folder_hides():
    places = [("/h", True), ("/h/.ssh", True), ("/h/.netrc", False), ("/hx", True)]
    assert hidden.outermost(places) == [("/h", True), ("/hx", True)]


def test_homes_include_the_sudo_users(monkeypatch):
    env = {"HOME": "/nonexistent-home"}
    assert "/nonexistent-home" not in hidden.homes(env)
    if os.getuid() == 0:
        assert "/root" in hidden.homes({**env, "SUDO_USER": "nobody-such-user"})


def test_host_sockets_reads_the_kernels_table(tmp_path):
    sock = socket.socket(socket.AF_UNIX)
    path = tmp_path / "s.sock"
    sock.bind(str(path))
    try:
        table = tmp_path / "unix"
        table.write_text("Num       RefCount Protocol Flags    Type St Inode Path\n"
                         f"0000: 00000002 00000000 00010000 0001 01 1 {path}\n"
                         "0000: 00000002 00000000 00010000 0001 01 2 @/tmp/.X11-unix/X0\n"
                         f"0000: 00000002 00000000 00010000 0001 01 3 {tmp_path / 'gone.sock'}\n"
                         f"0000: 00000002 00000000 00010000 0001 01 4 {table}\n"
                         "0000: 00000002 00000000 00010000 0001 01 5\n")
        assert hidden.host_sockets(table=str(table)) == [str(path)]
        assert hidden.host_sockets([str(tmp_path)], table=str(table)) == []
        assert str(path) in hidden.host_sockets()     # the real table lists it too
    finally:
        sock.close()


def test_the_places_come_after_the_private_folders_and_before_every_bind(tmp_path, monkeypatch):
    home = tmp_path.parent / (tmp_path.name + "-home")
    (home / ".ssh").mkdir(parents=True)
    (home / ".netrc").write_text("x")
    monkeypatch.setenv("HOME", str(home))
    wt = tmp_path / "wt"
    wt.mkdir()
    argv = Bwrap(SandboxSpec(kind="bwrap", hide=(str(home / "mine"),)), executable="/usr/bin/bwrap").argv(
        "true", workdir=wt)
    ssh, netrc = argv.index(str(home / ".ssh")), argv.index(str(home / ".netrc"))
    assert argv[ssh - 1] == "--tmpfs" and argv[netrc - 2:netrc] == ["--ro-bind", "/dev/null"]
    assert argv.index("/tmp") < ssh < argv.index("--bind")
    assert str(home / "mine") not in argv       # does not exist: nothing to hide


def test_sandbox_writable_shows_a_hidden_place_again(tmp_path, monkeypatch):
    home = tmp_path.parent / (tmp_path.name + "-home2")
    (home / ".claude").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    wt = tmp_path / "wt"
    wt.mkdir()
    argv = Bwrap(SandboxSpec(kind="bwrap", writable=("~/.claude",)), executable="/usr/bin/bwrap").argv("true", workdir=wt)
    spot = str(home / ".claude")
    hidden_at = [i for i, a in enumerate(argv) if a == spot and argv[i - 1] == "--tmpfs"]
    shown_at = [i for i, a in enumerate(argv) if a == spot and argv[i - 2] == "--bind"]
    assert hidden_at and shown_at and hidden_at[0] < shown_at[0]
