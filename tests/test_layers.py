"""The package's shape holds: import-linter's contracts in pyproject.toml (each area imports only
the areas below it, the decide step imports nothing that starts a process, program.md's reader
does not import the generators) and scripts/structure.py (module sizes, no import cycles, no
private imports). The top of the package is the entry points and the area folders, nothing else."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
AREAS = {"base", "process", "disk", "git", "decide", "program", "journal", "isolation", "generators",
         "engine", "trace", "probe", "commands"}


def test_import_linter_contracts_are_kept() -> None:
    pytest.importorskip("importlinter", reason="import-linter is in the test extra: pip install -e '.[test]'")
    res = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command; "
                          "lint_imports_command()"], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "3 kept, 0 broken" in res.stdout


def test_a_wrong_way_import_breaks_the_layers_contract(tmp_path: Path) -> None:
    """The contract is not vacuous: a copy of the package where the bottom imports the top fails."""
    pytest.importorskip("importlinter")
    import shutil
    shutil.copytree(ROOT / "autoloop", tmp_path / "autoloop", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    numbers = tmp_path / "autoloop" / "base" / "numbers.py"
    numbers.write_text(numbers.read_text() + "\nfrom autoloop.engine import loop  # noqa\n")
    res = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, '.'); "
                          "from importlinter.cli import lint_imports_command; lint_imports_command()"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode != 0
    assert "autoloop.base.numbers -> autoloop.engine.loop" in res.stdout


def test_structure_script_passes() -> None:
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "structure.py")], capture_output=True,
                         text=True, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "FAIL" not in res.stdout


def test_the_top_of_the_package_is_entry_points_and_areas() -> None:
    top = {p.name for p in (ROOT / "autoloop").iterdir() if p.name != "__pycache__"}
    assert top == {"__init__.py", "__main__.py", "cli.py", "errors.py"} | AREAS
    for area in AREAS:
        doc = (ROOT / "autoloop" / area / "__init__.py").read_text()
        assert doc.startswith('"""') and "import" in doc, f"{area}/__init__.py must say what it may import"
