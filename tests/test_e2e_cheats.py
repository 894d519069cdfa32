"""Black-box: cheating generators. Each cheat runs in cycle 1 and must end as `violation` with the
verifier byte-identical and every trace of the cheat undone; an honest cycle 2 is then kept. Git
hooks and config-defined commands planted by a generator must never run."""

from __future__ import annotations

import os
import stat
import textwrap
from dataclasses import dataclass

import pytest

from tests.scripts.e2e import (assert_journal_consistent, assert_valid_ledger, git, make_project,
                               tree_state)

def _hooks(names):
    return "\n".join(
        f'p = common() / "hooks" / "{n}"; p.parent.mkdir(exist_ok=True); '
        f'p.write_text(f"#!/bin/sh\\necho {n} >> {{OUT}}/pwned\\n"); os.chmod(p, 0o755)'
        for n in names)


EVIL_SCRIPT = '''
evil = OUT / "evil.sh"
evil.write_text(f"#!/bin/sh\\necho fsmonitor >> {OUT}/pwned\\n")
os.chmod(evil, 0o755)
'''

CHEATS = {
    "edit-verifier": 'open("score.py", "a").write("print(\'score: -1000\')\\n")',
    "delete-verifier": 'os.remove("score.py")',
    "edit-verifier-same-size-and-mtime": '''
        st = os.stat("score.py")
        data = open("score.py").read()
        open("score.py", "w").write(data.replace("val.txt", "vaL.txt", 1))
        os.utime("score.py", ns=(st.st_atime_ns, st.st_mtime_ns))
    ''',
    "edit-guard": 'open("guard.py", "w").write("import sys; sys.exit(0)\\n")',
    "new-file-outside-allowed": 'W("val.txt", "30"); W("other.py", "print(1)\\n")',
    "new-folder-outside-allowed": 'W("lib/x.py", "x = 1\\n")',
    "edit-readme": 'open("README.md", "a").write("more\\n")',
    "symlink-allowed-to-verifier": 'os.remove("val.txt"); os.symlink("score.py", "val.txt")',
    "symlink-new-allowed-path": 'os.makedirs("src", exist_ok=True); os.symlink("../score.py", "src/v.py")',
    "symlink-outside-repo": 'os.makedirs("src", exist_ok=True); os.symlink("/etc/hostname", "src/h")',
    "hardlink-to-verifier": 'os.makedirs("src", exist_ok=True); os.link("score.py", "src/h.py")',
    "hardlink-then-write": 'os.remove("notes.txt"); os.link("score.py", "notes.txt"); '
                           'open("notes.txt", "a").write("print(\'score: -1\')\\n")',
    "chmod-x-not-allowed": 'os.chmod("README.md", 0o755)',
    "chmod-verifier": 'os.chmod("score.py", 0o777)',
    "assume-unchanged-and-edit": 'sh("git update-index --assume-unchanged score.py"); '
                                 'open("score.py", "a").write("print(\'score: -1\')\\n")',
    "skip-worktree-and-edit": 'sh("git update-index --skip-worktree score.py"); '
                              'open("score.py", "a").write("print(\'score: -1\')\\n")',
    "assume-unchanged-only": 'sh("git update-index --assume-unchanged README.md")',
    "ignored-file": 'W("evil.log", "hidden by .gitignore\\n")',
    "pycache-plant": 'W("__pycache__/score.cpython-311.pyc", "junk")',
    "info-exclude-and-hidden-file": '''
        with open(common() / "info" / "exclude", "a") as f:
            f.write("secret.txt\\n")
        W("secret.txt", "x")
    ''',
    "gitignore-and-hidden-file": 'open(".gitignore", "a").write("secret2.txt\\n"); W("secret2.txt", "x")',
    "hooks": _hooks(["post-commit", "pre-commit", "reference-transaction", "post-checkout",
                     "post-index-change", "post-rewrite"]) + '\nW("val.txt", "30")',
    "config-hooksPath": '''
        d = OUT / "evilhooks"
        d.mkdir(exist_ok=True)
        for n in ("post-commit", "pre-commit", "reference-transaction", "post-checkout", "post-index-change"):
            (d / n).write_text(f"#!/bin/sh\\necho {n} >> {OUT}/pwned\\n")
            os.chmod(d / n, 0o755)
        sh(f"git config core.hooksPath {d}")
        W("val.txt", "30")
    ''',
    "config-fsmonitor": EVIL_SCRIPT + 'sh(f"git config core.fsmonitor {evil}")\nW("val.txt", "30")',
    "config-alias-and-pager": EVIL_SCRIPT + 'sh(f"git config core.pager {evil}"); '
                                            'sh(f"git config diff.external {evil}")',
    "gitattributes-filter": EVIL_SCRIPT + textwrap.dedent('''
        sh(f"git config filter.x.clean {evil}"); sh(f"git config filter.x.smudge {evil}")
        with open(common() / "info" / "attributes", "w") as f:
            f.write("* filter=x\\n")
        W("val.txt", "30")
    '''),
    "alternates": '(common() / "objects" / "info").mkdir(exist_ok=True); '
                  'open(common() / "objects" / "info" / "alternates", "w").write("/tmp\\n")',
    "worktree-dotgit-link": 'os.remove(".git"); open(".git", "w").write("gitdir: /nonexistent\\n")',
    "program-md": 'open(user() / "program.md", "a").write("\\nTAMPERED\\n")',
    "experiments-md": 'open(user() / "experiments.md", "a").write("\\n## Cycle 77\\nTAMPERED\\n")',
    "results-tsv": 'open(user() / "results.tsv", "a").write("77\\tabc\\t-1000\\tkeep\\tTAMPERED\\n")',
    "ledger-append": '''
        led = user() / ".autoloop" / os.environ.get("AUTOLOOP_TAG", "t1") / "ledger.jsonl"
        with open(led, "a") as f:
            f.write(json.dumps({"t": "cycle", "cycle": 77, "status": "keep", "metric": -1000,
                                "hypothesis": "TAMPERED"}) + "\\n")
    ''',
    "ledger-truncate": '''
        led = user() / ".autoloop" / os.environ.get("AUTOLOOP_TAG", "t1") / "ledger.jsonl"
        open(led, "w").close()
    ''',
    "move-run-branch": '''
        tree = sh("git rev-parse HEAD^{tree}")
        fake = sh(f"git commit-tree {tree} -p HEAD -m TAMPERED")
        sh(f"git update-ref refs/heads/autoloop/t1 {fake}")
    ''',
    "delete-run-branch": 'sh("git update-ref -d refs/heads/autoloop/t1")',
    "journal-file-in-worktree": 'W("experiments.md", "## Cycle 1\\nTAMPERED\\n")',
    "state-dir-in-worktree": 'W(".autoloop/t1/ledger.jsonl", "{}\\n")',
    "program-md-in-worktree": 'open("program.md", "a").write("\\nTAMPERED\\n")',
    "fifo-in-allowed-path": 'os.makedirs("src", exist_ok=True); os.mkfifo("src/pipe")',
    "file-becomes-folder": 'os.remove("README.md"); os.mkdir("README.md"); W("README.md/x", "x")',
    "nuke-worktree": '''
        import shutil
        for name in os.listdir("."):
            if os.path.isdir(name) and not os.path.islink(name):
                shutil.rmtree(name)
            else:
                os.remove(name)
    ''',
    "commit-in-worktree": 'W("README.md", "TAMPERED\\n"); sh("git -c core.hooksPath=/dev/null commit -qam TAMPERED")',
}

