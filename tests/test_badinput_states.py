"""Black-box: more bad input — repository states, the program file itself, and the keys added for
hardening (sandbox, resources, data) — each refused with exit 2, one line naming the file:line or
the state, no traceback, nothing changed (refs, HEAD, status, the whole file tree incl. .git, no
worktree made). And the states autoloop deliberately accepts, because refusing them would break
common setups: a detached HEAD and a shallow clone (GitHub Actions' default checkout is both),
a program in a linked worktree, uncommitted changes in your checkout.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.scripts.e2e import PY, error_lines, git, make_project, repo_state
from tests.test_e2e_badinput import VALID, _cli, _refused, _repo

HONEST = {"*": 'W("val.txt", str(40 - cycle))'}


def _program(extra: str, *, kind: str = "command") -> str:
    text = VALID.format(py=PY)
    if kind != "command":
        text = text.replace("  kind: command\n  command: \"true\"\n", f"  kind: {kind}\n")
    return text.replace("---\nBody", extra.rstrip("\n") + "\n---\nBody")


# ---- the new keys: program.md:LINE naming the key ------------------------------------------------

KEY_CASES = [
    ("sandbox-unknown-kind", "sandbox: docker", 11, ["sandbox.kind", "bwrap"]),
    ("sandbox-typo-kind", "sandbox: bwarp", 11, ["did you mean 'bwrap'"]),
    ("sandbox-network-not-bool", "sandbox: {kind: bwrap, network: maybe}", 11, ["sandbox.network", "true or false"]),
    ("sandbox-writable-relative", "sandbox:\n  kind: bwrap\n  writable: [cache]", 13, ["sandbox.writable", "absolute"]),
    ("sandbox-unknown-key", "sandbox:\n  kind: bwrap\n  netwrk: true", 13, ["netwrk", "network"]),
    ("sandbox-unknown-kind", "sandbox: {kind: firejail}", 11, ["sandbox.kind", "auto"]),
    ("resources-zero", "resources: {max_change_mb: 0}", 11, ["resources.max_change_mb", "positive"]),
    ("resources-negative-disk", "resources:\n  max_disk_mb: -5", 12, ["resources.max_disk_mb"]),
    ("resources-processes-float", "resources: {max_processes: 2.5}", 11, ["resources.max_processes"]),
    ("resources-unknown-key", "resources: {max_tree_mb: 5}", 11, ["max_tree_mb"]),
    ("data-not-a-list", "data: /x", 11, ["data", "list"]),
    ("data-missing-as", "data:\n  - {path: /tmp}", 12, ["data[0].as"]),
]


@pytest.mark.parametrize("name,extra,line,words", KEY_CASES, ids=[c[0] for c in KEY_CASES])
def test_bad_hardening_key_refused(tmp_path, name, extra, line, words):
    repo, env = _repo(tmp_path, _program(extra))
    msg = _refused(repo, env, "run", "program.md", "--tag", "t1", "--cycles", "1")
    assert msg.startswith(f"program.md:{line}: "), msg
    for w in words:
        assert w in msg, msg


def test_sandbox_with_an_in_process_generator_accepted(tmp_path):
    # anthropic/openai/tune run no subprocess generator; `bwrap` still sandboxes their measurements
    from autoloop.program.reader import parse_program

    for kind in ("anthropic", "tune"):
        text = _program("sandbox: bwrap", kind=kind)
        prog = parse_program(text, tmp_path / "program.md", tmp_path)
        assert prog.sandbox.kind == "bwrap"
        assert prog.generator.kind == kind


def test_sandbox_defaults_to_auto(tmp_path):
    from autoloop.program.reader import parse_program

    prog = parse_program(_program(""), tmp_path / "program.md", tmp_path)
    assert prog.sandbox.kind == "auto"
    assert prog.verifier.network is False
    prog = parse_program(_program("sandbox: {network: true}"), tmp_path / "program.md", tmp_path)
    assert (prog.sandbox.kind, prog.sandbox.network) == ("auto", True)


def _path_without(tmp_path: Path, tool: str, env: dict) -> str:
    """A PATH with git and sh but no `tool`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("git", "sh", "env"):
        found = shutil.which(name)
        if found and not (bin_dir / name).exists():
            os.symlink(found, bin_dir / name)
    assert shutil.which(tool, path=str(bin_dir)) is None
    return str(bin_dir)


