"""Units of autoloop's own trusted base: the frozen git config, shell strings' words, journal
escaping, bounded reads, fresh log files, preloading. Real git and real files throughout."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from autoloop.process import logfile, proc
from autoloop.engine import trust
from autoloop.journal.ledger import escape_controls, quote_path
from autoloop.process.executables import all_words
from autoloop.program.scope_rules import library_shadow
from autoloop.git.gitrun import freeze_outer_config, git, git_env, thaw_outer_config


def test_frozen_config_keeps_values_includes_and_attributes_and_ignores_later_edits(make_repo, tmp_path, isolated_env):
    repo = make_repo({"a.txt": "x\n"})
    home = isolated_env
    (home / "inc.cfg").write_text('[filter "lfs"]\n\tclean = git-lfs clean -- %f\n\trequired = true\n'
                                  '[alias]\n\tq = "!echo \\"quoted\\" \\\\ back\\tslash"\n')
    (home / "attrs").write_text("*.bin filter=lfs\n")
    with open(home / ".gitconfig", "a") as f:
        f.write(f"[include]\n\tpath = {home / 'inc.cfg'}\n[core]\n\tattributesFile = {home / 'attrs'}\n"
                f'[url "https://example.com/a.b/"]\n\tinsteadOf = ex:\n[includeIf "gitdir:{repo}/"]\n'
                f"\tpath = {home / 'cond.cfg'}\n"
                f'[url "https://x-access:SECRET-TOKEN@github.com/"]\n\tinsteadOf = https://github.com/\n'
                f'[credential]\n\thelper = "!echo password=SECRET-TOKEN"\n'
                f'[http "https://github.com/"]\n\textraHeader = "AUTHORIZATION: basic SECRET-TOKEN"\n')
    (home / "cond.cfg").write_text("[user]\n\tname = Conditional\n")
    want = {k: git(repo, "config", "--get", k).strip() for k in
            ("filter.lfs.clean", "filter.lfs.required", "alias.q", "url.https://example.com/a.b/.insteadof", "user.name")}
    assert want["user.name"] == "Conditional"
    try:
        sources = freeze_outer_config(repo, tmp_path / "frozen")
        assert {home / "inc.cfg", home / "attrs", home / "cond.cfg", home / ".gitconfig"} <= set(sources)
        (home / "inc.cfg").write_text('[filter "lfs"]\n\tclean = evil\n')
        (home / "attrs").write_text("* filter=evil\n")
        got = {k: git(repo, "config", "--get", k).strip() for k in want}
        assert got == want
        # a credential is not copied into autoloop's state (its git calls never reach a remote)
        assert "SECRET-TOKEN" not in (tmp_path / "frozen" / "config").read_text()
        assert git(repo, "check-attr", "filter", "--", "x.bin", "x.txt").splitlines() == [
            "x.bin: filter: lfs", "x.txt: filter: unspecified"]
        assert git_env()["GIT_NO_REPLACE_OBJECTS"] == "1"
    finally:
        thaw_outer_config()
    assert git_env()["GIT_CONFIG_GLOBAL"] == str(home / ".gitconfig")   # thawed: yours again


@pytest.mark.parametrize("cmd,named", [
    ("bash -c 'cd . && python score.py | tail -1'", "score.py"),
    ("sh -c \"python -m scorer; true\"", "scorer"),
    ("python run.py --config=conf/eval.yaml", "conf/eval.yaml"),
    ("bash -lc 'sh -c \"python deep.py\"'", "deep.py"),
])
def test_words_of_nested_shell_strings(cmd, named):
    assert named in all_words(cmd)


def test_escape_controls_and_quote_path():
    assert escape_controls("a\x1b[2Jb\u202ec\x07") == "a\\x1b[2Jb\\u202ec\\x07"
    assert escape_controls("plain é ✓") == "plain é ✓"
    assert quote_path("x\n## Cycle 99") == '"x\\n## Cycle 99"'
    assert quote_path('a"b') == '"a\\"b"'
    assert quote_path("src/ok é.py") == "src/ok é.py"
    assert "\n" not in quote_path("a\nb") and "\x1b" not in quote_path("a\x1bb")


def test_read_regular_neither_follows_links_nor_blocks_on_a_fifo(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("SECRET")
    (tmp_path / "link").symlink_to(secret)
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    (tmp_path / "big").write_bytes(b"a" * 100 + b"END")
    done = threading.Event()

    def reads() -> None:
        assert logfile.read_regular(tmp_path / "link", 100) == b""
        assert logfile.read_regular(tmp_path / "fifo", 100) == b""
        assert logfile.read_regular(tmp_path / "dir", 100) == b""
        assert logfile.read_regular(tmp_path / "big", 10) == b"a" * 10
        assert logfile.read_regular(tmp_path / "big", 3, tail=True) == b"END"
        done.set()

    t = threading.Thread(target=reads, daemon=True)
    t.start()
    t.join(10)
    assert done.is_set(), "a read blocked"


@pytest.mark.parametrize("plant", ["symlink", "folder", "fifo"])
def test_a_commands_log_file_is_made_afresh_whatever_was_planted(tmp_path, plant):
    victim = tmp_path / "victim"
    victim.write_text("yours\n")
    out = tmp_path / "logs" / "v.out"
    out.parent.mkdir()
    {"symlink": lambda: out.symlink_to(victim), "folder": lambda: (out.mkdir(), (out / "x").write_text("")),
     "fifo": lambda: os.mkfifo(out)}[plant]()
    r = proc.run(["sh", "-c", "echo score: 1"], cwd=tmp_path, env=dict(os.environ), timeout=30,
                 log_stem=tmp_path / "logs" / "v")
    assert r.ok and victim.read_text() == "yours\n"
    assert not out.is_symlink() and out.read_text() == "score: 1\n"


def test_an_output_renamed_over_by_the_command_is_put_back_from_the_descriptor(tmp_path):
    script = "import os; print('score: 7', flush=True); p = os.readlink('/proc/self/fd/1'); " \
             "open(p + '.x', 'w').write('score: -1000\\n'); os.rename(p + '.x', p)"
    r = proc.run([sys.executable, "-c", script], cwd=tmp_path, env=dict(os.environ), timeout=30,
                 log_stem=tmp_path / "v")
    assert r.ok and (tmp_path / "v.out").read_text() == "score: 7\n"


def test_library_shadow_only_where_the_script_looks_first():
    assert library_shadow("src/pathlib.py", ["", "src"]) == "pathlib"
    assert library_shadow("src/json/__init__.py", ["", "src"]) == "json"
    assert library_shadow("src/deeper/json.py", ["", "src"]) is None
    assert library_shadow("src/mymodel.py", ["", "src"]) is None
    assert library_shadow("other/json.py", ["", "src"]) is None


def test_preload_loads_statistics_only_when_asked():
    code = ("import sys; from autoloop.engine import trust; trust.preload(statistics={s}); "
            "print('scipy.stats' in sys.modules, 'autoloop.journal.facts' in sys.modules)")
    outs = [subprocess.run([sys.executable, "-c", code.format(s=s)], capture_output=True, text=True, check=True).stdout.split()
            for s in (False, True)]
    assert outs == [["False", "True"], ["True", "True"]]


def test_undumpable_sets_the_flag():
    code = "from autoloop.engine import trust; print(trust.dumpable(), trust.undumpable(), trust.dumpable())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "True", "False"]


def test_code_given_to_an_interpreter_is_not_a_command_line():
    """`python -c "…open('val.txt')…"` reads val.txt as data; it does not run it."""
    assert "val.txt" not in all_words("python -c \"print(open('val.txt').read())\"")
