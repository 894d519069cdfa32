"""The documentation site builds without a broken link or anchor, and every program.md snippet in
it (and in the README) is read by autoloop's own program reader, so the docs cannot drift from
the schema."""

from __future__ import annotations

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
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
FENCE = re.compile(r"^```ya?ml\n(.*?)^```", re.M | re.S)
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


def test_the_docs_have_program_snippets() -> None:
    # the reference page alone has several; a change to the fence pattern must not make the
    # test below vacuous
    assert len(snippets()) >= 8


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
    assert (tmp_path / "site" / "reference" / "index.html").is_file()


def test_the_docs_build_fails_on_a_broken_link_or_anchor(tmp_path: Path) -> None:
    """The same build of a copy of the docs with one broken link, then one broken anchor."""
    pytest.importorskip("mkdocs", reason="mkdocs is in the test extra: pip install -e '.[test]'")
    pytest.importorskip("material", reason="mkdocs-material is in the test extra")
    for broken in ("[x](no-such-page.md)", "[x](reference.md#no-such-heading)"):
        copy = tmp_path / broken.count("#").__str__()
        shutil.copytree(ROOT / "docs", copy / "docs")
        shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
        index = copy / "docs" / "index.md"
        index.write_text(index.read_text() + f"\n{broken}\n")
        res = _mkdocs_build(copy / "mkdocs.yml", copy / "site", tmp_path)
        assert res.returncode != 0 and "WARNING" in res.stderr, (broken, res.stderr)


def test_the_readme_fits_on_two_screens() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200
