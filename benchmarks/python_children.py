"""How fast Python children start inside a measurement: a pytest guard's wall time run by hand
in a checkout (as a person re-runs their tests: __pycache__ in place) against the same guard in
an autoloop cycle (a fresh bytecode prefix per measurement, seeded from autoloop's own
checked-hash cache — autoloop.isolation.pycache), side by side in one run. Target: ≤ 1.2×.

    python benchmarks/python_children.py                      # tabulate-like synthetic project
    python benchmarks/python_children.py --sdist tabulate-0.9.0.tar.gz   # a real project
    python benchmarks/python_children.py --before DIR         # also another autoloop source tree

The real sdist, for the numbers in the README (PyPI reachable; benchmarks only, never tests):
    pip download tabulate==0.9.0 --no-binary :all: --no-deps -d /tmp/sdist

The synthetic project imitates tabulate: one module of ~2,500 lines and 288 pytest tests in 12
files. The guard is `python guard_timer.py`, which times `python -m pytest -q` in a child (the
child inherits the measurement's environment) and appends the seconds to $BENCH_TIMES, outside
the repository. Each round: the guard by hand 3 times, then an autoloop run of --cycles cycles
per source tree (the generator adds a comment to the module, so each cycle measures a new
candidate); the first cycle of each run is left out (it fills the cache). Rounds alternate so
that every side sees the same machine load; ratios are of medians.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
PY = sys.executable

GUARD_TIMER = """\
import os, subprocess, sys, time
t0 = time.perf_counter()
r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *sys.argv[1:]],
                   stdout=subprocess.DEVNULL)
with open(os.environ["BENCH_TIMES"], "a") as f:
    f.write(f"{time.perf_counter() - t0:.4f}\\n")
sys.exit(r.returncode)
"""

VERIFY = """\
import time
import {module} as m
t0 = time.perf_counter()
for _ in range(20):
    m.{call}
print(f"seconds: {{time.perf_counter() - t0:.6f}}")
"""

GEN = """\
import os
path = {path!r}
with open(path, "a") as f:
    f.write(f"# cycle {{os.environ['AUTOLOOP_CYCLE']}}\\n")