def test_sandbox_without_bwrap_fails_closed(tmp_path):
    repo, env = _repo(tmp_path, _program("sandbox: bwrap"))
    env["PATH"] = _path_without(tmp_path, "bwrap", env)
    msg = _refused(repo, env, "run", "program.md", "--tag", "t1", "--cycles", "1")
    assert msg.startswith("program.md:11: sandbox: bwrap is not installed"), msg


def test_sandbox_that_cannot_make_namespaces_fails_closed(tmp_path):
    repo, env = _repo(tmp_path, _program("sandbox: {kind: bwrap, network: true}"))
    bin_dir = Path(_path_without(tmp_path, "bwrap", env))
    fake = bin_dir / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace, likely because the "
                    "kernel does not allow non-privileged user namespaces.' >&2\nexit 1\n")
    fake.chmod(0o755)
    env["PATH"] = str(bin_dir)
    msg = _refused(repo, env, "run", "program.md", "--tag", "t1", "--cycles", "1")
    assert msg.startswith("program.md:11: sandbox: bwrap cannot create a sandbox here"), msg
    assert "sandbox: none" in msg


def test_judge_run_as_a_module_the_generator_could_rewrite_refused(tmp_path):
    text = VALID.format(py=PY).replace(f"{PY} score.py", f"{PY} -m score").replace("[val.txt]", '[val.txt, "*.py"]')
    repo, env = _repo(tmp_path, text)
    msg = _refused(repo, env, "run", "program.md", "--tag", "t1", "--cycles", "1")
    assert re.match(r"program\.md:5: verifier\.command runs score\.py", msg), msg


# ---- the program file itself ----------------------------------------------------------------------


def test_unreadable_program_file(tmp_path):
    repo, env = _repo(tmp_path)
    prog = repo / "program.md"
    prog.chmod(0)
    try:
        before = repo_state(repo, env)
        cmd = [PY, "-m", "autoloop", "run", "program.md", "--tag", "t1", "--cycles", "1"]
        if os.geteuid() == 0:  # root reads anything: drop the capabilities that let it
            if shutil.which("setpriv") is None:
                pytest.skip("running as root without setpriv: cannot make a file unreadable")
            cmd = ["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--", *cmd]
        res = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL)
        assert res.returncode == 2, res.stderr
        errs = error_lines(res.stderr)
        assert len(errs) == 1 and "cannot read program file" in errs[0] and "ermission denied" in errs[0], res.stderr
        assert "Traceback" not in res.stderr
        assert repo_state(repo, env) == before
    finally:
        prog.chmod(0o644)


def test_program_file_is_a_fifo(tmp_path):
    """Reading a FIFO would block forever: refused at once."""
    repo, env = _repo(tmp_path)
    fifo = tmp_path / "program.md"
    os.mkfifo(fifo)
    msg = _refused(repo, env, "run", str(fifo), "--tag", "t1", "--cycles", "1")
    assert "not a regular file" in msg, msg


def test_program_file_is_a_device(tmp_path):
    repo, env = _repo(tmp_path)
    msg = _refused(repo, env, "run", "/dev/null", "--tag", "t1", "--cycles", "1")
    assert "not a regular file" in msg, msg


def test_program_symlinked_from_outside_the_repository(tmp_path):
    repo, env = _repo(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "program.md").write_text(VALID.format(py=PY))
    os.symlink(outside / "program.md", repo / "linked.md")
    msg = _refused(repo, env, "run", "linked.md", "--tag", "t1", "--cycles", "1")
    assert "not inside" in msg, msg


def test_program_not_utf8(tmp_path):
    repo, env = _repo(tmp_path)
    (repo / "program.md").write_bytes(VALID.format(py=PY).encode().replace(b"Body.", b"Caf\xe9."))
    git(repo, "commit", "-qam", "latin-1", env=env)
    msg = _refused(repo, env, "run", "program.md", "--tag", "t1", "--cycles", "1")
    assert re.match(r"program\.md:\d+: not valid UTF-8", msg), msg