# cheat -> (tests that fail because of it, reason)
# (skip-worktree-and-edit was one, fixed in ed59d82)
KNOWN_BUGS: dict[str, tuple[set[str], str]] = {}


def _known_bug(request, name):
    tests, reason = KNOWN_BUGS.get(name, (set(), ""))
    if request.node.originalname in tests:
        request.node.add_marker(pytest.mark.xfail(strict=True, reason=reason))


HONEST = 'print("Hypothesis: honest cycle two"); W("val.txt", "30")'

# The cheats run in batches, one run per batch: cycle 2i+1 is cheat i, cycle 2i+2 an honest step
# (val.txt = 30 - i) that must be kept — so every cheat is also checked for leaving nothing behind
# that would spoil the next cycle. Each batch's repository is then checked as a whole.
NAMES = sorted(CHEATS)
BATCH = 8
BATCHES = [NAMES[i:i + BATCH] for i in range(0, len(NAMES), BATCH)]
WHERE = {name: (b, i) for b, names in enumerate(BATCHES) for i, name in enumerate(names)}
SKIP_GIT = ("objects", "logs", "refs", "index", "worktrees", "packed-refs", "ORIG_HEAD", "autoloop", "info")
SKIP_CHECKOUT = (".git", "experiments.md", "results.tsv", ".autoloop")


