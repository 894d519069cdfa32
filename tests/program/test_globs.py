"""Glob semantics and PathRules, table by table."""

from __future__ import annotations

import pytest

from autoloop.program.globs import (PathRules, compile_pattern, is_git_name, is_git_path, path_problem,
                            pattern_problem, touches_git)

# (pattern, path, matches?)
MATCHES = [
    # literal file
    ("train.py", "train.py", True),
    ("train.py", "src/train.py", False),
    ("train.py", "train.pyc", False),
    ("train.py", "train_py", False),          # `.` is literal, not "any character"
    ("src/train.py", "src/train.py", True),
    ("src/train.py", "train.py", False),
    # a literal names a directory too: everything under it
    ("model", "model", True),
    ("model", "model/a.py", True),
    ("model", "model/deep/er/a.py", True),
    ("model", "modelx", False),
    ("model", "modelx/a.py", False),
    ("model", "other/model/a.py", False),
    ("src/model", "src/model/a.py", True),
    # trailing slash: everything under it, not the name itself
    ("model/", "model/a.py", True),
    ("model/", "model/x/y.py", True),
    ("model/", "model", False),
    ("src/*/", "src/pkg/a.py", True),
    ("src/*/", "src/a.py", False),
    # * stays within one segment
    ("*.py", "a.py", True),
    ("*.py", ".py", True),
    ("*.py", "src/a.py", False),
    ("*.py", "a.pyc", False),
    ("src/*.py", "src/a.py", True),
    ("src/*.py", "src/sub/a.py", False),
    ("src/*", "src/a", True),
    ("src/*", "src", False),
    ("src/*", "src/a/b", False),
    ("*", "anything", True),
    ("*", "a/b", False),
    ("*", ".hidden", True),                 # like .gitignore, * matches leading dots
    ("a*b", "ab", True),
    ("a*b", "axxb", True),
    ("a*b", "ax/b", False),
    ("a**b", "axxb", True),                  # ** inside a segment is just *
    ("a**b", "ax/b", False),
    # ?
    ("?.py", "a.py", True),
    ("?.py", "ab.py", False),
    ("?.py", ".py", False),
    ("a?b", "a/b", False),
    # classes
    ("[abc].py", "b.py", True),
    ("[abc].py", "d.py", False),
    ("[a-c].py", "c.py", True),
    ("[a-c].py", "C.py", False),             # case-sensitive, like git
    ("[!abc].py", "d.py", True),
    ("[!abc].py", "a.py", False),
    ("[^abc].py", "d.py", True),
    ("[^abc].py", "a.py", False),
    ("x[!a]y", "x/y", False),                # a negated class still never matches /
    ("[]]x", "]x", True),                    # ] first in a class is a member
    ("[!]]x", "ax", True),
    ("[!]]x", "]x", False),
    ("[[]x", "[x", True),
    ("[^]x", "^x", False),                   # `[^]x`: unclosed class after ], so literal
    ("[^]x", "[^]x", True),
    ("a[b", "a[b", True),                    # unclosed [ is a literal [
    ("a[b", "ab", False),
    ("[-a]", "-", True),
    ("v[0-9]/x", "v7/x", True),
    ("v[0-9]/x", "vx/x", False),
    # ** whole segments
    ("**", "a", True),
    ("**", "a/b/c", True),
    ("a/**", "a/x", True),
    ("a/**", "a/x/y/z", True),
    ("a/**", "a", False),
    ("a/**", "ab/x", False),
    ("a/**", "b/a/x", False),
    ("**/x.py", "x.py", True),
    ("**/x.py", "d/x.py", True),
    ("**/x.py", "d/e/f/x.py", True),
    ("**/x.py", "dx.py", False),
    ("**/x.py", "d/x.pyc", False),
    ("**/*.py", "a.py", True),
    ("**/*.py", "a/b/c.py", True),
    ("**/*.py", "a/b/c.txt", False),
    ("a/**/b", "a/b", True),
    ("a/**/b", "a/x/b", True),
    ("a/**/b", "a/x/y/b", True),
    ("a/**/b", "a/xb", False),
    ("a/**/b", "a/b/c", False),
    ("a/**/b", "x/a/b", False),
    ("a/**/**/b", "a/b", True),
    ("a/**/**/b", "a/x/y/b", True),
    ("**/test_*.py", "tests/unit/test_a.py", True),
    ("**/test_*.py", "tests/unit/a_test.py", False),
    ("model/**/*.py", "model/a.py", True),
    ("model/**/*.py", "model/x/a.py", True),
    ("model/**/*.py", "model/x/a.txt", False),
    # regex metacharacters in patterns are literal
    ("a+b.py", "a+b.py", True),
    ("a+b.py", "aab.py", False),
    ("(x)|y", "(x)|y", True),
    ("(x)|y", "y", False),
    ("a$b^c", "a$b^c", True),
    ("{a,b}.py", "{a,b}.py", True),          # no brace expansion
    ("{a,b}.py", "a.py", False),
    # unusual but legal file names
    ("*", "new\nline", True),
    ("model", "model/new\nline", True),
    ("name with spaces.txt", "name with spaces.txt", True),
    ("*.txt", "ünïcödé.txt", True),
]