# ---- repository states that are refused ---------------------------------------------------------


def test_bare_repository(tmp_path):
    repo, env = _repo(tmp_path)
    bare = tmp_path / "bare.git"
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(bare), env=env)
    (bare / "program.md").write_text(VALID.format(py=PY))
    msg = _refused(bare, env, "run", "program.md", "--tag", "t1", "--cycles", "1")
    assert "not inside a git work tree" in msg, msg


def test_submodules_refused(tmp_path):
    repo, env = _repo(tmp_path)
    sub = tmp_path / "sub"
    sub.mkdir()
    git(sub, "init", "-q", env=env)
    (sub / "lib.txt").write_text("x\n")
    git(sub, "add", "-A", env=env)
    git(sub, "commit", "-qm", "sub", env=env)
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "vendor/sub", env=env)
    git(repo, "commit", "-qm", "add a submodule", env=env)
    msg = _refused(repo, env, "run", "program.md", "--tag", "t1", "--cycles", "1")
    assert "submodules (vendor/sub)" in msg, msg


def _refused_resume(p) -> str:
    """Like _refused, for a tag that has run before (its worktrees exist and must stay as they are)."""
    from tests.scripts.e2e import tree_state
    cache = Path(p.env["XDG_CACHE_HOME"])
    before = (repo_state(p.repo, p.env), tree_state(cache))
    res = p.run("--cycles", "1")
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert "Traceback" not in res.stderr
    errs = error_lines(res.stderr)
    assert len(errs) == 1, res.stderr
    assert (repo_state(p.repo, p.env), tree_state(cache)) == before
    return errs[0]


def test_run_branch_checked_out_in_your_checkout(tmp_path):
    p = make_project(tmp_path, HONEST)
    assert p.run("--cycles", "1").returncode == 0
    git(p.repo, "checkout", "-q", p.branch(), env=p.env)
    msg = _refused_resume(p)
    assert f"branch {p.branch()} is checked out in {p.repo}" in msg, msg


def test_ledger_without_its_branch(tmp_path):
    p = make_project(tmp_path, HONEST)
    assert p.run("--cycles", "1").returncode == 0
    git(p.repo, "update-ref", "-d", f"refs/heads/{p.branch()}", env=p.env)
    msg = _refused_resume(p)
    assert "is gone" in msg and p.branch() in msg, msg


@pytest.mark.parametrize("marker", ["rebase-merge", "rebase-apply", "CHERRY_PICK_HEAD", "REBASE_HEAD"])
def test_operation_in_progress(tmp_path, marker):
    repo, env = _repo(tmp_path)
    target = repo / ".git" / marker
    if marker.startswith("rebase-"):
        target.mkdir()
    else:
        target.write_text(git(repo, "rev-parse", "HEAD", env=env) + "\n")
    msg = _refused(repo, env, "run", "program.md", "--tag", "t1", "--cycles", "1")
    assert "in progress" in msg, msg


def test_repository_owned_by_another_user(tmp_path):
    """A tarball unpacked as root keeps its archive's owner, and git then refuses the repository
    ('dubious ownership'). That is not 'not a git work tree' (whose hint, git init, would make
    things worse): the message names git's check and its own safe.directory fix, and the fix
    works."""
    repo, env = _repo(tmp_path)
    before = repo_state(repo, env)
    tree_before = sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*"))
    run_env = dict(env)
    # Only root can give a folder to another user. git's own test switch for this check
    # (GIT_TEST_ASSUME_DIFFERENT_OWNER) cannot stand in: every git call autoloop makes drops
    # the GIT_* variables it was started with (gitrun.git_env), on purpose.
    if os.geteuid() != 0:
        pytest.skip("only root can give a folder to another user")
    owner = repo.stat().st_uid
    os.chown(repo, 4242, 4242)
    try:
        for args in (["run", "program.md", "--tag", "t1", "--cycles", "1"], ["verify"]):
            res = _cli(repo, run_env, *args)
            assert res.returncode == 2, (args, res.returncode, res.stdout, res.stderr)
            assert "Traceback" not in res.stderr + res.stdout
            errs = error_lines(res.stderr)
            assert len(errs) == 1, res.stderr
            assert "owned by another user" in errs[0] and "dubious ownership" in errs[0], errs[0]
            assert f"git config --global --add safe.directory {repo}" in errs[0], errs[0]
            assert "not inside a git work tree" not in errs[0] and "git init" not in errs[0]
    finally:
        os.chown(repo, owner, owner)
    assert repo_state(repo, env) == before
    assert sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*")) == tree_before
    assert not list(Path(env["XDG_CACHE_HOME"]).rglob(".git")), "a worktree was created"
    # the advice works: once trusted, the same repository is measured
    os.chown(repo, 4242, 4242)
    try:
        git(repo, "config", "--global", "--add", "safe.directory", str(repo), env=run_env)
        res = _cli(repo, run_env, "verify")
        assert res.returncode == 0, (res.returncode, res.stdout, res.stderr)
    finally:
        os.chown(repo, owner, owner)


