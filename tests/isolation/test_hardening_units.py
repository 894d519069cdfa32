"""Unit tests for the hardening modules: the scrubbed environment, the scope rules for implicit
code and module shadows, leftovers and limits in proc, the verification tree's blob check, the
stat watch and the bwrap command line."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from autoloop.process import envs
from autoloop.process import leftovers, proc, rlimits
from autoloop.program.reader import SandboxSpec
from autoloop.isolation.sandbox import Bwrap, SandboxUnavailable
from autoloop.isolation.egress.proxy import EgressProxy
from autoloop.program.scope_rules import ScopeRules, implicit_code
from autoloop.disk.watch import StatTree, Watch, changed_paths, is_injection
from autoloop.git.workspace import Worktree

# ---- envs ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONINSPECT",
                                  "PYTHONBREAKPOINT", "PYTHONDONTWRITEBYTECODE", "PYTEST_ADDOPTS", "PYTEST_PLUGINS", "LD_PRELOAD",
                                  "LD_LIBRARY_PATH", "LD_AUDIT", "DYLD_INSERT_LIBRARIES", "BASH_ENV", "ENV",
                                  "SHELLOPTS", "PS4", "BASH_FUNC_ls%%", "NODE_OPTIONS", "RUBYOPT", "PERL5OPT",
                                  "PERL5LIB", "JAVA_TOOL_OPTIONS", "COVERAGE_PROCESS_START", "GIT_DIR",
                                  "GIT_EXEC_PATH", "OPENSSL_CONF", "TMPDIR"])
def test_unsafe_variables(name):
    assert envs.unsafe(name)


@pytest.mark.parametrize("name", ["HOME", "PATH", "CUDA_VISIBLE_DEVICES", "HF_HOME", "VIRTUAL_ENV", "LANG",
                                  "PYTHONUNBUFFERED", "PYTHONHASHSEED", "PYTHONIOENCODING", "OMP_NUM_THREADS"])
def test_safe_variables(name):
    assert not envs.unsafe(name)


def test_scrubbed_environment(tmp_path):
    base = {"PATH": f".:bin::/usr/bin:{tmp_path}/wt/bin:/bin", "PYTHONPATH": "/evil", "HOME": "/h",
            "AUTOLOOP_CYCLE": "3", "GIT_CONFIG_GLOBAL": "/g", "GIT_DIR": "/x", "TMPDIR": "/shared"}
    env = envs.scrubbed(base, scratch=tmp_path / "s", untrusted=[tmp_path / "wt"])
    assert env["PATH"] == "/usr/bin:/bin"
    assert "PYTHONPATH" not in env and "GIT_DIR" not in env
    assert env["HOME"] == "/h" and env["AUTOLOOP_CYCLE"] == "3" and env["GIT_CONFIG_GLOBAL"] == "/g"
    assert env["PYTHONNOUSERSITE"] == "1"
    assert env["TMPDIR"] == str(tmp_path / "s" / "tmp") and Path(env["TMPDIR"]).is_dir()
    assert Path(env["PYTHONPYCACHEPREFIX"]).is_dir()


def test_measurement_env_is_fresh_and_removed(tmp_path):
    with envs.measurement_env({"PATH": "/usr/bin"}, parent=tmp_path) as a:
        Path(a["TMPDIR"], "x").write_text("x")
        with envs.measurement_env({"PATH": "/usr/bin"}, parent=tmp_path) as b:
            assert a["TMPDIR"] != b["TMPDIR"] and not any(Path(b["TMPDIR"]).iterdir())
    assert not Path(a["TMPDIR"]).exists()


def test_generator_env_writes_no_bytecode():
    env = envs.generator_env({"GIT_DIR": "/x", "GIT_AUTHOR_NAME": "a", "PATH": "/bin"})
    assert env == {"GIT_AUTHOR_NAME": "a", "PATH": "/bin", "PYTHONDONTWRITEBYTECODE": "1"}


@pytest.mark.parametrize("name", ["AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "GITHUB_TOKEN", "GH_TOKEN",
                                  "ACTIONS_ID_TOKEN_REQUEST_TOKEN", "HF_TOKEN", "PGPASSWORD", "TWINE_PASSWORD",
                                  "GOOGLE_APPLICATION_CREDENTIALS", "AZURE_CLIENT_SECRET", "KAGGLE_KEY",
                                  "STRIPE_API_KEY", "vault_token"])
def test_the_generator_gets_no_credential_but_its_models(name):
    kept = {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_AUTH_TOKEN": "k", "CLAUDE_CODE_OAUTH_TOKEN": "k",
            "OPENAI_API_KEY": "k", "OPENROUTER_API_KEY": "k", "GEMINI_API_KEY": "k",
            "TOKENIZERS_PARALLELISM": "false", "HF_HOME": "/h", "PATH": "/bin"}
    assert envs.generator_env({**kept, name: "secret"}) == {**kept, "PYTHONDONTWRITEBYTECODE": "1"}


# ---- scope rules ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path,word", [
    ("conftest.py", "conftest"), ("tests/conftest.py", "conftest"), ("src/sitecustomize.py", "sitecustomize"),
    ("usercustomize.py", "usercustomize"), ("lib/x.pth", ".pth"), ("src/__pycache__/m.cpython-311.pyc", "bytecode"),
    ("m.pyc", "bytecode"), ("a/__pycache__", "bytecode"),
])
def test_implicit_code(path, word):
    assert word in (implicit_code(path) or "")


@pytest.mark.parametrize("path", ["src/model.py", "conftest_helpers.py", "pth.txt", "README.md"])
def test_not_implicit_code(path):
    assert implicit_code(path) is None


def test_scope_rules_literal_allow_and_bytecode_never():
    rules = ScopeRules(["src/**", "tests/conftest.py", "m.pyc"], (), {"eval/score.py": "used by the verifier"})
    assert rules.allows("src/model.py")
    assert not rules.allows("src/conftest.py")
    assert rules.allows("tests/conftest.py")  # named exactly
    rules2 = ScopeRules(["tests/**", "tests/conftest.py"])
    assert rules2.allows("tests/conftest.py") and not rules2.allows("tests/sub/conftest.py")
    assert not rules.allows("m.pyc")  # bytecode: never, even when named


@pytest.mark.parametrize("path", ["eval/score/__init__.py", "eval/score", "eval/score.so",
                                  "eval/score.cpython-311-x86_64-linux-gnu.so", "eval/score.abi3.so", "eval/score.pyc"])
def test_module_shadows_refused(path):
    rules = ScopeRules(["eval/**"], ["eval/score.py"], {"eval/score.py": "used by the verifier"})
    assert "shadows" in (rules.why_not(path) or "")


@pytest.mark.parametrize("path", ["eval/scores.py", "eval/score_utils.py", "eval/other/score.txt"])
def test_not_shadows(path):
    rules = ScopeRules(["eval/**"], ["eval/score.py"], {"eval/score.py": "used by the verifier"})
    assert rules.allows(path)


# ---- proc: leftovers and limits ------------------------------------------------------------------------


def _run(tmp_path, command, **kw):
    kw.setdefault("timeout", 20)
    return proc.run(command, cwd=tmp_path, env=dict(os.environ), log_stem=tmp_path / "log" / "c", **kw)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.mark.parametrize("how", ["setsid env -i", "double-fork env -i", "nohup setsid"])
def test_escapees_are_adopted_killed_and_counted(tmp_path, how):
    pidfile = tmp_path / "pid"
    if how == "setsid env -i":
        cmd = f"setsid env -i /bin/sh -c 'echo $$ > {pidfile}; exec sleep 60' &"
    elif how == "double-fork env -i":
        cmd = f"( ( env -i /bin/sh -c 'echo $$ > {pidfile}; exec sleep 60' & ) & ) ; sleep 0.1"
    else:
        cmd = f"nohup setsid /bin/sh -c 'echo $$ > {pidfile}; exec sleep 60' >/dev/null 2>&1 &"
    before = leftovers.leftovers_killed()
    res = _run(tmp_path, cmd + "\nwhile [ ! -s " + str(pidfile) + " ]; do sleep 0.01; done")
    assert res.exit_code == 0
    assert res.leftovers_killed >= 1 and leftovers.leftovers_killed() - before >= 1
    assert not _alive(int(pidfile.read_text()))


def test_a_clean_command_counts_no_leftover(tmp_path):
    before = leftovers.leftovers_killed()
    res = _run(tmp_path, "echo hi | cat; sleep 0.05")
    assert res.leftovers_killed == 0 and leftovers.leftovers_killed() == before


def test_timeout_leftovers_are_not_counted(tmp_path):
    before = leftovers.leftovers_killed()
    res = _run(tmp_path, "setsid sleep 60 & sleep 60", timeout=0.5)
    assert res.timed_out and leftovers.leftovers_killed() == before


def test_subreaper_is_off_again_after_a_command(tmp_path):
    _run(tmp_path, "true")
    assert not leftovers.is_subreaper()


def test_file_size_limit(tmp_path):
    res = _run(tmp_path, [sys.executable, "-c", "open('big', 'wb').write(b'x' * (3 << 20))"],
               limits=rlimits.Limits(file_bytes=1 << 20))
    assert (tmp_path / "big").stat().st_size == 1 << 20
    assert not res.ok


def test_output_limit(tmp_path):
    res = _run(tmp_path, [sys.executable, "-c", "import sys; sys.stdout.buffer.write(b'x' * (3 << 20))"],
               limits=rlimits.Limits(file_bytes=1 << 20))
    assert res.over_limit == "printed more than 1 MB" and not res.ok and res.exit_code is None


def test_disk_watchdog_stops_the_command(tmp_path):
    code = ("import os, time\nfor i in range(64):\n    f = open(f'f{i}', 'wb'); f.write(os.urandom(1 << 20)); "
            "f.flush(); os.fsync(f.fileno()); f.close()\ntime.sleep(30)\n")
    t0 = time.monotonic()
    res = _run(tmp_path, [sys.executable, "-c", code], limits=rlimits.Limits(disk_bytes=8 << 20, disk_path=tmp_path))
    assert res.over_limit == "took more than 8 MB of disk", res
    assert time.monotonic() - t0 < 15


def _writer(path: Path, mb: int, go: Path) -> subprocess.Popen:
    """Another process of the machine, started before the command (not of its tree), writing
    `mb` MB beside it once `go` exists, and holding them."""
    code = (f"import os, sys, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
            f"f = open({str(path)!r}, 'wb')\nfor i in range({mb}):\n"
            "    f.write(os.urandom(1 << 20)); f.flush()\nos.fsync(f.fileno()); print('written', flush=True)\n"
            "time.sleep(60)\n")
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def test_disk_another_process_fills_is_not_the_commands(tmp_path):
    # a training job's checkpoint landing on the same disk while the generator works: the
    # filesystem loses 32 MB, the command wrote nothing, and it is not stopped
    limits = rlimits.Limits(disk_bytes=8 << 20, disk_path=tmp_path)
    started = tmp_path / "started"
    code = f"import time, pathlib\npathlib.Path({str(started)!r}).touch()\ntime.sleep(2.5)\n"
    other = _writer(tmp_path / "checkpoint.bin", 32, started)
    try:
        with ThreadPoolExecutor(1) as pool:
            fut = pool.submit(_run, tmp_path, [sys.executable, "-c", code], limits=limits)
            assert other.stdout is not None and other.stdout.readline().strip() == "written"
            res = fut.result()
    finally:
        other.kill()
        other.wait()
    assert res.over_limit is None and res.ok, res


WRITES_32MB = ("import os, time\nf = open('big', 'wb')\nfor i in range(32):\n    f.write(os.urandom(1 << 20)); "
               "f.flush()\nos.fsync(f.fileno())\ntime.sleep(30)\n")


@pytest.mark.parametrize("ends", [False, True], ids=["command-waits", "command-ends"])
def test_disk_an_orphan_without_the_marker_writing_is_the_commands(tmp_path, ends):
    # the writer drops the marker from its environment and leaves the command's tree (a double
    # fork): it is ours by the subreaper, while it runs and once reaped
    spawn = ("import os, sys, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
             f"        os.execve(sys.executable, [sys.executable, '-c', {WRITES_32MB!r}], {{}})\n    os._exit(0)\n"
             + ("time.sleep(1.5)\n" if ends else "time.sleep(30)\n"))
    t0 = time.monotonic()
    res = _run(tmp_path, [sys.executable, "-c", spawn], limits=rlimits.Limits(disk_bytes=8 << 20, disk_path=tmp_path))
    assert res.over_limit == "took more than 8 MB of disk", res
    assert time.monotonic() - t0 < 15


def test_disk_on_a_filesystem_the_kernel_does_not_count_any_fall_is_the_commands(tmp_path):
    # tmpfs pages are never written out, so the kernel's tally cannot say whose they are: there
    # the whole fall counts, as it did before the tally was read
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    assert not rlimits._counted("/dev/shm")
    watch = rlimits.DiskWatch(rlimits.Limits(disk_bytes=8 << 20, disk_path=Path("/dev/shm")), own=lambda: 0)
    assert watch.own is None


class _Scripted(rlimits.DiskWatch):
    """The rule alone: free space and the command's own writes as the test says."""

    def __init__(self, own: list[int]) -> None:
        self.frees = [100 << 20]
        self.owns = own
        super().__init__(rlimits.Limits(disk_bytes=8 << 20, disk_path=Path("/")))
        self.own = lambda: self.owns[0]   # set here, whatever filesystem holds / on this machine

    def _free(self) -> int | None:
        return self.frees[0]


