"""Temporary folders of autoloop processes killed with kill -9: named after their process, found by
`autoloop clean` (and mentioned by `doctor`) once it is gone, and removed, exactly those: never
a live process's folder, never one autoloop did not name. Each test has its own TMPDIR."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.scripts.e2e import PY, git, isolated_env, kill_marked, make_project, wait_for

# a process that makes its folder as autoloop does, says where, and lives on
HOLDER = ("import sys, time; from autoloop.base.walk import temp_dir; "
          "print(temp_dir(sys.argv[1]), flush=True); time.sleep(600)")


def _holder(env: dict[str, str], kind: str) -> tuple[subprocess.Popen[str], Path]:
    proc = subprocess.Popen([PY, "-c", HOLDER, kind], env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, Path(proc.stdout.readline().strip())


def _kill9(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def _clean(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "autoloop", "clean", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)


def _private_tmp(env: dict[str, str], base: Path) -> Path:
    tmp = base / "tmpdir"
    tmp.mkdir()
    env["TMPDIR"] = str(tmp)
    return tmp


def test_clean_removes_the_folders_of_gone_processes_and_nothing_else(tmp_path: Path) -> None:
    env = isolated_env(tmp_path)
    tmp = _private_tmp(env, tmp_path)
    dead, dead_dir = _holder(env, "verify")
    live, live_dir = _holder(env, "agent-state")
    try:
        (dead_dir / "logs").mkdir()
        (dead_dir / "logs" / "verifier.out").write_bytes(b"x" * 300_000)
        _kill9(dead)
        assert dead_dir.name.startswith(f"autoloop-verify-{dead.pid}-")
        # the live holder's pid with another start time: its owner was an earlier process
        start, here = int(live_dir.name.split("-")[4]), live_dir.name.split("-")[5]
        reused = tmp / f"autoloop-gate-{live.pid}-{start - 5}-{here}-abcd1234"
        reused.mkdir()
        # what clean must leave: a folder of an older autoloop (no owner in its name), someone
        # else's folder, a dead pid's folder made in another container or boot (its pid means
        # nothing here), and a link and a file named like a dead process's folder
        other = "00000000" if here != "00000000" else "11111111"
        keep = [tmp / "autoloop-verify-k3j_x9q2", tmp / "pytest-of-someone", tmp / "target",
                tmp / f"autoloop-verify-{dead.pid}-{start - 5}-{other}-abcd1234"]
        for p in keep:
            p.mkdir()
        dead_name = dead_dir.name.rsplit("-", 1)[0]
        (tmp / f"{dead_name}-link0000").symlink_to(tmp / "target")
        (tmp / f"{dead_name}-file0000").write_text("x")
        keep += [tmp / f"{dead_name}-link0000", tmp / f"{dead_name}-file0000", live_dir]

        elsewhere = tmp_path / "elsewhere"        # no program.md: only the temporary folders
        elsewhere.mkdir()
        asked = _clean(env, elsewhere)
        assert asked.returncode == 2 and "add --yes" in asked.stderr, asked.stderr
        assert dead_dir.is_dir() and reused.is_dir()
        res = _clean(env, elsewhere, "--yes")
        assert res.returncode == 0, res.stderr
        assert f"2 temporary folders (0.286 MB) in {tmp} left by autoloop processes that are gone" in res.stdout
        first = res.stdout.split("\n", 1)[0]
        assert first == (f"autoloop clean: no run here (cannot read program file {elsewhere / 'program.md'}: "
                         "no such file) — will remove:"), res.stdout
        assert not dead_dir.exists() and not reused.exists()
        assert sorted(tmp.iterdir()) == sorted(keep)
        assert (live_dir.is_dir() and live.poll() is None)
        # nothing left to remove and no run here: the error it always gave
        again = _clean(env, elsewhere, "--yes")
        assert again.returncode == 2 and again.stdout == "", again.stdout
        assert again.stderr == (f"autoloop: error: cannot read program file {elsewhere / 'program.md'}: "
                                "no such file\n"), again.stderr
    finally:
        _kill9(live)


def test_clean_of_a_tag_takes_a_killed_verify_and_keeps_a_live_siblings_folder(tmp_path: Path) -> None:
    p = make_project(tmp_path, {}, files={"val.txt": "slow\n"}, guards=False)
    tmp = _private_tmp(p.env, tmp_path)
    # a live sibling outside the test's process net (kill_marked ends what carries E2E_ID)
    live, live_dir = _holder({k: v for k, v in p.env.items() if k != "E2E_ID"}, "verify")
    verify = subprocess.Popen([PY, "-m", "autoloop", "verify", "program.md"], cwd=p.repo, env=p.env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert wait_for((p.out / "verifier-started").exists, 60, 0.05)
        os.killpg(verify.pid, signal.SIGKILL)
        verify.wait()
        kill_marked(p.env)
        # the seccomp filters' folder is one per user, never a process's leftover
        filters = [x for x in tmp.iterdir() if x.name.startswith("autoloop-filters-")]
        left = [x for x in tmp.iterdir() if x != live_dir and x not in filters]
        assert [re.sub(r"-\d+-[0-9a-f]{8}-\w+$", "", x.name) for x in left] == [f"autoloop-verify-{verify.pid}"], left
        (p.repo / "val.txt").write_text("40\n")          # a verifier that answers, for doctor and run
        git(p.repo, "commit", "-qam", "a score", env=p.env)
        # doctor mentions it (a warning: its exit code stays) and changes nothing
        doctor = p.cli("doctor", "program.md")
        assert doctor.returncode == 0, doctor.stdout + doctor.stderr
        assert "warn  temp" in doctor.stdout and "1 temporary folder (" in doctor.stdout, doctor.stdout
        assert "`autoloop clean` removes them" in doctor.stdout and left[0].is_dir()
        assert p.run("--cycles", "0").returncode == 0     # a tag to clean; the run's own folders went
        res = p.cli("clean", "program.md", "--tag", p.tag, "--yes")
        assert res.returncode == 0, res.stderr
        assert "1 temporary folder (" in res.stdout and f"tag '{p.tag}'" in res.stdout, res.stdout
        assert sorted(tmp.iterdir()) == sorted([live_dir, *filters]) and live.poll() is None
    finally:
        _kill9(live)
        if verify.poll() is None:
            os.killpg(verify.pid, signal.SIGKILL)
        kill_marked(p.env)


@pytest.mark.skipif(os.getuid() != 0, reason="only root can make a folder another user owns")
def test_clean_leaves_another_users_folder_of_a_gone_process(tmp_path: Path) -> None:
    env = isolated_env(tmp_path)
    tmp = _private_tmp(env, tmp_path)
    dead, dead_dir = _holder(env, "verify")
    _kill9(dead)
    theirs = dead_dir.with_name(dead_dir.name[:-8] + "their0000")
    theirs.mkdir()
    os.chown(theirs, 4242, 4242)
    res = _clean(env, tmp_path, "--yes")
    assert res.returncode == 0 and "1 temporary folder (" in res.stdout, res.stdout + res.stderr
    assert list(tmp.iterdir()) == [theirs]