def test_unborn_branch(tmp_path):
    repo, env = _repo(tmp_path)
    git(repo, "checkout", "-q", "--orphan", "fresh", env=env)
    msg = _refused(repo, env, "run", "program.md", "--tag", "t1", "--cycles", "1")
    assert "no commit" in msg, msg


# ---- states that are accepted on purpose (and must work) -------------------------------------------


def _works(p, *args, cwd=None):
    res = p.cli("run", "program.md", "--tag", p.tag, "--cycles", "2", *args, cwd=cwd)
    assert res.returncode == 0, res.stderr
    return res


def test_detached_head_works(tmp_path):
    """GitHub Actions checks out a detached HEAD: the run starts from that commit."""
    p = make_project(tmp_path, HONEST)
    head = git(p.repo, "rev-parse", "HEAD", env=p.env)
    git(p.repo, "checkout", "-q", "--detach", env=p.env)
    _works(p)
    assert [r["status"] for r in p.rows()] == ["baseline", "keep", "keep"]
    assert git(p.repo, "rev-parse", f"{p.branch()}~2", env=p.env) == head
    assert git(p.repo, "symbolic-ref", "-q", "HEAD", env=p.env, check=False) == ""  # still detached
    assert git(p.repo, "rev-parse", "HEAD", env=p.env) == head


def test_shallow_clone_works(tmp_path):
    """actions/checkout fetches one commit by default (a shallow clone)."""
    p = make_project(tmp_path, HONEST)
    (p.repo / "README.md").write_text("second\n")
    git(p.repo, "commit", "-qam", "second", env=p.env)
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{p.repo}", str(clone), env=p.env)
    assert git(clone, "rev-parse", "--is-shallow-repository", env=p.env) == "true"
    p.repo = clone
    _works(p)
    assert [r["status"] for r in p.rows()] == ["baseline", "keep", "keep"]
    assert p.show(p.branch(), "val.txt").strip() == b"38"


def test_program_in_a_linked_worktree_works(tmp_path):
    p = make_project(tmp_path, HONEST)
    linked = tmp_path / "linked"
    git(p.repo, "worktree", "add", "-q", "-b", "side", str(linked), env=p.env)
    main_status = git(p.repo, "status", "--porcelain", "--untracked-files=all", env=p.env)
    p.repo = linked
    _works(p)
    assert [r["status"] for r in p.rows()] == ["baseline", "keep", "keep"]
    assert git(tmp_path / "repo", "status", "--porcelain", "--untracked-files=all", env=p.env) == main_status


def test_uncommitted_changes_are_left_alone(tmp_path):
    p = make_project(tmp_path, HONEST)
    (p.repo / "README.md").write_text("my unsaved work\n")
    (p.repo / "scratch.txt").write_text("mine\n")
    status = git(p.repo, "status", "--porcelain", "--untracked-files=all", env=p.env)
    _works(p)
    assert (p.repo / "README.md").read_text() == "my unsaved work\n"
    assert git(p.repo, "status", "--porcelain", "--untracked-files=all", env=p.env) == status
    assert p.show(p.branch(), "README.md") == b"# demo\n"  # the run started from the commit



# ---- places a sandbox binds, apart from the repository and autoloop's own (contract §11) ---------