def _cheat_code(name: str) -> str:
    # each cheat's planted commands leave a marker of their own if they ever run
    return textwrap.dedent(CHEATS[name]).replace("/pwned", f"/pwned-{name}")


@dataclass
class BatchRun:
    names: list
    p: object
    res: object
    start: str
    before: dict


@pytest.fixture(scope="module")
def batches(tmp_path_factory):
    done: dict[int, BatchRun] = {}

    def get(b: int, mode: str = "none") -> BatchRun:
        # mode "none": the watches are the only line (each cheat must be a violation); "auto":
        # the default sandbox, where the operating system refuses most cheats outright
        if (b, mode) not in done:
            names = BATCHES[b]
            plan = {}
            for i, name in enumerate(names):
                plan[2 * i + 1] = _cheat_code(name)
                plan[2 * i + 2] = f'print("Hypothesis: honest after {name}"); W("val.txt", "{30 - i}")'
            kw = {"extra": "sandbox: none"} if mode == "none" else {}
            p = make_project(tmp_path_factory.mktemp(f"cheats-{b}-{mode}"), plan, **kw)
            start = git(p.repo, "rev-parse", "HEAD", env=p.env)
            before = {"files": tree_state(p.repo, SKIP_CHECKOUT), "git": tree_state(p.repo / ".git", SKIP_GIT)}
            res = p.run("--cycles", str(2 * len(names)), timeout=180)
            done[b, mode] = BatchRun(names, p, res, start, before)
            done[b, mode].mode = mode  # type: ignore[attr-defined]
        return done[b, mode]

    return get


@pytest.fixture(params=NAMES)
def cheat(request, batches):
    name = request.param
    b, i = WHERE[name]
    _known_bug(request, name)
    return name, i, batches(b)


def test_cheat_is_a_violation(cheat):
    name, i, run = cheat
    assert run.p.statuses().get(2 * i + 1) == "violation", (run.res.returncode, run.res.stderr, run.p.rows())


def test_cheat_then_honest_cycle_kept(cheat):
    name, i, run = cheat
    row = run.p.rows()[2 * i + 2]
    assert (row["status"], float(row["metric"])) == ("keep", 30 - i), row


def test_cheat_no_hook_or_config_command_ever_ran(cheat):
    name, i, run = cheat
    marker = run.p.out / f"pwned-{name}"
    assert not marker.exists(), marker.read_text()


def test_cheat_left_no_trace_in_the_honest_commit(cheat):
    name, i, run = cheat
    p = run.p
    rows = p.rows()
    commit = git(p.repo, "rev-parse", rows[2 * i + 2]["commit"], env=p.env)
    keeps = [r["commit"] for r in rows[:2 * i + 2] if r["status"] in ("baseline", "keep")]
    parent = git(p.repo, "rev-parse", f"{commit}^", env=p.env)
    assert parent.startswith(keeps[-1])
    assert git(p.repo, "diff", "--name-only", parent, commit, env=p.env).split() == ["val.txt"]
    assert "TAMPERED" not in p.message(commit)


@pytest.fixture(params=[(b, m) for b in range(len(BATCHES)) for m in ("none", "auto")],
                ids=[f"batch{b}-{m}" for b in range(len(BATCHES)) for m in ("none", "auto")])
def batch(request, batches):
    return batches(*request.param)


def test_batch_run_exits_zero(batch):
    assert batch.res.returncode == 0, batch.res.stderr


