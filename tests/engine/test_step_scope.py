"""Step 3 (autoloop.engine.steps.scope): the change set comes from the disk, is checked against the
rules, and what the generator changed outside its tree is undone and voids the cycle."""

from __future__ import annotations

from autoloop.engine.steps.record import record
from tests.engine_fixture import engine  # noqa: F401 (fixture)
from tests.scripts.e2e import git


def test_an_allowed_change_passes_with_its_change_set(engine):
    e = engine({"*": 'W("val.txt", "39"); W("src/new.py", "x = 1\\n")'})
    c = e.round(upto="scope").cycles[0]
    assert c.outcome is None
    assert sorted(ch.path for ch in c.changes if ch.after is not None and ch.after.kind == "f") == \
        ["src/new.py", "val.txt"]


def test_a_change_outside_allowed_is_a_violation(engine):
    e = engine({"*": 'W("val.txt", "39"); W("score.py", "print(\'score: 0\')")'})
    c = e.round(upto="scope").cycles[0]
    assert c.outcome is not None and c.outcome.status == "violation"
    assert "score.py" in c.outcome.lesson and "score.py" in c.outcome.changed


def test_a_symlink_is_a_violation(engine):
    e = engine({"*": 'os.makedirs("src"); os.symlink("../score.py", "src/link.py")'})
    c = e.round(upto="scope").cycles[0]
    assert c.outcome is not None and c.outcome.status == "violation" and "symlink" in c.outcome.lesson


def test_nothing_changed_is_no_change(engine):
    e = engine({"*": 'hyp("think only")'})
    c = e.round(upto="scope").cycles[0]
    assert c.outcome is not None and c.outcome.status == "no_change"


def test_a_moved_run_branch_is_put_back_and_voids_the_cycle(engine):
    # unsandboxed: in the sandbox git's files are read-only and the move cannot happen at all
    e = engine({"*": 'W("val.txt", "39"); sh("git commit -qam sneaky && git branch -f autoloop/t1 HEAD")'},
               extra="sandbox: none")
    c = e.round(upto="scope").cycles[0]
    assert c.outcome is not None and c.outcome.status == "violation"
    assert "moved the run branch" in c.outcome.lesson
    assert e.project.branch_head() == e.state.incumbent


def test_generator_error_comes_after_violations(engine):
    e = engine({"*": 'W("val.txt", "39"); sys.exit(2)'})
    c = e.round(upto="scope").cycles[0]
    assert c.outcome is not None and c.outcome.status == "gen_error" and c.outcome.changed == ["val.txt"]
    assert git(e.project.repo, "status", "--porcelain", env=e.project.env) == ""


def _file_at(e, commit: str, path: str) -> str:
    return git(e.project.repo, "show", f"{commit}:{path}", env=e.project.env)


def test_a_violations_change_is_committed_as_found_on_disk(engine):
    # `autoloop show` shows what a violation changed: a commit of the change, on the incumbent
    e = engine({"*": 'W("val.txt", "39"); W("score.py", "print(\'score: 0\')")'})
    c = e.round(upto="scope").cycles[0]
    assert c.outcome is not None and c.outcome.status == "violation" and c.candidate is None
    assert c.found is not None and not c.found_note
    assert git(e.project.repo, "rev-parse", f"{c.found}^", env=e.project.env) == e.state.incumbent
    assert _file_at(e, c.found, "score.py") == "print('score: 0')" and _file_at(e, c.found, "val.txt") == "39"
    # it moves nothing: the branch is where it was, and no file of the checkout changed
    assert e.project.branch_head() == e.state.incumbent
    assert git(e.project.repo, "status", "--porcelain", env=e.project.env) == ""


def test_a_symlink_violation_is_committed_as_a_link(engine):
    e = engine({"*": 'os.makedirs("src"); os.symlink("../score.py", "src/link.py")'})
    c = e.round(upto="scope").cycles[0]
    assert c.found is not None
    mode = git(e.project.repo, "ls-tree", c.found, "src/link.py", env=e.project.env).split()[0]
    assert mode == "120000" and _file_at(e, c.found, "src/link.py") == "../score.py"


def test_a_generator_errors_change_is_committed_and_none_without_one(engine):
    # the fixture's engine has no baseline record: its cycles count from 0
    e = engine({0: 'W("val.txt", "39"); sys.exit(2)', 1: "sys.exit(2)", 2: 'hyp("think only")'})
    for want_change in (True, False, False):
        rnd = e.round()
        c = rnd.cycles[0]
        assert (c.found is not None) == want_change, (c.n, c.outcome)
        if want_change:
            assert _file_at(e, c.found, "val.txt") == "39"
        record(e.state, rnd)


def test_special_files_alone_give_no_commit_and_say_why(engine):
    e = engine({"*": 'os.mkfifo("val.fifo")'})
    c = e.round(upto="scope").cycles[0]
    assert c.outcome is not None and c.outcome.status == "violation" and "special file" in c.outcome.lesson
    assert c.found is None and "nothing that can be recorded changed" in c.found_note


def test_a_hard_links_bytes_are_not_recorded(engine, tmp_path):
    # its bytes are another file's, perhaps one of yours outside the tree: never copied into git
    outside = tmp_path / "p" / "out" / "secret.txt"
    outside.parent.mkdir(parents=True, exist_ok=True)
    outside.write_text("do not copy me\n")
    # unsandboxed: in the sandbox the file is on another mount, and a link to it cannot be made
    e = engine({"*": f'W("val.txt", "39"); os.makedirs("src"); os.link({str(outside)!r}, "src/linked.txt")'},
               extra="sandbox: none")
    c = e.round(upto="scope").cycles[0]
    assert c.outcome is not None and c.outcome.status == "violation" and "hard link" in c.outcome.lesson
    assert c.found is not None and _file_at(e, c.found, "val.txt") == "39"
    files = git(e.project.repo, "ls-tree", "-r", "--name-only", c.found, env=e.project.env).split()
    assert "val.txt" in files and "src/linked.txt" not in files


def test_a_nested_git_folder_is_left_out_of_the_found_change(engine):
    # a tree with a .git entry is refused by git fsck and by a server's receive checks: the
    # refs that keep it could never be pushed
    e = engine({"*": 'W("val.txt", "39"); W("src/.git/config", "[core]"); W("src/.GIT/x", "y"); sys.exit(2)'})
    c = e.round(upto="scope").cycles[0]
    assert c.outcome is not None and c.found is not None, (c.outcome, c.found_note)
    files = git(e.project.repo, "ls-tree", "-r", "--name-only", c.found, env=e.project.env).split()
    assert "val.txt" in files and not [f for f in files if ".git/" in f.lower()]
    assert _file_at(e, c.found, "val.txt") == "39"
    git(e.project.repo, "fsck", "--strict", "--no-dangling", env=e.project.env)