def _place_cases(tmp_path: Path) -> list[tuple[str, str, list[str]]]:
    repo, cache = tmp_path / "repo", tmp_path / "home" / ".cache"
    return [
        ("writable-holds-repo", f"sandbox:\n  writable:\n    - {tmp_path}", ["sandbox.writable[0]", "holds the repository"]),
        ("writable-inside-repo", f"sandbox:\n  writable:\n    - {repo}/out", ["sandbox.writable[0]", "inside the repository"]),
        ("writable-autoloop-trees", f"sandbox:\n  writable:\n    - {cache}/autoloop", ["sandbox.writable[0]", "autoloop's worktrees"]),
        ("writable-autoloop-state", f"sandbox:\n  writable:\n    - {repo}/.autoloop", ["sandbox.writable[0]", "autoloop's state"]),
        ("data-holds-repo", f"data:\n  - {{path: {tmp_path}, as: d}}", ["data[0].path", "holds the repository"]),
        ("data-inside-repo", f"data:\n  - {{path: {repo}/big, as: d}}", ["data[0].path", "inside the repository"]),
        ("data-autoloop-state", "data:\n  - .autoloop", ["data[0].path", "autoloop's state"]),
    ]


@pytest.mark.parametrize("case", range(7))
def test_a_bound_place_that_reaches_the_repository_or_autoloop_is_refused(tmp_path, case):
    name, extra, words = _place_cases(tmp_path)[case]
    repo, env = _repo(tmp_path, _program(extra))
    for d in ("out", "big"):
        (repo / d).mkdir()
    msg = _refused(repo, env, "run", "program.md", "--tag", "t1", "--cycles", "1")
    line = 13 if name.startswith("writable") else 12   # the list item's own line
    assert msg.startswith(f"program.md:{line}: "), (name, msg)
    for w in words:
        assert w in msg, (name, msg)


def test_a_data_folder_of_the_checkout_in_the_short_form_is_refused_with_the_mapping_to_use(tmp_path):
    repo, env = _repo(tmp_path, _program("data:\n  - cache"))
    (repo / ".gitignore").write_text("cache/\n")
    (repo / "cache").mkdir()
    msg = _refused(repo, env, "verify")
    assert msg.startswith("program.md:12: data[0].path") and "inside the repository" in msg, msg
    assert "{path: /abs/folder, as: cache}" in msg, msg


def test_a_guard_whose_python_lacks_its_module_is_refused_naming_that_python(tmp_path):
    repo, env = _repo(tmp_path, _program("guards:\n  - python -m autoloop_no_such_module -q"))
    subprocess.run([PY, "-m", "venv", "--without-pip", str(repo / ".venv")], check=True)
    msg = _refused(repo, env, "verify")
    assert msg.startswith("program.md:12: guards[0].command"), msg
    assert "has no module autoloop_no_such_module" in msg and "`.venv/bin/python -m autoloop_no_such_module`" in msg, msg


def test_a_guard_already_on_the_projects_python_is_told_to_install_the_module(tmp_path):
    repo, env = _repo(tmp_path, _program("guards:\n  - .venv/bin/python -m autoloop_no_such_module -q"))
    subprocess.run([PY, "-m", "venv", "--without-pip", str(repo / ".venv")], check=True)
    msg = _refused(repo, env, "verify")
    assert "install autoloop_no_such_module into it" in msg and "point at" not in msg, msg


def test_a_writable_path_holding_the_measurements_python_is_refused(tmp_path):
    """The score runs none of the candidate's files, but it runs a Python: one under
    sandbox.writable could be given a start-up hook by a guard's run of the candidate's code."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed: without a sandbox everything is writable anyway")
    shared = tmp_path / "shared"
    subprocess.run([PY, "-m", "venv", "--without-pip", str(shared / "venv")], check=True)
    repo, env = _repo(tmp_path, _program(f"guards:\n  - {shared}/venv/bin/python -c 'pass'\n"
                                         f"sandbox:\n  writable: [{shared}]"))
    msg = _refused(repo, env, "verify")
    assert msg.startswith("program.md:14: sandbox.writable[0]") and "part of a Python" in msg, msg