@pytest.mark.parametrize(("pattern", "path", "expected"), MATCHES)
def test_pattern_matching(pattern: str, path: str, expected: bool) -> None:
    assert bool(compile_pattern(pattern).fullmatch(path)) is expected


@pytest.mark.parametrize(("pattern", "path", "expected"), MATCHES)
def test_path_rules_allow_exactly_what_the_pattern_matches(pattern: str, path: str,
                                                           expected: bool) -> None:
    assert PathRules([pattern]).allows(path) is expected


# (pattern, problem or None)
PATTERN_PROBLEMS = [
    ("train.py", None),
    ("model/**", None),
    ("model/", None),
    ("**", None),
    ("a/b/c", None),
    (".github/workflows/ci.yml", None),
    ("", "is empty"),
    ("   ", "is empty"),
    ("/etc/passwd", "is absolute; patterns are relative to the repository root"),
    ("/", "is absolute; patterns are relative to the repository root"),
    ("..", "contains '..'; patterns cannot leave the repository"),
    ("../x", "contains '..'; patterns cannot leave the repository"),
    ("a/../b", "contains '..'; patterns cannot leave the repository"),
    ("a/..", "contains '..'; patterns cannot leave the repository"),
    ("./train.py", "contains a '.' segment; write the path without './'"),
    ("a/./b", "contains a '.' segment; write the path without './'"),
    ("a//b", "has an empty path segment ('//')"),
    ("a//", "has an empty path segment ('//')"),
    ("src\\a.py", "contains a backslash; separate directories with '/'"),
    ("C:\\x", "contains a backslash; separate directories with '/'"),
    ("[z-a].py", "is not a valid glob (bad character range z-a at position 1)"),
]


@pytest.mark.parametrize(("pattern", "expected"), PATTERN_PROBLEMS)
def test_pattern_problem(pattern: str, expected: str | None) -> None:
    assert pattern_problem(pattern) == expected


@pytest.mark.parametrize("pattern", [p for p, problem in PATTERN_PROBLEMS if problem])
def test_path_rules_refuse_bad_patterns(pattern: str) -> None:
    with pytest.raises(ValueError, match="pattern"):
        PathRules(["ok.py"], [pattern])


# (pattern, names .git on purpose?)
TOUCHES_GIT = [
    (".git", True),
    (".git/**", True),
    (".git/config", True),
    (".git/", True),
    (".GIT/config", True),                   # a case-insensitive filesystem
    (".Git", True),
    (".git.", True),                         # NTFS drops trailing dots
    ("git~1/config", True),                  # NTFS short name
    (".g\u200cit/config", True),             # HFS+ ignores zero-width characters
    ("sub/.git/config", True),               # a nested repository's
    ("**/.git/**", True),
    (".*", True),
    (".g*", True),
    (".g?t", True),
    ("?git", True),
    ("[.]git", True),
    (".gi[a-z]", True),
    ("*it", True),
    ("*", False),                            # generic wildcards: .git is excluded anyway
    ("**", False),
    ("**/*", False),
    ("**/*.py", False),
    ("src/*", False),
    (".gitignore", False),
    (".gitattributes", False),
    (".github/**", False),
    (".git-blame-ignore-revs", False),
    ("git/x", False),
    ("my.git", False),
    (".[!g]*", False),
]


@pytest.mark.parametrize(("pattern", "expected"), TOUCHES_GIT)
def test_touches_git(pattern: str, expected: bool) -> None:
    assert touches_git(pattern) is expected


GIT_PATHS = [
    (".git", True),
    (".git/config", True),
    (".git/hooks/pre-commit", True),
    ("sub/.git", True),
    ("sub/.git/HEAD", True),
    (".GIT/config", True),
    (".Git/HEAD", True),
    (".git./config", True),
    (".git /config", True),
    ("GIT~1/config", True),
    (".g\u200dit/config", True),
    ("\ufeff.git/config", True),
    (".gitignore", False),
    (".github/ci.yml", False),
    ("a.git/x", False),
    ("git", False),
    ("src/git.py", False),
]


@pytest.mark.parametrize(("path", "expected"), GIT_PATHS)
def test_is_git_path(path: str, expected: bool) -> None:
    assert is_git_path(path) is expected


@pytest.mark.parametrize(("name", "expected"), [(".git", True), (".GiT", True),
                                                ("git", False), (".gitx", False)])
def test_is_git_name(name: str, expected: bool) -> None:
    assert is_git_name(name) is expected