def test_disk_rule_stops_on_the_commands_share_of_the_fall_only():
    w = _Scripted([0])
    w.frees[0] = 70 << 20                        # others took 30 MB, the command nothing
    assert w.check(last=True) is None and w.excused == 30 << 20
    w.frees[0], w.owns[0] = 64 << 20, 6 << 20     # the command wrote 6 MB more: 36 fallen, 30 theirs
    assert w.check(last=True) is None
    w.frees[0], w.owns[0] = 60 << 20, 10 << 20    # 10 MB of its own: over
    assert w.check(last=True) == "took more than 8 MB of disk"
    unknown = _Scripted([0])
    unknown.own = lambda: None                   # a process of its own could not be read
    unknown.frees[0] = 90 << 20
    assert unknown.check(last=True) == "took more than 8 MB of disk"
    late = _Scripted([0])
    late.frees[0] = 80 << 20
    assert late.check() is None                  # others' share looked at, then once a second
    late.frees[0], late.owns[0] = 70 << 20, 10 << 20   # then 10 MB of its own
    assert late.check() is None and late.check(last=True) == "took more than 8 MB of disk"
    ended = _Scripted([0])
    ended.frees[0] = 68 << 20
    assert ended.check() is None                 # a tick: nothing of its own seen (its writer hid)
    ended.owns[0] = 32 << 20                     # the writer was reaped: the tally has it now
    assert ended.check(last=True) == "took more than 8 MB of disk"


