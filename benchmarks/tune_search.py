"""`tune` against Optuna's TPE and random search, side by side: best metric after 10, 20, 40 cycles.

    python benchmarks/tune_search.py                      # 5 seeds, the choosing family (below)
    python benchmarks/tune_search.py --family heldout --seeds 100 --jobs 2 --methods tune "Optuna TPE"
    python benchmarks/tune_search.py --seeds 5 --objectives valley mixed
    python benchmarks/tune_search.py --cli 2              # + 2 seeds of tune through `autoloop run`
    python benchmarks/tune_search.py --import-cost        # what `import optuna` costs a tune run
    python benchmarks/tune_search.py --jobs 2 --columns 10 20   # seeds 2 at a time, 20 cycles

Objectives (each a params.py with `# tune:` markers and a score.py verifier):
  quickstart  examples/quickstart: 4 markers (float log, int, int log, float), deterministic
  mixed       benchmarks/tune_objectives/mixed: int, float log, int log and two categoricals
  valley      benchmarks/tune_objectives/valley: Rosenbrock's narrow curved valley, two floats
  noisy       benchmarks/tune_objectives/noisy: a run time with 2% noise per measurement
These four are the choosing family: tune's start design and switch to TPE were picked on them.
The held-out family (--family heldout: hyper, banana, logvalley, plateau, rugged, spread,
noisytime, noisysteps; benchmarks/tune_objectives/heldout/README.md) judges that pick. With more
than one objective a last table averages the family (each objective divided by its scale) and
gives every method's paired difference from Optuna TPE on the same seeds.

In-process (the default), `tune` is its proposal engine (autoloop.generators.tune: the space
parsed from the markers, the ledger's observations, the same Engine the generator calls) fed
by the objective instead of the verifier; the baseline (the user's starting values) is its
observation 0, and "after N" counts the N cycles after it, as `autoloop run --cycles N` does.
Optuna TPE (its defaults) and random search get N trials and no baseline. Every method gets the
same seeds. On the deterministic objectives a cell is the best value measured. On `noisy` every
method runs inside a ratchet whose keep rule is autoloop's paired rule (`ratchet` below): a cell
is the noise-free value of the incumbent it leaves. Cells are mean ± standard error over seeds.
`--cli K` also runs K seeds of `tune` through the real CLI on a copy of each objective (on
`noisy` with `accept: paired`) and reports the best measured (quickstart) / the noise-free value
of the final incumbent (noisy).

The machine is shared and noisy for timing; the search results do not depend on timing.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autoloop.generators.tune import Marker, parse_markers, observations  # noqa: E402
from autoloop.generators.tune_engine import Engine, Observation  # noqa: E402

OBJ = ROOT / "benchmarks" / "tune_objectives"
COLUMNS = (10, 20, 40)


# --------------------------------------------------------------------------- objectives


def _load(path: Path, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    exec(compile(path.read_bytes(), str(path), "exec"), module.__dict__)
    return module


class Objective:
    def __init__(self, name: str, params: Path, score: Callable[[dict[str, Any]], float],
                 noisy: Callable[[dict[str, Any], random.Random], float] | None = None) -> None:
        self.name = name
        self.params = params
        markers, errors = parse_markers(params.read_text(), params.name)
        assert not errors, errors
        self.markers: list[Marker] = markers
        self.true = score
        self.noisy = noisy
        self.cache: dict[Any, float] = {}

    def start(self) -> dict[str, Any]:
        return {m.param.key: m.value for m in self.markers}

    def measure(self, config: dict[str, Any], rng: random.Random) -> float:
        if self.noisy is not None:
            return self.noisy(self._named(config), rng)
        key = tuple(sorted(config.items()))
        if key not in self.cache:
            self.cache[key] = self.true(self._named(config))
        return self.cache[key]

    def truth(self, config: dict[str, Any]) -> float:
        return self.true(self._named(config))

    def _named(self, config: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for m in self.markers:
            v = config[m.param.key]
            out[m.name] = m.param.native(v)
        return out


def quickstart() -> Objective:
    folder = ROOT / "examples" / "quickstart"
    prepare = _load(folder / "prepare.py", "qs_prepare")
    train_x, train_y = prepare.make_moons(prepare.TRAIN_SIZE, seed=1)
    val_x, val_y = prepare.make_moons(prepare.VAL_SIZE, seed=2)

    def score(values: dict[str, Any]) -> float:
        module = _load(folder / "train.py", "qs_train")
        module.__dict__.update(values)
        model = module.train(train_x, train_y)
        total = 0.0
        for x, y in zip(val_x, val_y):
            p = float(module.predict(model, x))
            if not math.isfinite(p):
                return math.inf
            p = min(max(p, 1e-7), 1.0 - 1e-7)
            total -= math.log(p) if y == 1 else math.log(1.0 - p)
        # the verifier prints 6 decimals; the ratchet compares what it prints
        return round(total / len(val_y), 6)

    return Objective("quickstart", folder / "train.py", score)


def synthetic(folder: str, name: str | None = None) -> Objective:
    name = name or folder
    module = _load(OBJ / folder / "score.py", f"obj_{name}")
    noisy = getattr(module, "noisy", None)
    return Objective(name, OBJ / folder / "params.py", lambda v: module.objective(**v), noisy)


OBJECTIVES: dict[str, Callable[[], Objective]] = {
    "quickstart": quickstart,
    "mixed": lambda: synthetic("mixed"),
    "valley": lambda: synthetic("valley"),
    "noisy": lambda: synthetic("noisy"),
}
# The choosing family is what tune's settings were picked on; the held-out family (written
# before any result on it was seen, benchmarks/tune_objectives/heldout/README.md) judges them.
HELDOUT = ("hyper", "banana", "logvalley", "plateau", "rugged", "spread", "noisytime", "noisysteps")
for _name in HELDOUT:
    OBJECTIVES[_name] = lambda name=_name: synthetic(f"heldout/{name}", name)
FAMILIES = {"choosing": ("quickstart", "mixed", "valley", "noisy"), "heldout": HELDOUT}


# --------------------------------------------------------------------------- methods


def run_tune(obj: Objective, seed: int, n: int, **engine_options: Any) -> list[float]:
    """Truth of the best-observed point after each cycle 1..n (the baseline is observation 0)."""
    if obj.noisy is not None:
        return ratchet(obj, seed, n, _tune_asker(obj, seed, engine_options))
    rng = random.Random(f"noise:{seed}")
    engine = Engine([m.param for m in obj.markers], "minimize", seed, **engine_options)
    start = obj.start()
    seen = [Observation(start, obj.measure(start, rng), proposed=False)]
    curve = []
    for _ in range(n):
        point = engine.propose(seen)[0]
        seen.append(Observation(point.config, obj.measure(point.config, rng)))
        curve.append(min(o.value for o in seen if o.value is not None))  # type: ignore[type-var]
    return curve


def run_optuna(obj: Objective, seed: int, n: int, sampler: str) -> list[float]:
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    dists = {m.param.key: m.param.distribution() for m in obj.markers}
    s = optuna.samplers.TPESampler(seed=seed) if sampler == "tpe" else optuna.samplers.RandomSampler(seed=seed)
    study = optuna.create_study(direction="minimize", sampler=s)
    if obj.noisy is not None:
        def ask(history: list[dict[str, Any]], incumbent: dict[str, Any]) -> tuple[dict[str, Any], Callable[[float], None]]:
            trial = study.ask(dists)
            return dict(trial.params), lambda value: study.tell(trial, value)
        return ratchet(obj, seed, n, ask)
    rng = random.Random(f"noise:{seed}")
    curve: list[float] = []
    for _ in range(n):
        trial = study.ask(dists)
        value = obj.measure(dict(trial.params), rng)
        study.tell(trial, value)
        curve.append(min(value, curve[-1]) if curve else value)
    return curve


# --------------------------------------------------------------------------- a noisy objective: the paired rule decides


Asker = Callable[[list[dict[str, Any]], dict[str, Any]], tuple[dict[str, Any], Callable[[float], None]]]


def ratchet(obj: Objective, seed: int, n: int, ask: Asker) -> list[float]:
    """A ratchet whose keep rule is autoloop's paired rule (autoloop.decide.cycle.judge_paired, its
    defaults), every verifier run a fresh noisy measurement: each cycle the method proposes a
    point, the rule judges it against the incumbent (the user's values at first), and the curve
    is the noise-free value of the incumbent after each cycle — what the user would be left with.
    The method is told the cycle's metric (the median of the candidate's runs, as the ledger
    records it); `tune` reads the cycle records as the ledger holds them."""
    from autoloop.decide.core import Sample, Session
    from autoloop.decide.cycle import judge_paired
    from autoloop.program.reader import parse_program

    program = parse_program(PAIRED_PROGRAM, ROOT / "program.md", ROOT)
    rng = random.Random(f"noise:{seed}")
    incumbent = obj.start()
    history: list[dict[str, Any]] = [{"cycle": 0, "status": "baseline", "metric": obj.measure(incumbent, rng)}]
    curve = []
    for cycle in range(1, n + 1):
        config, tell = ask(history, incumbent)
        sides = {"A": incumbent, "B": config}
        verdict = judge_paired(Session(lambda side, label, guards: Sample(side, label, obj.measure(sides[side], rng))),
                               program, {})
        tell(verdict.metric)
        history.append({"cycle": cycle, "status": verdict.status, "metric": verdict.metric,
                        "stats": verdict.stats, "gen_meta": {"config": config, "incumbent": incumbent}})
        if verdict.status == "keep":
            incumbent = config
        curve.append(obj.truth(incumbent))
    return curve


PAIRED_PROGRAM = ("---\ngoal: Lower seconds\nallowed: [params.py]\nverifier:\n  command: python3 score.py\n"
                  "  metric: seconds\n  direction: minimize\naccept:\n  rule: paired\n---\nBenchmark.\n")


def _tune_asker(obj: Objective, seed: int, options: dict[str, Any]) -> Asker:
    engine = Engine([m.param for m in obj.markers], "minimize", seed, **options)

    def ask(history: list[dict[str, Any]], incumbent: dict[str, Any]) -> tuple[dict[str, Any], Callable[[float], None]]:
        return engine.propose(observations(history, incumbent))[0].config, lambda value: None
    return ask


METHODS: dict[str, Callable[[Objective, int, int], list[float]]] = {
    "tune": run_tune,
    "Optuna TPE": lambda o, s, n: run_optuna(o, s, n, "tpe"),
    "Optuna random": lambda o, s, n: run_optuna(o, s, n, "random"),
}
# --variants: the engine settings tune's defaults were chosen among (tune_engine.Engine's fields)
VARIANTS: dict[str, Callable[[Objective, int, int], list[float]]] = {
    "tune, random start (no hypercube)": lambda o, s, n: run_tune(o, s, n, lhs=False),
    "tune, your values in TPE's model": lambda o, s, n: run_tune(o, s, n, with_start=True),
    "tune, 10 random first (Optuna's default)": lambda o, s, n: run_tune(o, s, n, n_startup=10),
    "tune, univariate TPE": lambda o, s, n: run_tune(o, s, n, multivariate=False),
}


# --------------------------------------------------------------------------- the real CLI


def run_cli(obj: Objective, seed: int, n: int, workdir: Path) -> tuple[list[float], float]:
    """`autoloop run` of `tune` on a fresh repository holding the objective; (curve, seconds)."""
    repo = workdir / f"{obj.name}-{seed}"
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    if obj.name == "quickstart":
        shutil.copytree(ROOT / "examples" / "quickstart", repo / "q")
        allowed, command, metric = "q/train.py", "python3 q/prepare.py", "val_loss"
    else:
        shutil.copytree(OBJ / obj.name, repo / "q")
        allowed, command = "q/params.py", "python3 q/score.py"
        metric = {"mixed": "error", "valley": "loss", "noisy": "seconds"}[obj.name]
    accept = "accept: {rule: paired}\n" if obj.noisy is not None else ""
    (repo / "program.md").write_text(
        f"---\ngoal: Lower {metric}\nallowed: [{allowed}]\nverifier:\n  command: {command}\n"
        f"  metric: {metric}\n  direction: minimize\n{accept}generator:\n  kind: tune\n  seed: {seed}\n"
        f"stop:\n  max_cycles: {n}\n---\nTune the marked constants.\n")
    (repo / ".gitignore").write_text("__pycache__/\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.com",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.com"}
    for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"], ["git", "commit", "-qm", "start"]):
        subprocess.run(cmd, cwd=repo, check=True, env=env)
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "autoloop", "run", "program.md", "--tag", "bench",
                          "--cycles", str(n)], cwd=repo, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    if res.returncode != 0:
        raise SystemExit(f"autoloop run failed on {obj.name} seed {seed}:\n{res.stdout}\n{res.stderr}")
    ledger = next((repo / ".autoloop").rglob("ledger.jsonl"), None) if (repo / ".autoloop").exists() else None
    records = _ledger(repo, ledger)
    curve: list[float] = []
    best = math.inf
    current = {m.param.key.replace(obj.params.name, allowed): m.value for m in obj.markers}
    for rec in records:
        if rec.get("cycle", 0) == 0:
            continue
        if obj.noisy is None:
            if rec.get("metric") is not None and rec["status"] in ("keep", "discard"):
                best = min(best, float(rec["metric"]))
            base = float(records[0]["metric"])
            curve.append(min(best, base))
        else:
            if rec["status"] == "keep":
                current = {k: v for k, v in rec["gen_meta"]["config"].items()}
            curve.append(obj.truth({k.replace(allowed, obj.params.name): v for k, v in current.items()}))
    return curve, seconds


def _ledger(repo: Path, hint: Path | None) -> list[dict[str, Any]]:
    res = subprocess.run([sys.executable, "-m", "autoloop", "log", "program.md", "--json"], cwd=repo,
                         capture_output=True, text=True)
    if res.returncode == 0 and res.stdout.strip().startswith(("[", "{")):
        data = json.loads(res.stdout)
        cycles = data if isinstance(data, list) else data.get("cycles", [])
        if cycles:
            return cycles
    found = [p for p in repo.rglob("*.jsonl") if ".git" not in p.parts]
    rows = []
    for path in found:
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("t") == "cycle":
                rows.append(rec)
    return sorted(rows, key=lambda r: r["cycle"])


# --------------------------------------------------------------------------- import cost


def import_cost() -> None:
    code = ("import resource, sys, time; t = time.perf_counter(); import {mod}; "
            "print(round((time.perf_counter() - t) * 1000), "
            "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)")
    print("| import | ms (median of 5) | peak RSS MB |\n|---|---|---|")
    # the last row is what a tune run adds: optuna, its TPE sampler and numpy
    first = ("autoloop.generators.tune_engine as e; "
             "e.Engine([e.Param('x')], 'minimize', 0).propose([e.Observation({'x': 0.5}, 1.0)])")
    for mod in ("autoloop.cli", "autoloop.generators.tune", "optuna", first):
        runs = [subprocess.run([sys.executable, "-c", code.format(mod=mod)], capture_output=True,
                               text=True, check=True).stdout.split() for _ in range(5)]
        ms = statistics.median(int(r[0]) for r in runs)
        rss = statistics.median(int(r[1]) for r in runs)
        label = "a first tune proposal (optuna + TPE)" if mod == first else mod
        print(f"| {label} | {ms} | {rss} |")


# --------------------------------------------------------------------------- main


def _cell(values: list[float]) -> str:
    """Mean ± standard error over seeds, so a reader sees whether two rows are a tie."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return f"{mean:.4g}"
    return f"{mean:.4g} ± {statistics.stdev(values) / math.sqrt(len(values)):.2g}"


