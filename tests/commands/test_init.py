"""`autoloop init`: templates that validate, no overwriting, helpful errors."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from autoloop.errors import UsageError
from autoloop.program.globs import PathRules
from autoloop.commands.init import TEMPLATES, init_program, template_text
from autoloop.program.reader import load_program
from tests.conftest import run_cli

NAMES = list(TEMPLATES)


def test_every_shipped_template_is_listed_and_described() -> None:
    shipped = sorted(p.name[:-3] for p in resources.files("autoloop.commands").joinpath("templates").iterdir()
                     if p.name.endswith(".md"))
    assert sorted(NAMES) == shipped == ["generic", "ml", "speed", "testpass"]
    assert NAMES[0] == "generic"
    for name, description in TEMPLATES.items():
        assert description and "\n" not in description and len(description) < 90, name


@pytest.mark.parametrize("name", NAMES)
def test_every_template_validates(make_repo, name: str) -> None:
    repo = make_repo({"README.md": "x\n"})
    steps = init_program(repo, name)
    program = load_program(repo / "program.md")
    assert program.goal and program.allowed and program.verifier.command
    assert (repo / "program.md").read_text() == template_text(name)
    assert len(steps) == 3


@pytest.mark.parametrize("name", NAMES)
def test_templates_do_not_protect_their_own_allowed_files(make_repo, name: str) -> None:
    """A file named on the verifier's command line is protected from the generator: a template
    whose verifier ran an allowed file would forbid the very edit it asks for."""
    program_text = template_text(name)
    repo = make_repo({"program.md": program_text, "train.py": "", "prepare.py": "",
                      "bench/run.py": "", "measure.sh": "", "src/a.py": ""})
    program = load_program(repo / "program.md")
    rules = PathRules(program.allowed, program.forbidden, program.protected)
    from autoloop.isolation.measured_files import protected_paths   # the loop's own notion of the verifier's files
    named = set(protected_paths(program)) - set(program.protected)
    assert not [path for path in named if rules.allows(path)]


def test_writes_into_a_directory_and_returns_the_next_commands(tmp_path: Path) -> None:
    steps = init_program(tmp_path, "ml")
    target = tmp_path / "program.md"
    assert target.read_text() == template_text("ml")
    assert steps == [f"autoloop verify {target}", f"autoloop run {target} --tag first --cycles 3",
                     f"autoloop log {target}"]


def test_relative_default_path_gives_pasteable_commands(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert init_program(Path("program.md")) == [
        "autoloop verify program.md",
        "autoloop run program.md --tag first --cycles 3",
        "autoloop log program.md",
    ]
    assert (tmp_path / "program.md").read_text() == template_text("generic")


def test_a_path_with_spaces_is_quoted(tmp_path: Path) -> None:
    steps = init_program(tmp_path / "my project" / "loop.md", "speed")
    assert steps[0] == f"autoloop verify '{tmp_path}/my project/loop.md'"
    assert (tmp_path / "my project" / "loop.md").is_file()


def test_refuses_to_overwrite(tmp_path: Path) -> None:
    (tmp_path / "program.md").write_text("mine\n")
    with pytest.raises(UsageError) as err:
        init_program(tmp_path, "ml")
    assert str(err.value) == (f"{tmp_path / 'program.md'} already exists; not overwriting it "
                              f"(move it away or give another path)")
    assert "\n" not in str(err.value)
    assert (tmp_path / "program.md").read_text() == "mine\n"


def test_refuses_to_overwrite_through_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "elsewhere.md").write_text("mine\n")
    (tmp_path / "program.md").symlink_to(tmp_path / "elsewhere.md")
    with pytest.raises(UsageError, match="already exists"):
        init_program(tmp_path / "program.md")
    assert (tmp_path / "elsewhere.md").read_text() == "mine\n"


def test_unknown_template_suggests_the_closest(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as err:
        init_program(tmp_path, "testpas")
    assert str(err.value) == ("unknown template 'testpas'; did you mean 'testpass'? "
                              "choose one of: generic, ml, speed, testpass")
    assert not (tmp_path / "program.md").exists()


def test_unknown_template_without_a_close_match(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"^unknown template 'zzz'; choose one of: generic, ml"):
        init_program(tmp_path, "zzz")


# --------------------------------------------------------------------------- through the CLI


def test_cli_init_list() -> None:
    res = run_cli("init", "--list")
    assert res.returncode == 0, res.stderr
    assert [line.split()[0] for line in res.stdout.splitlines()] == NAMES


def test_cli_init_writes_and_prints_next_steps(make_repo) -> None:
    repo = make_repo({"README.md": "x\n"})
    res = run_cli("init", "--template", "testpass", cwd=repo)
    assert res.returncode == 0, res.stderr
    assert "autoloop verify program.md" in res.stdout
    assert "autoloop run program.md --tag first --cycles 3" in res.stdout
    assert "autoloop log program.md" in res.stdout
    again = run_cli("init", cwd=repo)
    assert again.returncode == 2
    assert "already exists" in again.stderr
    assert (repo / "program.md").read_text() == template_text("testpass")


def test_the_timing_template_uses_the_paired_rule(make_repo) -> None:
    """Timings are noisy: with one measurement per side the speed template would keep junk
    (issue 14 item 5), so it ships with the sequential paired rule and a min_effect."""
    repo = make_repo({"README.md": "x\n"})
    init_program(repo, "speed")
    accept = load_program(repo / "program.md").accept
    assert accept.rule == "paired" and (accept.min_effect.value, accept.min_effect.relative) == (2.0, True)
    assert (accept.alpha, accept.pairs, accept.confirm) == (0.005, 16, False)
    # what its comments say the false-keep bound is, is the alpha it gets (it said 0.01)
    assert f"false keeps <= accept.alpha, {accept.alpha:g} by default" in template_text("speed")


def test_sealed_templates_say_why_they_measure_that_way(make_repo) -> None:  # type: ignore[no-untyped-def]
    """speed times from outside and checks seeded answers; ml scores against private labels:
    `init` says so in two lines, and the files parse with those keys."""
    for name, words in (("speed", ("measure: wall", "$AUTOLOOP_SEED")), ("ml", ("score", "private"))):
        repo = make_repo({"README.md": "x\n"}, name=f"repo-{name}")
        res = run_cli("init", "--template", name, cwd=repo)
        assert res.returncode == 0, res.stderr
        said = res.stdout.split("Next:")[0].splitlines()[1:]
        assert len(said) == 2 and all(w in " ".join(said) for w in words), res.stdout
        v = load_program(repo / "program.md").verifier
        assert v.score is not None
        assert v.measure == ("wall" if name == "speed" else "output")


def test_the_speed_template_keeps_test_files_anywhere_from_the_generator(make_repo) -> None:  # type: ignore[no-untyped-def]
    """A project keeps its tests beside its code (`pkg/tests/test_x.py`, `test_pkg.py` at the top,
    `conftest.py`): a generator that may edit them can make the guard pass with broken code."""
    from autoloop.program.scope_rules import ScopeRules

    repo = make_repo({"README.md": "x\n"})
    init_program(repo, "speed")
    program = load_program(repo / "program.md")
    rules = ScopeRules(("**",), program.forbidden, ())
    for path in ("tests/test_a.py", "test_pkg.py", "pkg/tests/test_b.py", "conftest.py", "pkg/conftest.py"):
        assert rules.why_not(path) is not None, path
    assert rules.why_not("src/pkg/core.py") is None


@pytest.mark.parametrize("name", NAMES)
def test_an_untouched_template_is_refused_naming_every_place_marked_edit(make_repo, name: str) -> None:
    """One round of edits is enough: verify names each key the template marks EDIT that still
    holds the template's value, each at its line, not only the first it trips over."""
    repo = make_repo({"src/a.py": "X = 1\n"})
    assert run_cli("init", "--template", name, cwd=repo).returncode == 0
    text = (repo / "program.md").read_text()
    marked = [i for i, ln in enumerate(text.splitlines(), 1) if "EDIT" in ln and not ln.lstrip().startswith("#")
              and not ln.startswith(" " * 20)]
    res = run_cli("verify", cwd=repo)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    named = {int(ln.split(":")[1]) for ln in res.stderr.splitlines() if ln.startswith("program.md:")}
    assert set(marked) <= named, (marked, res.stderr)


def test_an_edited_value_may_keep_its_edit_comment(make_repo) -> None:
    repo = make_repo({"src/a.py": "X = 1\n"})
    assert run_cli("init", "--template", "speed", cwd=repo).returncode == 0
    text = (repo / "program.md").read_text().replace("python -m pytest -q   # EDIT", "python -m pytest -q tests  # EDIT")
    (repo / "program.md").write_text(text)
    res = run_cli("verify", cwd=repo)
    assert res.returncode == 2 and "guards[0].command" not in res.stderr, res.stderr
    assert "goal is still the template's" in res.stderr, res.stderr