@pytest.mark.parametrize("path", [p for p, inside in GIT_PATHS if inside])
def test_git_paths_are_never_allowed_even_by_everything(path: str) -> None:
    assert PathRules(["**", "*", ".git", ".GIT"]).why_not(path) == "inside .git"


PATH_PROBLEMS = [
    ("a.py", None),
    ("a/b/c.py", None),
    ("...", None),                           # a legal (if odd) file name
    ("", "empty path"),
    ("/abs", "absolute path"),
    ("a/../.git/config", "not a normalized repo-relative path"),
    ("../x", "not a normalized repo-relative path"),
    ("./a.py", "not a normalized repo-relative path"),
    ("a//b", "not a normalized repo-relative path"),
    ("a/", "not a normalized repo-relative path"),
    ("a/.", "not a normalized repo-relative path"),
]


@pytest.mark.parametrize(("path", "expected"), PATH_PROBLEMS)
def test_path_problem(path: str, expected: str | None) -> None:
    assert path_problem(path) == expected


@pytest.mark.parametrize(("path", "expected"), [(p, e) for p, e in PATH_PROBLEMS if e])
def test_unnormalized_paths_are_refused_not_normalized(path: str, expected: str) -> None:
    # `model/../x` would otherwise slip past `model/**` into anything.
    assert PathRules(["**", "model/**"]).why_not(path) == expected


RULES = PathRules(
    allowed=["train.py", "model/**", "configs", "**/*.yaml"],
    forbidden=["model/vendor/**", "**/secret.yaml"],
    protected={"program.md": "program file", "results.tsv": "journal", ".autoloop": "state",
               "eval/prepare.py": "verifier"},
)

# (path, why_not)
WHY_NOT = [
    ("train.py", None),
    ("model/net.py", None),
    ("model/layers/attn.py", None),
    ("configs/a.json", None),
    ("configs", None),
    ("x/y/z.yaml", None),
    ("a.yaml", None),
    ("README.md", "not in allowed"),
    ("model", "not in allowed"),
    ("src/train.py", "not in allowed"),
    ("model/vendor/lib.py", "forbidden by 'model/vendor/**'"),
    ("model/vendor/deep/lib.py", "forbidden by 'model/vendor/**'"),
    ("configs/secret.yaml", "forbidden by '**/secret.yaml'"),
    ("secret.yaml", "forbidden by '**/secret.yaml'"),
    ("program.md", "protected (program file)"),
    ("results.tsv", "protected (journal)"),
    (".autoloop", "protected (state)"),
    (".autoloop/ledger.jsonl", "protected (state)"),
    (".autoloopx", "not in allowed"),
    ("eval/prepare.py", "protected (verifier)"),
    ("sub/program.md", "not in allowed"),    # protection is by exact path, not by name
    (".git/config", "inside .git"),
    ("model/.git/config", "inside .git"),
    ("model/../README.md", "not a normalized repo-relative path"),
]


@pytest.mark.parametrize(("path", "expected"), WHY_NOT)
def test_why_not(path: str, expected: str | None) -> None:
    assert RULES.why_not(path) == expected


@pytest.mark.parametrize(("path", "expected"), WHY_NOT)
def test_allows_agrees_with_why_not(path: str, expected: str | None) -> None:
    assert RULES.allows(path) is (expected is None)


def test_protected_wins_over_allowed() -> None:
    assert PathRules(["**"], protected={"program.md": "program file"}).why_not(
        "program.md") == "protected (program file)"


def test_protected_without_labels() -> None:
    assert PathRules(["**"], protected=["program.md"]).why_not("program.md") == "protected"


def test_forbidden_wins_over_allowed_literal() -> None:
    assert PathRules(["train.py"], ["train.py"]).why_not("train.py") == "forbidden by 'train.py'"


def test_first_forbidding_pattern_is_named() -> None:
    rules = PathRules(["**"], ["*.py", "a*"])
    assert rules.why_not("a.py") == "forbidden by '*.py'"


def test_reasons_of_several_paths() -> None:
    assert [RULES.why_not(p) for p in ["README.md", "train.py", ".git/HEAD"]] == [
        "not in allowed", None, "inside .git"]


def test_no_allowed_patterns_allow_nothing() -> None:
    assert PathRules([]).why_not("a.py") == "not in allowed"


@pytest.mark.parametrize("protected", ["/abs", "a/../b", ""])
def test_path_rules_refuse_bad_protected_paths(protected: str) -> None:
    with pytest.raises(ValueError, match="protected path"):
        PathRules(["**"], protected={protected: "x"})


def test_rules_keep_their_patterns() -> None:
    assert (RULES.allowed, RULES.forbidden) == (("train.py", "model/**", "configs", "**/*.yaml"),
                                                ("model/vendor/**", "**/secret.yaml"))