_JOB: tuple[Callable[[Objective, int, int], list[float]], Objective, int] | None = None


def _one_seed(seed: int) -> list[float]:
    assert _JOB is not None
    fn, obj, n = _JOB
    return fn(obj, seed, n)


def _curves(fn: Callable[[Objective, int, int], list[float]], obj: Objective, seeds: range, n: int,
            jobs: int) -> list[list[float]]:
    """One curve per seed, `jobs` seeds at a time (forked processes: the results do not depend on it)."""
    global _JOB
    _JOB = (fn, obj, n)
    if jobs <= 1:
        return [_one_seed(seed) for seed in seeds]
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        return pool.map(_one_seed, seeds, chunksize=1)


def _engine_variant(spec: str) -> Callable[[Objective, int, int], list[float]]:
    options = {k: int(v) for k, v in (part.split("=") for part in spec.split(","))}
    return lambda o, s, n: run_tune(o, s, n, **options)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--first-seed", type=int, default=0, help="seeds FIRST..FIRST+SEEDS-1 (fresh seeds check a choice)")
    ap.add_argument("--objectives", nargs="+", choices=list(OBJECTIVES))
    ap.add_argument("--family", choices=list(FAMILIES), default="choosing",
                    help="the objectives when --objectives is not given: choosing (tune's settings "
                         "were picked on these) or heldout (they judge the pick)")
    ap.add_argument("--cli", type=int, default=0, metavar="K", help="also run K seeds through `autoloop run`")
    ap.add_argument("--cli-objectives", nargs="+", default=["quickstart", "noisy"], choices=list(OBJECTIVES))
    ap.add_argument("--cli-only", action="store_true", help="only the `autoloop run` rows")
    ap.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    ap.add_argument("--columns", nargs="+", type=int, default=list(COLUMNS), metavar="N",
                    help="the cycle counts reported (a shorter run for a quick look)")
    ap.add_argument("--jobs", type=int, default=1, help="seeds run at once, each in its own process")
    ap.add_argument("--import-cost", action="store_true")
    ap.add_argument("--variants", action="store_true", help="also the engine settings tune's were chosen among")
    ap.add_argument("--engine", action="append", default=[], metavar="K=V,K=V",
                    help="also tune with these Engine options, e.g. n_startup=10,lhs=0,multivariate=0")
    args = ap.parse_args()
    if args.import_cost:
        import_cost()
        return 0
    columns = args.columns
    n = max(columns)
    objectives = args.objectives or list(FAMILIES[args.family])
    print(f"best metric after N cycles, mean over seeds {args.first_seed}..{args.first_seed + args.seeds - 1}"
          " (lower is better)\n")
    print("| objective | method | " + " | ".join(f"after {c}" for c in columns) + " | s |")
    print("|---|---|" + "---|" * (len(columns) + 1))
    results: dict[str, dict[str, list[list[float]]]] = {}
    for name in objectives:
        obj = OBJECTIVES[name]()
        extra = {f"tune, {spec}": _engine_variant(spec) for spec in args.engine}
        chosen = {k: v for k, v in METHODS.items() if k in args.methods}
        methods = {} if args.cli_only else {**chosen, **(VARIANTS if args.variants else {}), **extra}
        for method, fn in methods.items():
            t0 = time.monotonic()
            curves = _curves(fn, obj, range(args.first_seed, args.first_seed + args.seeds), n, args.jobs)
            results.setdefault(name, {})[method] = curves
            print(f"| {name} | {method} | " + " | ".join(_cell([c[col - 1] for c in curves]) for col in columns)
                  + f" | {time.monotonic() - t0:.0f} |", flush=True)
        if args.cli and name in args.cli_objectives:
            with tempfile.TemporaryDirectory(prefix="tune-bench-") as tmp:
                runs = [run_cli(obj, seed, n, Path(tmp)) for seed in range(args.cli)]
            cells = [statistics.fmean(c[min(col, len(c)) - 1] for c, _ in runs) for col in columns]
            secs = sum(s for _, s in runs)
            print(f"| {name} | tune via `autoloop run` (seeds 0..{args.cli - 1}) | "
                  + " | ".join(f"{v:.4g}" for v in cells) + f" | {secs:.0f} |", flush=True)
    if len(results) > 1 and not args.cli_only:
        family(results, columns)
    return 0