# ---- the verification tree holds exactly the commit ---------------------------------------------------


def test_differs_from(tmp_path):
    def g(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)
    g("init", "-q")
    (tmp_path / "a").write_text("hi\n")
    (tmp_path / "x.sh").write_text("#!/bin/sh\n")
    os.chmod(tmp_path / "x.sh", 0o755)
    os.symlink("a", tmp_path / "l")
    g("add", "-A")
    g("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    w = Worktree(tmp_path, tmp_path / ".git", tmp_path)
    assert w.differs_from("HEAD") == []
    st = os.stat(tmp_path / "a")
    (tmp_path / "a").write_text("ho\n")                      # same size, same mtime
    os.utime(tmp_path / "a", ns=(st.st_atime_ns, st.st_mtime_ns))
    os.chmod(tmp_path / "x.sh", 0o644)
    os.unlink(tmp_path / "l")
    os.symlink("x.sh", tmp_path / "l")
    assert sorted(w.differs_from("HEAD")) == ["a (content)", "l (link target)", "x.sh (mode)"]
    os.unlink(tmp_path / "a")
    assert "a (missing)" in w.differs_from("HEAD")


def test_differs_from_in_nested_folders(tmp_path):
    """Files are looked at folder by folder (relative to an open folder): every kind of
    difference is still found at any depth, in the commit's order, and nothing is missed when a
    whole folder is gone or is a file now."""
    def g(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)
    g("init", "-q")
    files = {"top.txt": "t\n", "d1/a.txt": "a\n", "d1/b.txt": "b\n", "d1/d2/c.txt": "c\n",
             "d1/d2/d3/e.txt": "e\n", "d4/f.txt": "f\n", "d5/g.txt": "g\n", "z.txt": "z\n"}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    os.symlink("../top.txt", tmp_path / "d1" / "d2" / "link")
    g("add", "-A")
    g("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    w = Worktree(tmp_path, tmp_path / ".git", tmp_path)
    assert w.differs_from("HEAD") == []
    (tmp_path / "d1" / "d2" / "d3" / "e.txt").write_text("E\n")
    os.unlink(tmp_path / "d1" / "d2" / "link")
    (tmp_path / "d1" / "d2" / "link").write_text("../top.txt")      # a file where a link was
    import shutil
    shutil.rmtree(tmp_path / "d4")
    shutil.rmtree(tmp_path / "d5")
    (tmp_path / "d5").write_text("a file where a folder was\n")
    os.chmod(tmp_path / "d1" / "b.txt", 0o755)
    assert w.differs_from("HEAD") == ["d1/b.txt (mode)", "d1/d2/d3/e.txt (content)", "d1/d2/link (not a symlink)",
                                      "d4/f.txt (missing)", "d5/g.txt (missing)"]


def test_differs_from_between_proofs(tmp_path):
    """Each proof looks again only at what can have changed since the last one (lstat data,
    blobs that differ between the commits) — which must still find every difference."""
    def g(*args):
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path,
                              check=True, capture_output=True, text=True).stdout.strip()
    g("init", "-q")
    for i in range(20):
        (tmp_path / f"f{i}.txt").write_text(f"{i}\n")
    g("add", "-A")
    g("commit", "-qm", "a")
    a = g("rev-parse", "HEAD")
    (tmp_path / "f3.txt").write_text("three\n")
    os.unlink(tmp_path / "f4.txt")
    (tmp_path / "new.txt").write_text("new\n")
    g("add", "-A")
    g("commit", "-qm", "b")
    b = g("rev-parse", "HEAD")
    time.sleep(0.15)   # older than a clock tick: the hashes can stand
    w = Worktree(tmp_path, tmp_path / ".git", tmp_path)
    assert w.differs_from(b) == []
    assert w.differs_from(a) == ["f3.txt (content)", "f4.txt (missing)"]
    assert w.differs_from(b) == []
    st = os.stat(tmp_path / "f7.txt")
    (tmp_path / "f7.txt").write_text("X\n")                     # same size, same mtime
    os.utime(tmp_path / "f7.txt", ns=(st.st_atime_ns, st.st_mtime_ns))
    os.chmod(tmp_path / "f9.txt", 0o755)
    assert w.differs_from(b) == ["f7.txt (content)", "f9.txt (mode)"]
    (tmp_path / "f7.txt").write_text("7\n")
    os.chmod(tmp_path / "f9.txt", 0o644)
    assert w.differs_from(b) == []
    (tmp_path / "new.txt").unlink()
    assert w.differs_from(b) == ["new.txt (missing)"]


def test_picture_after_reset_still_proves_what_the_reset_wrote(tmp_path):
    """A tree found exactly as its last proof left it is not walked again after the reset to the
    next commit: its proven picture, with the paths that differ between the commits looked at
    again, is the proof's input — so a path git did not write (a tampered index could make it
    skip one) is still caught, and only the last passing proof's own picture is taken."""
    def g(*args):
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path,
                              check=True, capture_output=True, text=True).stdout.strip()
    g("init", "-q")
    for rel in ("a.txt", "d/b.txt", "gone.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    g("add", "-A")
    g("commit", "-qm", "p")
    p_commit = g("rev-parse", "HEAD")
    (tmp_path / "a.txt").write_text("changed")
    (tmp_path / "gone.txt").unlink()
    (tmp_path / "new" / "deep").mkdir(parents=True)
    (tmp_path / "new" / "deep" / "c.txt").write_text("c")
    g("add", "-A")
    g("commit", "-qm", "c")
    c_commit = g("rev-parse", "HEAD")
    g("reset", "-q", "--hard", p_commit)
    time.sleep(0.15)
    w = Worktree(tmp_path, tmp_path / ".git", tmp_path)
    proved = StatTree.verification(tmp_path).take()
    assert w.differs_from(p_commit, proved) == []
    assert w.picture_after_reset(dict(proved), c_commit) is None      # not the proof's own picture
    skipped = w.picture_after_reset(proved, c_commit)                  # no reset happened
    assert w.differs_from(c_commit, skipped) == ["a.txt (content)", "new/deep/c.txt (missing)"]
    g("reset", "-q", "--hard", p_commit)
    proved = StatTree.verification(tmp_path).take()
    assert w.differs_from(p_commit, proved) == []
    g("reset", "-q", "--hard", c_commit)
    after = w.picture_after_reset(proved, c_commit)
    assert w.differs_from(c_commit, after) == []
    assert after == StatTree.verification(tmp_path).take()   # what a walk would have seen


def test_differs_from_does_not_look_through_a_folder_that_became_a_symlink(tmp_path):
    """git records a symlink where a folder was: the files under it are gone, even when the link
    leads to a folder with the very same files."""
    def g(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)
    g("init", "-q")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("a\n")
    g("add", "-A")
    g("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    w = Worktree(tmp_path, tmp_path / ".git", tmp_path)
    assert w.differs_from("HEAD") == []
    os.rename(tmp_path / "d", tmp_path / "copy")
    os.symlink("copy", tmp_path / "d")
    assert w.differs_from("HEAD") == ["d/a.txt (missing)"]


def test_differs_from_asks_git_again_when_the_attribute_files_change(tmp_path):
    """Which files git converts is remembered between commits only while their .gitattributes
    are the same: adding one (eol=crlf) makes CRLF on disk right, dropping it makes it wrong."""
    def g(*args):
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "core.autocrlf=false",
                               *args], cwd=tmp_path, check=True, capture_output=True, text=True).stdout.strip()
    g("init", "-q")
    (tmp_path / "a.txt").write_bytes(b"hi\n")
    g("add", "-A")
    g("commit", "-qm", "plain")
    w = Worktree(tmp_path, tmp_path / ".git", tmp_path)
    assert w.differs_from(g("rev-parse", "HEAD")) == []
    (tmp_path / ".gitattributes").write_text("*.txt text eol=crlf\n")
    g("add", "-A")
    g("commit", "-qm", "crlf")
    (tmp_path / "a.txt").unlink()
    g("checkout", "--", "a.txt")
    assert (tmp_path / "a.txt").read_bytes() == b"hi\r\n"
    assert w.differs_from(g("rev-parse", "HEAD")) == []
    g("rm", "-q", ".gitattributes")    # a.txt stays "hi\n" in the commit, CRLF on disk
    g("commit", "-qm", "no attributes")
    assert w.differs_from(g("rev-parse", "HEAD")) == ["a.txt (content)"]