def test_batch_branch_is_start_plus_honest_commits(batch):
    p = batch.p
    commits = p.branch_commits(batch.start)
    if batch.mode == "auto":
        # a cheat the sandbox refused may leave only its honest part (val.txt), kept on its merits
        for c in commits:
            assert git(p.repo, "diff", "--name-only", f"{c}^", c, env=p.env).split() == ["val.txt"], c
        kept = [r for r in p.rows() if r["status"] == "keep"]
        assert len(kept) == len(commits) >= 1
        for r in kept:
            assert float(p.show(r["commit"], "val.txt")) == float(r["metric"]), r
        return
    assert len(commits) == len(batch.names)
    assert git(p.repo, "rev-parse", f"{commits[-1]}^", env=p.env) == batch.start
    changed = git(p.repo, "diff", "--name-only", batch.start, commits[0], env=p.env).split()
    assert changed == ["val.txt"]


def test_batch_verifier_and_checkout_files_byte_identical(batch):
    assert tree_state(batch.p.repo, SKIP_CHECKOUT) == batch.before["files"]


def test_batch_git_files_restored(batch):
    p = batch.p
    assert tree_state(p.repo / ".git", SKIP_GIT) == batch.before["git"]
    assert "secret" not in (p.repo / ".git" / "info" / "exclude").read_text()
    assert not (p.repo / ".git" / "info" / "attributes").exists()
    assert not (p.repo / ".git" / "objects" / "info" / "alternates").exists()


def test_batch_no_planted_command_ever_ran(batch):
    assert not list(batch.p.out.glob("pwned*")), [f.read_text() for f in batch.p.out.glob("pwned*")]


def test_batch_worktree_clean_at_incumbent(batch):
    p = batch.p
    wt = p.worktree()
    assert git(wt, "rev-parse", "HEAD", env=p.env) == p.branch_head()
    assert git(wt, "status", "--porcelain", "--ignored", "--untracked-files=all", env=p.env) == ""
    flags = git(wt, "ls-files", "-v", env=p.env).splitlines()
    assert all(ln[0] == "H" for ln in flags), [ln for ln in flags if ln[0] != "H"]
    assert stat.S_IMODE(os.lstat(wt / "README.md").st_mode) & 0o111 == 0
    assert (wt / "score.py").read_bytes() == (p.repo / "score.py").read_bytes()


def test_batch_journal_whole(batch):
    p = batch.p
    recs = assert_valid_ledger(p)
    assert not any("TAMPERED" in str(r) for r in recs)
    assert "TAMPERED" not in p.experiments()
    assert "TAMPERED" not in (p.repo / "results.tsv").read_text()
    assert_journal_consistent(p)


# ---------------------------------------------------------------------------------------------


def test_fake_metric_line_from_generator_does_not_count(tmp_path):
    p = make_project(tmp_path, {1: 'W("val.txt", "50"); print("score: -1000")',
                                2: 'print("score: -1000")'})
    assert p.run("--cycles", "2").returncode == 0
    rows = p.rows()
    assert (rows[1]["status"], float(rows[1]["metric"])) == ("discard", 50.0)
    assert rows[2]["status"] == "no_change"


@pytest.mark.parametrize("allowed", ['["**"]', '[val.txt, score.py]', '[val.txt, notes.txt, guard.py]'])
def test_judge_the_generator_could_rewrite_is_refused(tmp_path, allowed):
    """`allowed` covering a file the verifier or a guard runs: refused up front (exit 2,
    program.md:LINE), nothing changed — rather than a run whose judge the generator may edit."""
    from tests.scripts.e2e import error_lines, repo_state
    p = make_project(tmp_path, {1: HONEST}, allowed=allowed)
    before = repo_state(p.repo, p.env)
    res = p.run("--cycles", "1")
    assert res.returncode == 2, (res.returncode, res.stderr)
    errs = error_lines(res.stderr)
    assert len(errs) == 1 and errs[0].startswith("program.md:"), res.stderr
    assert "Traceback" not in res.stderr
    assert repo_state(p.repo, p.env) == before


@pytest.mark.parametrize("target", ["program.md", "experiments.md", "results.tsv"])
def test_run_files_protected_even_when_allowed(tmp_path, target):
    p = make_project(tmp_path, {1: f'open("{target}", "a").write("TAMPERED\\n")', 2: HONEST},
                     allowed='[val.txt, notes.txt, "*.md", "*.tsv"]')
    original = (p.repo / "program.md").read_bytes()
    res = p.run("--cycles", "2")
    assert res.returncode == 0, res.stderr
    assert [r["status"] for r in p.rows()] == ["baseline", "violation", "keep"]
    assert (p.repo / "program.md").read_bytes() == original
    assert "TAMPERED" not in git(p.repo, "show", f"{p.branch()}:program.md", env=p.env)