def family(results: dict[str, dict[str, list[list[float]]]], columns: list[int]) -> None:
    """The family at a glance: each objective's values divided by its scale (the mean of every
    method at the first column, so no method sets its own yardstick), averaged over objectives
    seed by seed; and every method's paired difference from Optuna TPE on the same seeds."""
    methods = list(next(iter(results.values())))
    scale = {name: statistics.fmean(c[columns[0] - 1] for curves in by.values() for c in curves) or 1.0
             for name, by in results.items()}

    def per_seed(method: str, col: int) -> list[float]:
        seeds = len(next(iter(results.values()))[method])
        return [statistics.fmean(by[method][s][col - 1] / scale[name] for name, by in results.items())
                for s in range(seeds)]

    print("\nthe family: each objective divided by its scale, then averaged over objectives (lower is better)\n")
    print("| method | " + " | ".join(f"after {c}" for c in columns) + " |")
    print("|---|" + "---|" * len(columns))
    for method in methods:
        print(f"| {method} | " + " | ".join(_cell(per_seed(method, c)) for c in columns) + " |")
    if "Optuna TPE" not in methods:
        return
    print("\n| method − Optuna TPE (same seeds) | " + " | ".join(f"after {c}" for c in columns) + " |")
    print("|---|" + "---|" * len(columns))
    for method in methods:
        if method != "Optuna TPE":
            cells = [_cell([a - b for a, b in zip(per_seed(method, c), per_seed("Optuna TPE", c))])
                     for c in columns]
            print(f"| {method} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main())