def test_remove_untracked_leaves_exactly_the_commit_and_what_is_kept(tmp_path):
    """What `git clean -ffdx` would remove goes — ignored files, untracked folders at any depth,
    a symlink (not what it points to) — and the kept data link and its folder stay."""
    def g(*args):
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path,
                              check=True, capture_output=True, text=True).stdout.strip()
    outside = tmp_path.parent / (tmp_path.name + "-outside")
    outside.mkdir()
    (outside / "precious").write_text("not ours")
    g("init", "-q")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("A = 1\n")
    (tmp_path / ".gitignore").write_text("*.log\n")
    g("add", "-A")
    g("commit", "-qm", "x")
    head = g("rev-parse", "HEAD")
    for rel in ("run.log", "src/b.py", "out/deep/er/r.txt", "src/__pycache__/a.pyc"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("left over")
    os.symlink(outside, tmp_path / "link")
    (tmp_path / "inputs").mkdir()
    os.symlink(outside, tmp_path / "inputs" / "data")
    w = Worktree(tmp_path, tmp_path / ".git", tmp_path)
    keep = frozenset({"inputs", "inputs/data"})
    assert w.remove_untracked(StatTree.verification(tmp_path).take(), head, keep)
    after = StatTree.verification(tmp_path).take()
    assert sorted(after) == ["", ".gitignore", "inputs", "inputs/data", "src", "src/a.py"]
    assert (outside / "precious").read_text() == "not ours"
    assert w.differs_from(head, after) == []
    assert not w.remove_untracked(after, head, keep)


# ---- the stat watch -------------------------------------------------------------------------------------


def test_stat_watch_sees_a_rewrite_with_the_same_size_and_mtime(tmp_path):
    f = tmp_path / "d" / "x.pth"
    f.parent.mkdir()
    f.write_text("aaaa")
    w = Watch([StatTree(tmp_path / "d", "d", top_only=True)])
    w.capture()
    assert w.changes() == []
    st = f.stat()
    time.sleep(0.01)
    f.write_text("bbbb")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert [(c.paths, c.new) for c in w.changes()] == [(["x.pth"], [])]


def test_stat_watch_refuses_to_compare_without_a_capture(tmp_path):
    # compared against nothing, every file would look new — and new files in a site folder are
    # moved out of the way: the bug that once emptied a Python installation of its .pth files
    (tmp_path / "x.pth").write_text("")
    w = Watch([StatTree(tmp_path, "d", top_only=True)])
    with pytest.raises(RuntimeError, match="before capture"):
        w.changes()
    w.capture()
    assert w.changes() == []


def test_stat_watch_tells_new_entries_from_changed_ones(tmp_path):
    (tmp_path / "old.pth").write_text("a")
    w = Watch([StatTree(tmp_path, "d", top_only=True)])
    w.capture()
    (tmp_path / "old.pth").write_text("changed")
    (tmp_path / "new.pth").write_text("b")
    [c] = w.changes()
    assert (c.paths, c.new) == (["new.pth", "old.pth"], ["new.pth"])


def test_stat_tree_of_a_missing_path_sees_it_appear(tmp_path):
    t = StatTree(tmp_path / "later", "later")
    before = t.take()
    (tmp_path / "later").mkdir()
    assert changed_paths(before, t.take()) == ["."]


def test_carried_watches_follow_each_other_without_a_gap(tmp_path):
    """A carried tree's capture starts from the picture its last comparison took: a change made
    between a comparison and the next capture is seen by the next comparison, not lost."""
    (tmp_path / "a.pth").write_text("a")
    w = Watch([StatTree(tmp_path, "d", top_only=True, carried=True)])
    w.capture()
    assert w.changes() == []
    (tmp_path / "gap.pth").write_text("between two watches")
    w.capture()
    [c] = w.changes()
    assert c.new == ["gap.pth"]
    plain = Watch([StatTree(tmp_path, "d", top_only=True)])
    plain.capture()
    (tmp_path / "b.pth").write_text("b")
    assert [c.new for c in plain.changes()] == [["b.pth"]]
    plain.capture()   # not carried: starts afresh from the disk
    assert plain.changes() == []


def test_name_tree_lists_a_folder_again_only_when_its_times_change(tmp_path, monkeypatch):
    from autoloop.disk.watch import NameTree
    (tmp_path / "python3").write_text("")
    t = NameTree(tmp_path, "PATH folder")
    time.sleep(0.15)                 # older than a clock tick's doubt: the listing can be reused
    listed = []
    real = os.listdir
    monkeypatch.setattr(os, "listdir", lambda p: listed.append(p) or real(p))
    first = t.take()
    assert t.take() == first and len(listed) == 1
    (tmp_path / "git").write_text("")   # a new name moves the folder's times
    assert set(t.take()) == {"", "python3", "git"} and len(listed) == 2
    assert set(t.take()) == {"", "python3", "git"} and len(listed) == 3   # changed just now: listed again


@pytest.mark.parametrize("name,hit", [("x.pth", True), ("sitecustomize.py", True), ("usercustomize", True),
                                      ("sitecustomize/__init__.py", True), ("numpy", False), ("a.py", False)])
def test_is_injection(name, hit):
    assert is_injection(name) == hit


# ---- the bwrap command line ------------------------------------------------------------------------------


def test_bwrap_argv(tmp_path):
    wt = tmp_path / "wt"
    wt.mkdir()
    b = Bwrap(SandboxSpec(kind="bwrap"), executable="/usr/bin/bwrap")
    argv = b.argv("echo hi", workdir=wt, writable=[tmp_path / "logs"], readable=[tmp_path / "repo.git"])
    joined = " ".join(argv)
    for flag in ("--die-with-parent", "--new-session", "--cap-drop ALL", "--unshare-pid", "--unshare-net",
                 "--ro-bind / /", "--tmpfs /tmp", f"--bind {os.path.realpath(wt)} {os.path.realpath(wt)}",
                 f"--chdir {os.path.realpath(wt)}"):
        assert flag in joined, flag
    assert argv[-3:] == ["/bin/sh", "-c", "echo hi"]
    assert argv.index("--tmpfs") < argv.index("--bind")  # binds come after the private /tmp
    box = Bwrap(SandboxSpec(kind="bwrap", network=True), executable="/usr/bin/bwrap")
    with pytest.raises(SandboxUnavailable, match="egress proxy is not running"):
        box.argv(["x"], workdir=wt)   # fail closed: never the host's network
    box.egress = EgressProxy()
    net = box.argv(["x"], workdir=wt)
    # its own namespace still, started by the launcher that puts the proxy's listener there
    assert "--unshare-net" in net and net[-1] == "x" and any(a.endswith("egress/launch.py") for a in net)
    assert net[net.index("HTTPS_PROXY") + 1] == "http://127.0.0.1:3128"
    box.egress.close()


def test_bwrap_keeps_what_the_command_names_under_tmp_readable(tmp_path):
    # a generator script kept under /tmp (a CI checkout, a scratch copy) would vanish behind the
    # private /tmp: the folders of absolute paths the command names are bound read-only
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "gen.py").write_text("")
    wt = tmp_path / "wt"
    wt.mkdir()
    b = Bwrap(SandboxSpec(kind="bwrap"), executable="/usr/bin/bwrap")
    real = os.path.realpath(scripts)
    assert real.startswith("/tmp/")  # pytest's tmp_path: the case at hand
    for command in (f"python3 {scripts / 'gen.py'} --fast", ["python3", str(scripts / "gen.py")]):
        argv = b.argv(command, workdir=wt)
        i = argv.index(real)
        assert argv[i - 1] == "--ro-bind" and argv[i + 1] == real
        assert argv.index("--tmpfs") < i - 1
    assert real not in b.argv("python3 gen.py", workdir=wt)