print("Hypothesis: a comment (no-op)")
"""


def synthetic(root: Path) -> tuple[str, str, str, str]:
    """A tabulate-sized module and 288 tests. Returns (module, call, editable path, test dir)."""
    pkg = root / "tablelike"
    pkg.mkdir()
    lines = ["import re, math, textwrap, functools, itertools, collections, dataclasses, io, decimal", ""]
    for i in range(250):
        lines += [f"def fmt_{i}(rows, width={i % 17 + 3}):",
                  f"    '''Format rows, variant {i}.'''",
                  "    out = []",
                  "    for r in rows:",
                  f"        cells = [str(c).rjust(width) if isinstance(c, (int, float)) else str(c).ljust(width) for c in r]",
                  f"        out.append(' | '.join(cells) + {'' if i % 2 else ' '!r})",
                  "    return '\\n'.join(out)", "", ""]
    lines += ["def tabulate(rows):", "    return fmt_0(rows)", ""]
    (pkg / "__init__.py").write_text("\n".join(lines))
    tests = root / "test"
    tests.mkdir()
    for f in range(12):
        body = ["import pytest", "from tablelike import *", ""]
        for t in range(24):
            k = (f * 24 + t) % 250
            body += [f"@pytest.mark.parametrize('n', [{t % 3 + 1}])",
                     f"def test_{f}_{t}(n):",
                     f"    rows = [[i, 'x' * i, i / 3] for i in range(n)]",
                     f"    assert fmt_{k}(rows).count('\\n') == n - 1", ""]
        (tests / f"test_part{f}.py").write_text("\n".join(body))
    return "tablelike", "tabulate([[1, 'a', 2.5]] * 50)", "tablelike/__init__.py", "test"


def from_sdist(root: Path, sdist: Path) -> tuple[str, str, str, str]:
    with tarfile.open(sdist) as t:
        t.extractall(root / "x", filter="data")
    top = next((root / "x").iterdir())
    for p in top.iterdir():
        shutil.move(str(p), root / p.name)
    shutil.rmtree(root / "x")
    editable = "tabulate/__init__.py" if (root / "tabulate" / "__init__.py").exists() else "tabulate.py"
    return "tabulate", "tabulate([[1, 'a', 2.5]] * 50, headers=['n', 's', 'f'])", editable, "test"


def make_repo(base: Path, sdist: Path | None) -> Path:
    repo = base / "repo"
    repo.mkdir()
    (base / "times").mkdir()   # where the guard timer writes: writable in the measurement sandbox
    module, call, editable, tests = from_sdist(repo, sdist) if sdist else synthetic(repo)
    (repo / "guard_timer.py").write_text(GUARD_TIMER)
    (repo / "bench.py").write_text(VERIFY.format(module=module, call=call))
    (repo / "gen.py").write_text(GEN.format(path=editable))
    (repo / "program.md").write_text(textwrap.dedent(f"""\
        ---
        goal: Make {module} faster
        allowed: [{editable}]
        verifier:
          command: {PY} bench.py
          metric: seconds
          direction: minimize
        guards:
          - {{name: tests, command: {PY} guard_timer.py {tests}, timeout: 600}}
        generator:
          command: {PY} gen.py
        sandbox:
          writable: [{base / "times"}]
        accept:
          final_pairs: 0
        ---
        Benchmark.
        """))
    env = git_env(base)
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "project"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True)
    return repo


def git_env(base: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PYTHON", "AUTOLOOP_"))}
    home = base / "home"
    home.mkdir(exist_ok=True)
    (home / ".gitconfig").write_text("[user]\n\tname = bench\n\temail = bench@example.com\n")
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), GIT_CONFIG_GLOBAL=str(home / ".gitconfig"),
               GIT_CONFIG_NOSYSTEM="1")
    return env


def times(path: Path) -> list[float]:
    if not path.exists():
        return []
    return [float(x) for x in path.read_text().split()]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sdist", type=Path, help="a real project's sdist (e.g. tabulate-0.9.0.tar.gz)")
    ap.add_argument("--before", type=Path, help="another autoloop source tree (a folder with autoloop/)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cycles", type=int, default=4)
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    sides = {"after": HERE.parent}
    if args.before:
        sides = {"before": args.before.resolve(), **sides}
    with tempfile.TemporaryDirectory(prefix="autoloop-pychildren-") as tmp:
        base = Path(tmp)
        repo = make_repo(base, args.sdist)
        env = git_env(base)
        alone: list[float] = []
        inside: dict[str, list[float]] = {k: [] for k in sides}
        for rnd in range(args.rounds):
            out = base / "times" / f"alone-{rnd}.txt"
            for _ in range(4):   # the first run fills __pycache__, as a person's first run did
                subprocess.run([PY, "guard_timer.py", "test"], cwd=repo, env={**env, "BENCH_TIMES": str(out)},
                               stdout=subprocess.DEVNULL, check=True)
            alone += times(out)[1:]
            for name, src in sides.items():
                out = base / "times" / f"{name}-{rnd}.txt"
                e = {**env, "BENCH_TIMES": str(out), "PYTHONPATH": str(src)}
                res = subprocess.run([PY, "-m", "autoloop", "run", "program.md", "--tag", f"{name}{rnd}",
                                      "--cycles", str(args.cycles)], cwd=repo, env=e,
                                     capture_output=True, text=True)
                if res.returncode != 0:
                    print(res.stdout[-2000:], res.stderr[-2000:], sep="\n")
                    return 1
                # the baseline (one guard run) and cycle 1 fill the cache; cycles 2.. are the steady state
                inside[name] += times(out)[2:]
            print(f"round {rnd + 1}: alone {statistics.median(alone):.3f}s  "
                  + "  ".join(f"{k} {statistics.median(v):.3f}s" for k, v in inside.items() if v))
        a = statistics.median(alone)
        print(f"\npytest guard ({'sdist ' + args.sdist.name if args.sdist else 'tabulate-like synthetic'}),"
              f" median of {len(alone)} runs by hand: {a:.3f}s")
        for name, v in inside.items():
            m = statistics.median(v)
            print(f"  inside autoloop ({name:>6}): {m:.3f}s over {len(v)} measurements = {m / a:.2f}× "
                  f"(spread {min(v) / a:.2f}–{max(v) / a:.2f}×)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
