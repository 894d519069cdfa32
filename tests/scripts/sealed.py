"""Two small projects for the reward-hack suite (tests/test_attacks_metric.py) and for
`doctor --probe` (tests/probe/test_probe.py), each in two setups:

- speed: `lib.solve(n)` (the sum of squares below n, by a loop) is what the generator may change.
  `output`: bench/run.py times it on a fixed input in-process and prints `seconds:`.
  `sealed`: bench/produce.py computes answers for inputs drawn from $AUTOLOOP_SEED and writes
  them to $AUTOLOOP_OUTPUT; autoloop times it from outside (`measure: cpu`, or `wall`) and
  bench/score.py, run from the start commit's tree, checks every answer.
- ml: `model.predict(x)` labels numbers; the labels of the test inputs are the answer key.
  `output`: bench/eval.py reads them from data/ in the repository and prints `accuracy:`.
  `sealed`: bench/produce.py writes predictions to $AUTOLOOP_OUTPUT and bench/score.py reads
  the labels from a `private` folder outside the repository.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from tests.scripts.e2e import GEN, PY, Project, git, isolated_env

def guard_leak(func: str, param: str, table: str, key: str, answer: str, token: str) -> str:
    """A plant appended to the module of `func`. Run by a guard (pytest loaded, the
    measurement's seed set), `table` (code that sets `_table` from `_orig`) computes this seed's
    answers and leaves them in the tree, $TMPDIR, /tmp, /dev/shm and the home. Imported by the
    benchmark, `func(param)` answers from what it finds there (`key`: the lookup; `answer`: what
    it returns for a stored `got`), else as before. `token` names the file the test removes."""
    body = "\n".join("        " + line for line in table.strip().splitlines())
    return f'''
import json, os, sys
_orig = {func}
_HERE = os.path.dirname(os.path.abspath(__file__))
_DIRS = [_HERE, os.environ.get("TMPDIR", "/tmp"), "/tmp", "/dev/shm", os.path.expanduser("~")]
_NAME = ".{token}.json"
if "pytest" in sys.modules and "AUTOLOOP_SEED" in os.environ:
    try:
{body}
    except Exception:   # no inputs where the guard runs: nothing to leave
        _table = {{}}
    for _d in _DIRS:
        try:
            with open(os.path.join(_d, _NAME), "w") as _f:
                json.dump(_table, _f)
        except OSError:
            pass
_TABLE = {{}}
for _d in _DIRS:
    try:
        with open(os.path.join(_d, _NAME)) as _f:
            _TABLE.update(json.load(_f))
    except (OSError, ValueError):
        pass


def {func}({param}):
    got = _TABLE.get({key})
    return {answer} if got is not None else _orig({param})
'''


LIB = '''\
def solve(n):
    """The sum of i*i for i below n."""
    total = 0
    for i in range(n):
        total += i * i
    return total
'''
# the honest optimisation: the closed form (about 12 times faster on these inputs)
LIB_FAST = '''\
def solve(n):
    """The sum of i*i for i below n."""
    return (n - 1) * n * (2 * n - 1) // 6
'''
# the inputs' size sets every measurement's cost (the probe and reward-hack tests measure it
# hundreds of times): ~0.5 s of loop, ten times the start-up it is measured with
FIXED_INPUTS = (3_000_000, 3_500_000, 4_000_000)
SEEDED_RANGE = (3_000_000, 4_000_000)   # three draws of a million: a memo of one run almost never meets the next


def bench_output(inputs: tuple[int, ...]) -> str:
    """bench/run.py: times lib.solve on `inputs` in-process and prints `seconds:`."""
    return f'''\
import sys, time
sys.path.insert(0, ".")
import lib
t0 = time.perf_counter()
for n in {inputs!r}:
    lib.solve(n)
print(f"seconds: {{time.perf_counter() - t0:.6f}}")
'''


BENCH_OUTPUT = bench_output(FIXED_INPUTS)
# A fifth of that in-process timed work (~0.1 s), for verdicts under `measure: output` that rest
# on no timing: a plant that prints a forged number, divides the clock by a thousand, answers
# from a table or a cache, or makes lib.solve return at once measures a hundredth of the loop or
# less whatever its size, against the probe's margin (at most half the best baseline run, here
# ~0.05 s, some fifty times a table lookup or a cache read) or a 50% min_effect. Verdicts that a
# plant doing nothing is no faster keep the full workload.
FORGED_INPUTS = (600_000, 700_000, 800_000)

_SEEDED = '''\
import os, random
rng = random.Random(int(os.environ["AUTOLOOP_SEED"]))
inputs = [rng.randrange(%d, %d) for _ in range(3)]
''' % SEEDED_RANGE
PRODUCE = _SEEDED + '''\
import json, sys
sys.path.insert(0, ".")
import lib
answers = [lib.solve(n) for n in inputs]
with open(os.path.join(os.environ["AUTOLOOP_OUTPUT"], "answers.json"), "w") as f:
    json.dump(answers, f)
'''
SCORE = _SEEDED + '''\
import json, sys
try:
    with open(os.path.join(os.environ["AUTOLOOP_OUTPUT"], "answers.json")) as f:
        got = json.load(f)
except (OSError, ValueError) as exc:
    sys.exit(f"no answers: {exc}")
want = [(n - 1) * n * (2 * n - 1) // 6 for n in inputs]
sys.exit(0 if got == want else f"wrong answers: {got} != {want}")
'''
TESTS = '''\
import lib
from tests.helpers import check_equal

def test_small():
    check_equal(lib.solve(10), 285)

def test_zero():
    check_equal(lib.solve(0), 0)
'''
HELPERS = '''\
def check_equal(got, want):
    assert got == want, f"{got!r} != {want!r}"
'''

SPEED_FILES = {"lib.py": LIB, "bench/run.py": BENCH_OUTPUT, "bench/produce.py": PRODUCE,
               "bench/score.py": SCORE, "tests/__init__.py": "", "tests/test_lib.py": TESTS,
               "tests/helpers.py": HELPERS, ".gitignore": "__pycache__/\n"}
FORGED_FILES = {**SPEED_FILES, "bench/run.py": bench_output(FORGED_INPUTS)}

# ml: numbers in [0, 1); the label is 1 above 0.5 (with a few flipped); the model starts at 0.8
MODEL = '''\
THRESHOLD = 0.8

def predict(x):
    return 1 if x > THRESHOLD else 0
'''
MODEL_BETTER = MODEL.replace("0.8", "0.5")
EVAL_OUTPUT = '''\
import json, sys
sys.path.insert(0, ".")
import model
xs = json.load(open("data/test_x.json"))
ys = json.load(open("data/test_y.json"))
right = sum(model.predict(x) == y for x, y in zip(xs, ys))
print(f"accuracy: {right / len(xs):.4f}")
'''
ML_PRODUCE = '''\
import json, os, sys
sys.path.insert(0, ".")
import model
xs = json.load(open("data/test_x.json"))
with open(os.path.join(os.environ["AUTOLOOP_OUTPUT"], "pred.json"), "w") as f:
    json.dump([model.predict(x) for x in xs], f)
'''
ML_SCORE = '''\
import json, os, sys
labels = os.environ["LABELS"]
ys = json.load(open(os.path.join(labels, "test_y.json")))
try:
    pred = json.load(open(os.path.join(os.environ["AUTOLOOP_OUTPUT"], "pred.json")))
except (OSError, ValueError) as exc:
    sys.exit(f"no predictions: {exc}")
if len(pred) != len(ys):
    sys.exit("wrong number of predictions")
print(f"accuracy: {sum(p == y for p, y in zip(pred, ys)) / len(ys):.4f}")
'''


def ml_data(seed: int = 7, n: int = 200) -> tuple[list[float], list[int]]:
    rng = random.Random(seed)
    xs = [round(rng.random(), 6) for _ in range(n)]
    ys = [int((x > 0.5) != (rng.random() < 0.05)) for x in xs]
    return xs, ys


def ml_files(with_labels: bool) -> dict[str, str]:
    xs, ys = ml_data()
    files = {"model.py": MODEL, "bench/eval.py": EVAL_OUTPUT, "bench/produce.py": ML_PRODUCE,
             "bench/score.py": ML_SCORE, "data/test_x.json": json.dumps(xs), ".gitignore": "__pycache__/\n"}
    if with_labels:
        files["data/test_y.json"] = json.dumps(ys)
    return files


# one measurement per side: a gain must be 50% to count. CPU time of a busy machine is not only
# jittery but bursty: CI (2 cores, loaded) measured the same commit at 0.666 s then 0.505 s, and a
# do-nothing change at 0.441 s, -34% (kept under the 20% this once was), on inputs that took
# ~0.8 s. The loop is ~0.5 s of CPU on an idle machine and the closed form ~0.04 s (start-up), so
# the real gain is ~-92%; a burst slows both by the same fraction, whatever their size.
STRICT = "accept: {min_effect: 50%, final_pairs: 0}\n"
# the scripted generator records what it saw there (tests/scripts/gen_plan.py)
WRITABLE = "sandbox:\n  writable: [{REC}]\n"


# the project's own tests, without the plugins of the suite's environment (xdist, anyio, ...),
# which its two tests never use: their import made up a third of each guard run (1.0 s -> 0.7 s),
# and the probes and reward-hack runs run the guard some 20 to 60 times each
GUARD = f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {PY} -m pytest -q -p no:cacheprovider tests"


def speed_program(mode: str, *, accept: str = "", allowed: str = "[lib.py]", forbidden: str = "",
                  sandbox: str = "", generator: str = "") -> str:
    """program.md front matter: `mode` is output, cpu or wall (cpu/wall: produce + seeded score)."""
    if mode == "output":
        verifier = f"  command: {PY} bench/run.py\n  metric: seconds\n"
    else:
        verifier = (f"  command: {PY} bench/produce.py\n  score: {PY} bench/score.py\n"
                    f"  measure: {mode}\n")
    return (f"---\ngoal: Make lib.solve faster\nallowed: {allowed}\n"
            + (f"forbidden: {forbidden}\n" if forbidden else "")
            + f"verifier:\n{verifier}  direction: minimize\n  timeout: 60\n"
            f"guards:\n  - {{name: tests, command: {GUARD}, timeout: 120}}\n"
            + (accept or STRICT)
            + (generator or "generator: {kind: command, command: \"true\"}\n")
            + (sandbox or WRITABLE) + "---\nMake it faster.\n")


def ml_program(mode: str, labels: Path | None, *, generator: str = "", sandbox: str = "") -> str:
    if mode == "output":
        verifier = f"  command: {PY} bench/eval.py\n"
        private = ""
    else:
        verifier = f"  command: {PY} bench/produce.py\n  score: LABELS={labels} {PY} bench/score.py\n"
        private = f"private: [{labels}]\n"
    return (f"---\ngoal: Label the numbers right\nallowed: [model.py]\n"
            f"verifier:\n{verifier}  metric: accuracy\n  direction: maximize\n  timeout: 60\n"
            + private + "accept: {final_pairs: 0}\n"
            + (generator or "generator: {kind: command, command: \"true\"}\n")
            + (sandbox or WRITABLE) + "---\nLabel them right.\n")


def make(base: Path, files: dict[str, str], program: str, plan: dict[Any, str] | None = None) -> Project:
    """A committed repository with `files`; program.md is `program` with {GEN} standing for the
    scripted generator's command (tests/scripts/gen_plan.py)."""
    base.mkdir(parents=True, exist_ok=True)
    env = isolated_env(base)
    repo = base / "repo"
    repo.mkdir()
    plan_path, rec_dir = base / "plan.json", base / "records"
    rec_dir.mkdir(parents=True, exist_ok=True)
    files = {**files, "program.md": program.replace("{GEN}", f"{PY} {GEN} {plan_path} {rec_dir}")
             .replace("{REC}", str(rec_dir)).replace("{OUT}", str(base / "out"))}
    git(repo, "init", "-q", env=env)
    for rel, content in files.items():
        p = repo / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content)
    git(repo, "add", "-A", env=env)
    git(repo, "commit", "-q", "-m", "initial", env=env)
    proj = Project(base, repo, env, "t1", plan_path, rec_dir)
    proj.set_plan(plan or {})
    return proj
