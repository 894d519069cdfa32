"""The documentation site builds without a broken link or anchor; every program.md snippet in it
(and in the README) is read by autoloop's own program reader; the generated reference is what
scripts/docs_reference.py writes from the schema and the argument parser; the user pages hold no
release notes, dates, commit hashes, test files or module paths. (The tutorial runs in
test_docs_tutorial.py, the pages open in a browser in test_docs_browser.py, the quoted transcripts
are compared with a fresh quickstart in test_docs_transcripts.py.)"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoloop.program.reader import known_keys, parse_program

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if "incoming" not in p.relative_to(DOCS).parts) + [ROOT / "README.md"]
# user pages: everything but the contributors' section
USER_PAGES = [p for p in PAGES if p.parent != DOCS / "contributing" and p.name != "CHANGELOG.md"]
FENCE = re.compile(r"^```ya?ml[^\n]*\n(.*?)^```", re.M | re.S)
WHOLE = re.compile(r'^```\w*\s+title="(?:[^"]*/)?program\.md"\n(.*?)^```', re.M | re.S)
# What a fragment leaves out, so that it reads as a whole program: the required keys only.
BASE: dict[str, Any] = {"goal": "g", "allowed": ["a.py"],
                        "verifier": {"command": "python v.py", "metric": "m", "direction": "minimize"}}


def snippets() -> list[tuple[str, str]]:
    """Every YAML block of the docs whose top-level keys are program.md keys, as (where, text)."""
    tops = {k.split(".")[0] for k in known_keys()}
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            body = m.group(1)
            if body.lstrip().startswith("---"):
                body = body.split("---")[1]
            try:
                data = yaml.safe_load(body)
            except yaml.YAMLError:
                data = None
            if isinstance(data, dict) and data and set(data) <= tops:
                line = text.count("\n", 0, m.start()) + 2
                found.append((f"{page.relative_to(ROOT)}:{line}", body))
    return found


def as_program(body: str) -> str:
    data = yaml.safe_load(body)
    whole = {**BASE, **data}
    if "verifier" in data:
        whole["verifier"] = {**BASE["verifier"], **data["verifier"]}
        if "pattern" in data["verifier"]:
            whole["verifier"].pop("metric", None)
    return "---\n" + yaml.safe_dump(whole, sort_keys=False) + "---\nInstructions.\n"


def whole_programs() -> list[tuple[str, str]]:
    """Blocks shown as a whole program.md file (```markdown title="program.md"), as (where, text)."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in WHOLE.finditer(text):
            found.append((f"{page.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 2}", m.group(1)))
    return found


@pytest.mark.parametrize("where,text", whole_programs(), ids=[w for w, _ in whole_programs()])
def test_every_whole_program_parses(where: str, text: str, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    parse_program(text, repo / "program.md", repo)


def test_the_docs_have_program_snippets() -> None:
    # the reference page alone has several; a change to the fence pattern must not make the
    # test below vacuous
    assert len(snippets()) >= 8
    assert whole_programs(), "the tutorial shows its program.md whole"


@pytest.mark.parametrize("where,body", snippets(), ids=[w for w, _ in snippets()])
def test_every_program_snippet_parses(where: str, body: str, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    # `private` paths must exist (outside the repository): made under a home of the test's own
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    private = yaml.safe_load(body).get("private") or []
    for entry in [private] if isinstance(private, str) else private:
        Path(entry).expanduser().mkdir(parents=True, exist_ok=True)
    (repo / "program.md").write_text(as_program(body))
    parse_program(as_program(body), repo / "program.md", repo)


def _mkdocs_build(config: Path, site: Path, home: Path) -> subprocess.CompletedProcess[str]:
    # no -q: it lowers mkdocs' log level below WARNING, and --strict then counts no warning at
    # all (a broken link or anchor passed)
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          capture_output=True, text=True, cwd=config.parent,
                          env={"PATH": "/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1", "HOME": str(home)})


def test_mkdocs_build_is_strict_and_clean(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="mkdocs is in the test extra: pip install -e '.[test]'")
    pytest.importorskip("material", reason="mkdocs-material is in the test extra")
    res = _mkdocs_build(ROOT / "mkdocs.yml", tmp_path / "site", tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "WARNING" not in res.stderr, res.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "reference" / "program" / "index.html").is_file()
    assert (tmp_path / "site" / "tutorial" / "index.html").is_file()
    assert not (tmp_path / "site" / "incoming").exists()
    # a `\|` in a table's code shows its backslash, and a copied command is wrong
    shown = [p.relative_to(tmp_path / "site") for p in (tmp_path / "site").rglob("*.html")
             if "\\|" in p.read_text(encoding="utf-8")]
    assert not shown, shown


def test_the_docs_build_fails_on_a_broken_link_or_anchor(tmp_path: Path) -> None:
    """The same build of a copy of the docs with one broken link, then one broken anchor."""
    pytest.importorskip("mkdocs", reason="mkdocs is in the test extra: pip install -e '.[test]'")
    pytest.importorskip("material", reason="mkdocs-material is in the test extra")
    for broken in ("[x](no-such-page.md)", "[x](reference/program.md#no-such-heading)"):
        copy = tmp_path / broken.count("#").__str__()
        shutil.copytree(ROOT / "docs", copy / "docs")
        shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
        shutil.copy(ROOT / "program.md.example", copy / "program.md.example")   # the example page shows it
        index = copy / "docs" / "index.md"
        index.write_text(index.read_text() + f"\n{broken}\n")
        res = _mkdocs_build(copy / "mkdocs.yml", copy / "site", tmp_path)
        assert res.returncode != 0 and "WARNING" in res.stderr, (broken, res.stderr)


def test_the_readme_fits_on_two_screens() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200


# ------------------------------------------------------------------------- generated reference

def test_the_generated_reference_is_up_to_date() -> None:
    """Each generated table is what scripts/docs_reference.py writes from the schema and the
    argument parser: a key or an option added, renamed or removed fails here until the script
    is run (python scripts/docs_reference.py)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import docs_reference
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    for page in (docs_reference.COMMANDS_PAGE, docs_reference.KEYS_PAGE):
        assert page.read_text(encoding="utf-8") == docs_reference.render(page), \
            f"{page.relative_to(ROOT)} is stale: run python scripts/docs_reference.py"
    keys = docs_reference.KEYS_PAGE.read_text(encoding="utf-8")
    assert all(f"<code>{k}</code>" in keys for k in known_keys())
    commands = docs_reference.COMMANDS_PAGE.read_text(encoding="utf-8")
    assert "<code>--tag TAG</code>" in commands and "### `autoloop gate`" in commands


def test_program_md_example_shows_every_key() -> None:
    example = (ROOT / "program.md.example").read_text(encoding="utf-8")
    missing = [k for k in known_keys() if not re.search(rf"\b{re.escape(k.split('.')[-1])}:", example)]
    assert not missing, missing


# ------------------------------------------------------------------------- no release notes

RELEASE_NOTE = [
    (r"\bnow\b", "now"), (r"\btoday\b", "today"), (r"\bnewly\b|\bnew in\b|\bnew:|\(new\)|\bis new\b", "new"),
    (r"\b(?:an? )?earlier (?:version|scheme|release)\b|\bused to\b|\bpreviously\b"
     r"|\brecorded before\b|\bsince (?:version|release)\b", "an earlier version"),
    (r"\b\d{1,2} (?:January|February|March|April|May|June|July|August|September|October|November|December)\b"
     r"|\b(?:January|February|March|April|May|June|July|August|September|October|November|December) \d{1,4}\b"
     r"|\b20\d\d-\d\d-\d\d\b", "a date"),
    (r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b", "a commit hash"),
]
PATHS = re.compile(r"(?<![\w/.])((?:tests|autoloop|benchmarks)/[\w/.-]+)")


def prose(text: str) -> str:
    """The page without its fenced blocks (program output may hold commits and dates), lines kept."""
    return re.sub(r"^```.*?^```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.M | re.S)


def release_notes(text: str) -> list[str]:
    found = []
    for n, line in enumerate(prose(text).splitlines(), 1):
        for pattern, what in RELEASE_NOTE:
            found += [f"{n}: {what}: {m.group(0)!r}" for m in re.finditer(pattern, line, re.I)]
        for m in PATHS.finditer(line):
            # a path of autoloop's own tests, code or benchmarks (a user's tests/ is fine)
            path = m.group(1).rstrip(".")
            if (ROOT / path).exists() and (ROOT / path).is_file() or path.startswith("benchmarks/"):
                found.append(f"{n}: a source or test path: {path!r}")
    return found


@pytest.mark.parametrize("page", USER_PAGES, ids=[str(p.relative_to(ROOT)) for p in USER_PAGES])
def test_user_pages_hold_no_release_notes(page: Path) -> None:
    assert not release_notes(page.read_text(encoding="utf-8"))


def test_the_release_note_check_finds_each_kind() -> None:
    planted = ("Printed on a fresh clone of main on 3 December (commit 18594db).\n"
               "It now counts. Measured on an earlier version. See tests/test_docs.py and "
               "autoloop/cli.py, and benchmarks/noise.py.\n")
    kinds = {f.split(": ")[1] for f in release_notes(planted)}
    assert kinds == {"a date", "a commit hash", "now", "an earlier version", "a source or test path"}, kinds
    assert not release_notes("A new file in a folder of your tests/ is fine.\n```\nat 2214ef8ef698\n```\n")


def test_the_changelog_holds_the_history() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert text.startswith("# Changelog") and "## " in text


# ------------------------------------------------------------------------- the site's settings

def test_the_site_names_no_host_that_is_not_there() -> None:
    """No public host exists yet: neither site_url nor repo_url may point at one, least of all the
    machine the site was built on (a header link to 127.0.0.1 is dead for every reader)."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text().replace("!!python", "#"))
    for key in ("site_url", "repo_url"):
        value = config.get(key) or ""
        assert not re.search(r"localhost|127\.0\.0\.1|\[::1\]|OWNER|example\.(com|org)|TODO|XXX", value), value
    assert config["theme"]["font"] is False            # no Google Fonts: the site works offline
    assert "navigation.footer" in config["theme"]["features"]
    assert len(config["theme"]["palette"]) == 2        # the light/dark toggle


_LOCAL_LINK = re.compile(r"""(?:href|src)=["'][a-z]+://(?:localhost|127\.\d+\.\d+\.\d+|\[::1\])""", re.I)


def test_no_built_page_links_to_localhost(tmp_path: Path) -> None:
    """Every page of the built site: no link or image to localhost (an example's `base_url:
    http://127.0.0.1:11434/v1` in a code block is text, not a link, and stays)."""
    pytest.importorskip("material", reason="mkdocs-material is in the test extra")
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert res.returncode == 0, res.stderr
    pages = list((tmp_path / "site").rglob("*.html"))
    assert len(pages) >= 25
    linked = [f"{p.relative_to(tmp_path)}: {m.group(0)}" for p in pages
              for m in _LOCAL_LINK.finditer(p.read_text(encoding="utf-8"))]
    assert not linked, linked
    # the check sees such a link
    assert _LOCAL_LINK.search('<a href="http://127.0.0.1:8000/contributing/code-map/">')


def test_the_docs_autoloop_names_exist() -> None:
    """autoloop's messages point at docs/…md pages: each must exist."""
    named = set()
    for source in (ROOT / "autoloop").rglob("*"):
        if source.suffix in (".py", ".md"):
            named |= set(re.findall(r"docs/[\w/-]+\.md", source.read_text(encoding="utf-8")))
    assert named and all((ROOT / n).is_file() for n in named), sorted(n for n in named if not (ROOT / n).is_file())


# ------------------------------------------------------------------------- reference vs the code

def test_the_files_page_names_every_results_column_and_status_in_order() -> None:
    from autoloop.journal.ledger import STATUSES, TSV_COLUMNS

    text = " ".join((DOCS / "reference" / "files.md").read_text(encoding="utf-8").split())
    assert " ".join(TSV_COLUMNS[:10]) in text and " ".join(TSV_COLUMNS[10:]) in text
    assert " ".join(STATUSES) in text


def test_the_exit_codes_page_has_every_code_autoloop_returns() -> None:
    from autoloop import cli, errors
    from autoloop.commands import gate

    codes = {cls.exit_code for cls in vars(errors).values()
             if isinstance(cls, type) and issubclass(cls, BaseException) and hasattr(cls, "exit_code")}
    codes |= {0, cli.EXIT_USAGE, cli.EXIT_INTERRUPTED, cli.EXIT_BROKEN_PIPE, gate.EXIT_BASE_BROKEN}
    listed = {int(c) for c in re.findall(r"^\| (\d+) \|", (DOCS / "reference" / "exit-codes.md").read_text(), re.M)}
    assert listed == codes, (sorted(listed), sorted(codes))


def test_each_commands_signature_in_the_prose_names_every_option_it_has() -> None:
    """The hand-written one-line signatures (`- \\`autoloop doctor [PROGRAM] [--tag TAG] [--probe]\\``)
    name exactly the options `autoloop doctor --help` lists, no more, no fewer."""
    import argparse

    from autoloop.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    text = (DOCS / "reference" / "commands.md").read_text(encoding="utf-8")
    found = dict(re.findall(r"^- `autoloop (\w+) ([^`]*)`", text, re.M))
    assert set(found) >= {"verify", "doctor", "log", "show", "clean", "init", "report", "gate"}, found
    for name, signature in found.items():
        actions = [a for a in sub.choices[name]._actions if a.option_strings and "--help" not in a.option_strings]
        named = set(re.findall(r"(?<![\w-])--?[\w-]+", signature))
        missing = [a.option_strings for a in actions if not named & set(a.option_strings)]
        unknown = named - {s for a in actions for s in a.option_strings}
        assert not missing and not unknown, (name, signature, missing, unknown)


def test_a_key_without_a_description_stops_the_reference_script(monkeypatch: pytest.MonkeyPatch) -> None:
    """A key another branch adds to the schema without a description in keydocs fails loudly,
    naming it, and the page is not written."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import docs_reference
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    from autoloop.program import keydocs

    keys = dict(keydocs.KEYS)
    del keys["stop.max_cost_usd"]
    monkeypatch.setattr(keydocs, "KEYS", keys)
    with pytest.raises(docs_reference.UndescribedKey, match=r"stop\.max_cost_usd"):
        docs_reference.keys_markdown()
    monkeypatch.setattr(keydocs, "KEYS", {**keys, "stop.max_cost_usd": keydocs.KeyDoc("USD", "", "x: 1", "y")})
    with pytest.raises(docs_reference.UndescribedKey, match=r"stop\.max_cost_usd"):
        docs_reference.keys_markdown()
    monkeypatch.setattr(keydocs, "KEYS", {**keydocs.KEYS, "stop.max_kittens": keydocs.KeyDoc("n", "t", "x: 1")})
    with pytest.raises(docs_reference.UndescribedKey, match=r"not in the schema: stop\.max_kittens"):
        docs_reference.keys_markdown()
    # every key's entry reads as the page needs it: a default, or what leaving it out means
    defaults = {**docs_reference._defaults(), **docs_reference._PAIRED}
    assert all(k in defaults or keydocs.KEYS[k].unset for k in known_keys())
    page = docs_reference.KEYS_PAGE.read_text(encoding="utf-8")
    assert "<code>stop.max_cycles</code>** — integer >= 0; if left out: unlimited" in page