def test_bwrap_probe_without_bwrap(tmp_path, monkeypatch):
    from autoloop.isolation.sandbox import SandboxUnavailable
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SandboxUnavailable, match="not installed"):
        Bwrap(SandboxSpec(kind="bwrap")).probe()


def test_own_code_watch_tells_an_import_s_bytecode_from_a_change(tmp_path):
    """autoloop's own package is watched bytecode and all: the first import of a module writes
    its __pycache__ (what the CI run on a fresh clone tripped over), which changes nothing; a
    planted or linked .pyc or a changed source is a change."""
    import marshal
    from autoloop.isolation.pycache import import_wrote
    pkg = tmp_path / "pkg" / "sub"
    pkg.mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text("VALUE = 1\n")
    watch = Watch([StatTree(tmp_path / "pkg", "own")])
    watch.capture()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    subprocess.run([sys.executable, "-c", "import pkg.sub.mod"], cwd=tmp_path, env=env, check=True)
    changed = [p for ch in watch.changes() for p in ch.paths]
    assert "sub/__pycache__" in changed and len(changed) >= 4
    assert all(import_wrote(tmp_path / "pkg", rel) for rel in changed)

    pyc = next((pkg / "__pycache__").glob("mod.*.pyc"))
    pyc.write_bytes(pyc.read_bytes()[:16] + marshal.dumps(compile("VALUE = 2\n", "mod.py", "exec", dont_inherit=True)))
    (pkg / "__pycache__" / "notes.txt").write_text("x")     # nothing loads it: no change
    (pkg / "__pycache__" / f"mod.{sys.implementation.cache_tag}.opt-1.pyc").symlink_to(pyc)
    (pkg / "__init__.py").write_text("VALUE = 3\n")
    wrote = {rel: import_wrote(tmp_path / "pkg", rel) for rel in
             (f"sub/__pycache__/{pyc.name}", f"sub/__pycache__/mod.{sys.implementation.cache_tag}.opt-1.pyc",
              "sub/__init__.py")}
    assert import_wrote(tmp_path / "pkg", "sub/__pycache__/notes.txt")
    assert wrote == dict.fromkeys(wrote, False)