def test_forbidden_beats_allowed(tmp_path):
    p = make_project(tmp_path, {1: 'W("src/vendor/x.py", "x")', 2: 'W("src/ok.py", "x")'},
                     extra='forbidden: ["src/vendor/**"]')
    assert p.run("--cycles", "2").returncode == 0
    assert [r["status"] for r in p.rows()][1] == "violation"
    # src/ok.py changes nothing the verifier sees: a tie -> discard
    assert [r["status"] for r in p.rows()][2] == "discard"


def test_users_own_hooks_and_fsmonitor_never_run_during_a_run(tmp_path):
    p = make_project(tmp_path, {1: 'W("val.txt", "30")', 2: 'W("val.txt", "50")'})
    hooks = p.repo / ".git" / "hooks"
    for n in ("post-commit", "pre-commit", "reference-transaction", "post-checkout", "post-index-change",
              "pre-auto-gc", "post-rewrite"):
        (hooks / n).write_text(f"#!/bin/sh\necho {n} >> {p.out}/pwned\n")
        os.chmod(hooks / n, 0o755)
    evil = p.out / "evil.sh"
    evil.write_text(f"#!/bin/sh\necho fsmonitor >> {p.out}/pwned\n")
    os.chmod(evil, 0o755)
    git(p.repo, "config", "core.fsmonitor", str(evil), env=p.env)
    res = p.run("--cycles", "2")
    assert res.returncode == 0, res.stderr
    assert [r["status"] for r in p.rows()] == ["baseline", "keep", "discard"]
    assert not (p.out / "pwned").exists(), (p.out / "pwned").read_text()


def test_generator_cannot_see_user_untracked_files(tmp_path):
    p = make_project(tmp_path, {1: 'W("val.txt", "30" if not os.path.exists("secret.env") else "1")'})
    (p.repo / "secret.env").write_text("TOKEN=x\n")
    assert p.run("--cycles", "1").returncode == 0
    assert float(p.rows()[1]["metric"]) == 30.0


def test_violation_lesson_names_the_path(tmp_path):
    p = make_project(tmp_path, {1: textwrap.dedent(CHEATS["edit-verifier"])})
    assert p.run("--cycles", "1").returncode == 0
    row = p.rows()[1]
    assert row["status"] == "violation"
    assert "score.py" in row.get("lesson", "") + p.experiments()


def test_staged_blob_never_reaches_the_commit(tmp_path):
    """The generator stages an evil verifier in the worktree's index but leaves the disk alone and
    improves val.txt: whatever the status, the verifier on the branch stays the original."""
    p = make_project(tmp_path, {1: '''
        blob = sh("echo \\"print(\'score: -1000\')\\" | git hash-object -w --stdin")
        sh(f"git update-index --cacheinfo 100644,{blob},score.py")
        W("val.txt", "30")
    ''', 2: HONEST.replace("30", "29")})
    original = (p.repo / "score.py").read_bytes()
    assert p.run("--cycles", "2").returncode == 0
    assert p.statuses()[1] in ("keep", "violation")
    assert p.statuses()[2] == "keep"
    for rev in git(p.repo, "rev-list", p.branch(), env=p.env).split():
        assert p.show(rev, "score.py") == original
    assert git(p.worktree(), "diff", "--cached", "--name-only", env=p.env) == ""


def test_empty_commit_in_worktree_is_harmless(tmp_path):
    """Moving the worktree's HEAD without touching a file: no_change or violation, and no trace."""
    p = make_project(tmp_path, {1: 'sh("git -c core.hooksPath=/dev/null commit -q --allow-empty -m TAMPERED")',
                                2: HONEST})
    start = git(p.repo, "rev-parse", "HEAD", env=p.env)
    assert p.run("--cycles", "2").returncode == 0
    assert p.statuses()[1] in ("no_change", "violation")
    assert p.statuses()[2] == "keep"
    assert len(p.branch_commits(start)) == 1
    assert "TAMPERED" not in git(p.repo, "log", "--format=%B", p.branch(), env=p.env)
    assert git(p.worktree(), "rev-parse", "HEAD", env=p.env) == p.branch_head()
