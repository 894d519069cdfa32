"""What an editable install of autoloop adds to every Python start in its virtualenv: setuptools'
import finder (what `pip install -e .` makes of a package at the project's root) against one path
in a .pth file (what it makes with `package-dir = {"" = "."}`, as pyproject.toml says). The suite
starts thousands of Pythons in that venv (every measurement, generator and autoloop run of a test),
so this is a cost of the README's test command, not of a user's `pip install .`.

Two throwaway venvs (no dependencies installed: only the start is timed), the same checkout
installed editable into each, then `python -c pass` in alternating runs so both see the same load.

    python benchmarks/editable_start.py              # 40 starts each side
    python benchmarks/editable_start.py --starts 100
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETTING = 'package-dir = {"" = "."}\n'


def venv_with(checkout: Path, where: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                    "-e", str(checkout)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return python


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--starts", type=int, default=40)
    args = ap.parse_args()
    if SETTING not in (ROOT / "pyproject.toml").read_text():
        print(f"pyproject.toml has no {SETTING.strip()!r}: nothing to compare against")
        return 1
    with tempfile.TemporaryDirectory(prefix="editable-start-") as tmp:
        finder_copy = Path(tmp) / "finder-checkout"
        shutil.copytree(ROOT, finder_copy, ignore=shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__"))
        toml = finder_copy / "pyproject.toml"
        toml.write_text(toml.read_text().replace(SETTING, ""))
        sides = {"import finder": venv_with(finder_copy, Path(tmp) / "venv-finder"),
                 "path in a .pth": venv_with(ROOT, Path(tmp) / "venv-pth")}
        for name, python in sides.items():
            pth = next(python.parent.parent.glob("lib/python*/site-packages/__editable__*.pth")).read_text()
            print(f"{name:15s} {pth.strip()[:90].replace(str(Path(tmp)), '<tmp>')}")
        times: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(args.starts):
            for name, python in sides.items():
                t = time.perf_counter()
                subprocess.run([str(python), "-c", "import autoloop"], check=True)
                times[name].append(time.perf_counter() - t)
    med = {name: statistics.median(ts) * 1e3 for name, ts in times.items()}
    for name, ms in med.items():
        print(f"{name:15s} python -c 'import autoloop': median {ms:.1f} ms of {args.starts}")
    print(f"ratio finder/pth: {med['import finder'] / med['path in a .pth']:.2f}; "
          f"saved per start: {med['import finder'] - med['path in a .pth']:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
