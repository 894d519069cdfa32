"""EditTool: every command, every refusal, on a real directory. Refused writes leave the disk
byte-identical."""

from __future__ import annotations

import hashlib
import os
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import pytest

from autoloop.generators.edit_tool import EditTool, ToolResult, tool_notes

ALLOWED = ("train.py", "model/**", "notes/*.md")


def is_allowed(rel: str) -> bool:
    return any(fnmatch(rel, g) for g in ALLOWED)


def snapshot(root: Path) -> dict[str, str]:
    """Every path under root (links not followed) -> kind + content hash."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest() + f":{oct(p.stat().st_mode)}"
    return out


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    (root / "model").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (root / "train.py").write_text("lr = 0.1\nepochs = 3\nprint(lr)\n")
    (root / "verify.py").write_text("print('metric: 1')\n")
    (root / "model" / "net.py").write_text("layers = 2\n")
    (root / "notes").mkdir()
    return root


@pytest.fixture
def tool(tree: Path) -> EditTool:
    return EditTool(tree, is_allowed, allowed_hint=ALLOWED)


def run(tool: EditTool, **args: Any) -> ToolResult:
    return tool.run(args)


# ---------------------------------------------------------------- view

def test_view_file_numbers_lines(tool: EditTool) -> None:
    r = run(tool, command="view", path="train.py")
    assert not r.is_error
    assert r.content == "     1\tlr = 0.1\n     2\tepochs = 3\n     3\tprint(lr)\n"
    assert tool.calls[-1].status == "ok" and tool.calls[-1].rel == "train.py"


def test_view_range(tool: EditTool) -> None:
    assert run(tool, command="view", path="train.py", view_range=[2, 3]).content == \
        "     2\tepochs = 3\n     3\tprint(lr)\n"
    assert run(tool, command="view", path="train.py", view_range=[2, -1]).content == \
        "     2\tepochs = 3\n     3\tprint(lr)\n"
    assert run(tool, command="view", path="train.py", view_range=[1, 1]).content == "     1\tlr = 0.1\n"


@pytest.mark.parametrize("bad", [[0, 2], [3, 2], [1, 9], [5, -1], [1], "1-2", [1.5, 2], [True, 2]])
def test_view_range_invalid(tool: EditTool, bad: object) -> None:
    r = run(tool, command="view", path="train.py", view_range=bad)
    assert r.is_error and "view_range" in r.content
    assert tool.calls[-1].status == "error"


def test_view_reads_non_allowed_files(tool: EditTool) -> None:
    r = run(tool, command="view", path="verify.py")
    assert not r.is_error and "metric" in r.content


def test_view_directory_listing(tool: EditTool, tree: Path) -> None:
    (tree / "model" / "deep" / "deeper").mkdir(parents=True)
    (tree / "model" / "deep" / "deeper" / "x.py").write_text("")
    (tree / ".hidden").write_text("")
    r = run(tool, command="view", path=".")
    assert not r.is_error
    listing = r.content.splitlines()[1:]
    assert "train.py" in listing and "model/" in listing and "model/net.py" in listing
    assert "model/deep/" in listing
    assert "model/deep/deeper/" not in listing      # two levels deep only
    assert not any(".git" in line or ".hidden" in line for line in listing)


def test_view_directory_listing_subdir_and_absolute(tool: EditTool, tree: Path) -> None:
    r = run(tool, command="view", path=str(tree / "model"))
    assert not r.is_error and "model/net.py" in r.content


def test_view_directory_rejects_view_range(tool: EditTool) -> None:
    assert run(tool, command="view", path="model", view_range=[1, 2]).is_error


def test_view_directory_listing_is_bounded(tree: Path) -> None:
    for i in range(30):
        (tree / "notes" / f"n{i:02}.md").write_text("")
    t = EditTool(tree, is_allowed, max_dir_entries=10)
    r = t.run({"command": "view", "path": "notes"})
    assert not r.is_error
    assert "clipped at 10 entries" in r.content
    assert len([l for l in r.content.splitlines() if l.startswith("notes/n")]) == 10


def test_view_output_is_bounded(tree: Path) -> None:
    (tree / "big.txt").write_text("x" * 100 + "\n" * 1 + ("y" * 80 + "\n") * 2000)
    t = EditTool(tree, is_allowed, max_view_chars=1000)
    r = t.run({"command": "view", "path": "big.txt"})
    assert not r.is_error
    assert len(r.content) < 1200
    assert "<response clipped:" in r.content and "view_range" in r.content


def test_view_missing(tool: EditTool) -> None:
    r = run(tool, command="view", path="nope.py")
    assert r.is_error and "does not exist" in r.content
    assert tool.calls[-1].status == "error"


def test_view_empty_file(tool: EditTool, tree: Path) -> None:
    (tree / "empty.py").write_text("")
    r = run(tool, command="view", path="empty.py")
    assert not r.is_error and "empty" in r.content


def test_view_binary_and_non_utf8_refused_as_errors(tool: EditTool, tree: Path) -> None:
    (tree / "blob.bin").write_bytes(b"\x00\x01\x02")
    (tree / "latin.txt").write_bytes("café".encode("latin-1"))
    assert "binary" in run(tool, command="view", path="blob.bin").content
    assert "UTF-8" in run(tool, command="view", path="latin.txt").content


def test_view_too_large(tree: Path) -> None:
    (tree / "huge.txt").write_text("a" * 5000)
    t = EditTool(tree, is_allowed, max_file_bytes=1000)
    r = t.run({"command": "view", "path": "huge.txt"})
    assert r.is_error and "too large" in r.content


def test_view_fifo_is_not_opened(tool: EditTool, tree: Path) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    os.mkfifo(tree / "pipe")
    r = run(tool, command="view", path="pipe")     # would block forever if it were opened
    assert r.is_error and "not a regular file" in r.content


def test_view_crlf_is_kept_out_of_numbering(tool: EditTool, tree: Path) -> None:
    (tree / "win.txt").write_bytes(b"a\r\nb\r\n")
    r = run(tool, command="view", path="win.txt")
    assert r.content == "     1\ta\r\n     2\tb\r\n"


# ---------------------------------------------------------------- create

def test_create_new_file_in_new_dir(tool: EditTool, tree: Path) -> None:
    r = run(tool, command="create", path="model/layers/attn.py", file_text="heads = 4\n")
    assert not r.is_error and "Created" in r.content
    assert (tree / "model" / "layers" / "attn.py").read_text() == "heads = 4\n"
    assert tool.written == ["model/layers/attn.py"]


def test_create_overwrites_keeping_mode(tool: EditTool, tree: Path) -> None:
    os.chmod(tree / "train.py", 0o755)
    r = run(tool, command="create", path="train.py", file_text="lr = 0.2\n")
    assert not r.is_error and "Overwrote" in r.content
    assert (tree / "train.py").read_text() == "lr = 0.2\n"
    assert (tree / "train.py").stat().st_mode & 0o777 == 0o755


def test_create_requires_file_text(tool: EditTool, tree: Path) -> None:
    before = snapshot(tree)
    r = run(tool, command="create", path="model/x.py")
    assert r.is_error and "file_text" in r.content
    assert snapshot(tree) == before


def test_create_on_directory_is_error(tool: EditTool, tree: Path) -> None:
    (tree / "model" / "sub").mkdir()
    r = run(tool, command="create", path="model/sub", file_text="x")
    assert r.is_error and "directory" in r.content


def test_create_too_large(tree: Path) -> None:
    t = EditTool(tree, is_allowed, max_file_bytes=10)
    before = snapshot(tree)
    r = t.run({"command": "create", "path": "train.py", "file_text": "x" * 100})
    assert r.is_error and "too large" in r.content
    assert snapshot(tree) == before


def test_write_through_hard_link_does_not_reach_the_other_name(tool: EditTool, tree: Path) -> None:
    os.unlink(tree / "train.py")
    os.link(tree / "verify.py", tree / "train.py")     # train.py (allowed) shares verify.py's inode
    r = run(tool, command="str_replace", path="train.py", old_str="metric: 1", new_str="metric: 0")
    assert not r.is_error
    assert (tree / "verify.py").read_text() == "print('metric: 1')\n"
    assert (tree / "train.py").read_text() == "print('metric: 0')\n"


def test_no_temp_files_left_behind(tool: EditTool, tree: Path) -> None:
    run(tool, command="str_replace", path="train.py", old_str="lr = 0.1", new_str="lr = 0.05")
    assert not [p for p in tree.rglob("*autoloop-tmp*")]


# ---------------------------------------------------------------- str_replace

def test_str_replace_exactly_once(tool: EditTool, tree: Path) -> None:
    r = run(tool, command="str_replace", path="train.py", old_str="epochs = 3", new_str="epochs = 5")
    assert not r.is_error and "line 2" in r.content
    assert (tree / "train.py").read_text() == "lr = 0.1\nepochs = 5\nprint(lr)\n"


def test_str_replace_missing_new_str_deletes(tool: EditTool, tree: Path) -> None:
    r = run(tool, command="str_replace", path="train.py", old_str="print(lr)\n")
    assert not r.is_error
    assert (tree / "train.py").read_text() == "lr = 0.1\nepochs = 3\n"


def test_str_replace_no_match(tool: EditTool, tree: Path) -> None:
    before = snapshot(tree)
    r = run(tool, command="str_replace", path="train.py", old_str="lr=0.1", new_str="x")
    assert r.is_error and "no match" in r.content
    assert snapshot(tree) == before


def test_str_replace_multiple_matches(tool: EditTool, tree: Path) -> None:
    before = snapshot(tree)
    r = run(tool, command="str_replace", path="train.py", old_str="lr", new_str="eta")
    assert r.is_error and "matches 2 times" in r.content
    assert snapshot(tree) == before
    assert tool.calls[-1].status == "error"


@pytest.mark.parametrize("old", ["", None, 3])
def test_str_replace_needs_old_str(tool: EditTool, old: object) -> None:
    assert run(tool, command="str_replace", path="train.py", old_str=old, new_str="x").is_error


def test_str_replace_bad_new_str(tool: EditTool) -> None:
    assert run(tool, command="str_replace", path="train.py", old_str="lr = 0.1", new_str=5).is_error


def test_str_replace_missing_file(tool: EditTool) -> None:
    r = run(tool, command="str_replace", path="model/none.py", old_str="a", new_str="b")
    assert r.is_error and "does not exist" in r.content


def test_str_replace_keeps_crlf(tool: EditTool, tree: Path) -> None:
    (tree / "model" / "w.py").write_bytes(b"a = 1\r\nb = 2\r\n")
    assert not run(tool, command="str_replace", path="model/w.py", old_str="b = 2", new_str="b = 3").is_error
    assert (tree / "model" / "w.py").read_bytes() == b"a = 1\r\nb = 3\r\n"


# ---------------------------------------------------------------- insert

@pytest.mark.parametrize("line,expected", [
    (0, "# top\nlr = 0.1\nepochs = 3\nprint(lr)\n"),
    (1, "lr = 0.1\n# top\nepochs = 3\nprint(lr)\n"),
    (3, "lr = 0.1\nepochs = 3\nprint(lr)\n# top\n"),
])
def test_insert_positions(tool: EditTool, tree: Path, line: int, expected: str) -> None:
    r = run(tool, command="insert", path="train.py", insert_line=line, insert_text="# top")
    assert not r.is_error
    assert (tree / "train.py").read_text() == expected


def test_insert_at_end_of_file_without_final_newline(tool: EditTool, tree: Path) -> None:
    (tree / "train.py").write_text("a\nb")
    assert not run(tool, command="insert", path="train.py", insert_line=2, insert_text="c\n").is_error
    assert (tree / "train.py").read_text() == "a\nb\nc\n"


def test_insert_multiline_text(tool: EditTool, tree: Path) -> None:
    run(tool, command="insert", path="model/net.py", insert_line=1, insert_text="x = 1\ny = 2\n")
    assert (tree / "model" / "net.py").read_text() == "layers = 2\nx = 1\ny = 2\n"


def test_insert_accepts_new_str_fallback(tool: EditTool, tree: Path) -> None:
    assert not run(tool, command="insert", path="model/net.py", insert_line=0, new_str="# hi\n").is_error
    assert (tree / "model" / "net.py").read_text().startswith("# hi\n")


@pytest.mark.parametrize("args", [
    {"insert_line": -1, "insert_text": "x"},
    {"insert_line": 4, "insert_text": "x"},
    {"insert_line": "1", "insert_text": "x"},
    {"insert_line": True, "insert_text": "x"},
    {"insert_line": 1},
    {"insert_text": "x"},
])
def test_insert_invalid(tool: EditTool, tree: Path, args: dict[str, Any]) -> None:
    before = snapshot(tree)
    r = tool.run({"command": "insert", "path": "train.py", **args})
    assert r.is_error
    assert snapshot(tree) == before


# ---------------------------------------------------------------- refusals (policy)

WRITE_CALLS: list[dict[str, Any]] = [
    {"command": "create", "file_text": "pwned\n"},
    {"command": "str_replace", "old_str": "1", "new_str": "0"},
    {"command": "insert", "insert_line": 0, "insert_text": "pwned\n"},
]


@pytest.mark.parametrize("call", WRITE_CALLS, ids=lambda c: c["command"])
def test_write_to_non_allowed_path_is_refused_and_disk_untouched(tool: EditTool, tree: Path,
                                                                  call: dict[str, Any]) -> None:
    before = snapshot(tree)
    r = tool.run({**call, "path": "verify.py"})
    assert r.is_error and r.content.startswith("Error: refused:")
    assert "not in the paths this run may change" in r.content and "train.py" in r.content
    assert snapshot(tree) == before
    assert tool.calls[-1].status == "refused" and tool.calls[-1].rel == "verify.py"
    assert tool_notes(tool.calls) == [f"refused {call['command']} verify.py: {tool.calls[-1].reason}"]


@pytest.mark.parametrize("call", WRITE_CALLS, ids=lambda c: c["command"])
def test_create_outside_allowed_does_not_even_create_dirs(tool: EditTool, tree: Path,
                                                          call: dict[str, Any]) -> None:
    before = snapshot(tree)
    r = tool.run({**call, "path": "newdir/sub/file.py"})
    assert r.is_error and "refused" in r.content
    assert snapshot(tree) == before


@pytest.mark.parametrize("path", [
    "../outside.txt", "model/../../outside.txt", "model/../train.py", "..", "./../x",
])
def test_dotdot_is_refused(tool: EditTool, tree: Path, path: str) -> None:
    before = snapshot(tree)
    for call in WRITE_CALLS + [{"command": "view"}]:
        r = tool.run({**call, "path": path})
        assert r.is_error and "refused" in r.content and "'..'" in r.content
    assert snapshot(tree) == before
    assert not (tree.parent / "outside.txt").exists()


def test_absolute_outside_is_refused(tool: EditTool, tree: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("secret\n")
    for call in WRITE_CALLS + [{"command": "view"}]:
        r = tool.run({**call, "path": str(outside)})
        assert r.is_error and "outside the work tree" in r.content
    assert outside.read_text() == "secret\n"
    r = run(tool, command="view", path="/etc/passwd")
    assert r.is_error and "outside the work tree" in r.content
    # a sibling whose name merely starts with the tree's name is outside too
    sibling = Path(str(tree) + "2")
    sibling.mkdir()
    assert "outside" in run(tool, command="view", path=str(sibling)).content


def test_absolute_inside_is_resolved(tool: EditTool, tree: Path) -> None:
    r = run(tool, command="str_replace", path=str(tree / "train.py"), old_str="lr = 0.1", new_str="lr = 1")
    assert not r.is_error
    assert tool.calls[-1].rel == "train.py"
    assert (tree / "train.py").read_text().startswith("lr = 1\n")


def test_absolute_inside_via_symlinked_root_is_resolved(tmp_path: Path, tree: Path) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(tree, target_is_directory=True)
    t = EditTool(alias, is_allowed)          # the tree was given through a link (like /tmp on macOS)
    r = t.run({"command": "view", "path": str(tree / "train.py")})
    assert not r.is_error and t.calls[-1].rel == "train.py"
    r = t.run({"command": "view", "path": str(alias / "train.py")})
    assert not r.is_error


@pytest.mark.parametrize("path", [".git/config", ".git", ".GIT/config", "model/.git/x", "./.git/HEAD"])
def test_git_is_refused_for_reading_and_writing(tool: EditTool, tree: Path, path: str) -> None:
    before = snapshot(tree)
    for call in WRITE_CALLS + [{"command": "view"}]:
        r = tool.run({**call, "path": path})
        assert r.is_error and ".git" in r.content and "refused" in r.content
    assert snapshot(tree) == before


def test_git_refused_even_if_allowlist_would_match(tree: Path) -> None:
    t = EditTool(tree, lambda rel: True)
    r = t.run({"command": "create", "path": ".git/hooks/post-checkout", "file_text": "evil"})
    assert r.is_error and ".git" in r.content
    assert not (tree / ".git" / "hooks").exists()


def test_symlink_final_component_is_refused(tool: EditTool, tree: Path) -> None:
    (tree / "model" / "link.py").symlink_to(tree / "verify.py")
    before = snapshot(tree)
    for call in WRITE_CALLS + [{"command": "view"}]:
        r = tool.run({**call, "path": "model/link.py"})
        assert r.is_error and "symbolic link" in r.content and "refused" in r.content
    assert snapshot(tree) == before
    assert (tree / "verify.py").read_text() == "print('metric: 1')\n"


def test_symlink_directory_component_is_refused(tool: EditTool, tree: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (tree / "model" / "ext").symlink_to(outside, target_is_directory=True)
    r = run(tool, command="create", path="model/ext/new.py", file_text="x")   # allowed by model/**
    assert r.is_error and "symbolic link" in r.content and "model/ext" in r.content
    assert list(outside.iterdir()) == []
    r = run(tool, command="view", path="model/ext")
    assert r.is_error and "symbolic link" in r.content


def test_dangling_symlink_is_refused(tool: EditTool, tree: Path, tmp_path: Path) -> None:
    (tree / "model" / "dangle.py").symlink_to(tmp_path / "does-not-exist.py")
    r = run(tool, command="create", path="model/dangle.py", file_text="x")
    assert r.is_error and "symbolic link" in r.content
    assert not (tmp_path / "does-not-exist.py").exists()


def test_symlink_shown_but_not_followed_in_listing(tool: EditTool, tree: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret.txt").write_text("s")
    (tree / "model" / "ext").symlink_to(outside, target_is_directory=True)
    r = run(tool, command="view", path="model")
    assert "model/ext (symlink, not followed)" in r.content and "secret" not in r.content


def test_write_to_tree_root_refused(tool: EditTool) -> None:
    r = run(tool, command="create", path=".", file_text="x")
    assert r.is_error and "refused" in r.content


def test_broken_predicate_fails_closed(tree: Path) -> None:
    def boom(rel: str) -> bool:
        raise RuntimeError("bug")

    t = EditTool(tree, boom)
    before = snapshot(tree)
    r = t.run({"command": "create", "path": "train.py", "file_text": "x"})
    assert r.is_error and "refused" in r.content
    assert snapshot(tree) == before


# ---------------------------------------------------------------- malformed input

@pytest.mark.parametrize("args", [
    None, "view train.py", ["view"], {}, {"command": "view"}, {"command": "view", "path": 3},
    {"command": "undo_edit", "path": "train.py"}, {"command": "delete", "path": "train.py"},
    {"command": "view", "path": "a\x00b"},
])
def test_malformed_calls_are_errors_not_exceptions(tool: EditTool, tree: Path, args: object) -> None:
    before = snapshot(tree)
    r = tool.run(args)
    assert r.is_error and r.content.startswith("Error:")
    assert snapshot(tree) == before
    assert tool.calls[-1].status == "error"


def test_run_json(tool: EditTool, tree: Path) -> None:
    r = tool.run_json('{"command": "str_replace", "path": "train.py", "old_str": "epochs = 3", "new_str": "epochs = 4"}')
    assert not r.is_error
    assert "epochs = 4" in (tree / "train.py").read_text()
    for raw in ['{"command": "view", "path": ', "not json", "[1, 2]", None]:
        bad = tool.run_json(raw)
        assert bad.is_error
    assert "JSON" in tool.run_json("{oops").content


def test_every_call_is_recorded(tool: EditTool) -> None:
    run(tool, command="view", path="train.py")
    run(tool, command="create", path="verify.py", file_text="x")
    run(tool, command="str_replace", path="train.py", old_str="zzz", new_str="y")
    tool.run_json("{")
    assert [(c.command, c.status) for c in tool.calls] == [
        ("view", "ok"), ("create", "refused"), ("str_replace", "error"), ("?", "error")]
    assert [c.status for c in tool.calls] == ["ok", "refused", "error", "error"]
    assert len(tool.refused) == 1 and tool.written == []
