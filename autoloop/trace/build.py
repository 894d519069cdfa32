"""Recording a workload and turning it into a benchmark's inputs: COMMAND runs once in a
throwaway worktree of HEAD with the recorder loaded into its Python processes; the recorded calls
are then checked at HEAD by the project's own interpreter (bench's replay module), which writes
the usable calls and their outcomes into the store; a measurement is sized from their timings.

The store is outside the repository (its history would be readable by the generator), one per
checkout: `$XDG_DATA_HOME/autoloop/traces/<repo>-<hash of its path>/` with `inputs/` (the
arguments: the replay reads them, so measurements see them through `data:`) and `private/`
(the outcomes recorded at HEAD: only the score reads them).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from autoloop.base.walk import remove_tree, temp_dir
from autoloop.errors import RunFailure, UsageError
from autoloop.git.workspace import Workspace, Worktree
from autoloop.process import proc
from autoloop.trace import derive

REPLAY_MODULE = "tracereplay.py"     # bench/ name of autoloop/trace/replay.py
# bench/ names of the modules copied there: autoloop/trace/<the name without "trace">
BENCH_MODULES = (REPLAY_MODULE, "tracederive.py", "tracefeed.py")
BATCH_S = 0.01                       # a batch of calls handed to the worker: about this much work at HEAD
MAX_BATCH = 2048
MIN_USABLE = 5                       # usable calls a target needs (fewer: init refuses)
MAX_DERIVED = 500_000                # derived calls of one target in one measurement
CALL_LIMIT_S = 2.0                   # the least time a replayed call may run before it counts as not ending
VENV_NAMES = (".venv", "venv")       # in-repository venvs the throwaway tree links to


@dataclass
class TargetReport:
    name: str
    seen: int = 0                   # calls made by the workload (outermost, recursion not counted)
    distinct: int = 0
    usable: int = 0                 # distinct calls kept
    derivable: int = 0              # ... from which new calls can be derived
    refused: dict[str, list] = field(default_factory=dict)   # reason -> [count, example]
    error: str = ""                 # the target could not be used at all
    file: str = ""                  # its module, relative to the repository
    seconds: float = 0.0            # one run of every usable call at HEAD
    derived_seconds: float = 0.0    # mean seconds of a derived call at HEAD
    derived_raise: float = 0.0      # share of derived calls that raise where their source returned
    derived: int = 0                # planned per measurement
    recorded: int = 0               # planned per measurement
    frozen: list = field(default_factory=list)   # arguments kept as recorded: changing them mostly fails
    new_share: float = 1.0          # of the derived calls drawn, those new (the rest repeat, left out)
    kept: list = field(default_factory=list)     # arguments no replayed call varies (positions, names)
    skew: list | None = None        # [argument, share of the replayed calls with its one value, the value]
    order_dependent: int = 0        # derived calls answering otherwise after other calls: the score checks all


@dataclass
class Trace:
    store: Path
    python: str                     # the interpreter the workload ran (relative when inside the repo)
    roots: list[str]                # sys.path entries (repository-relative) the targets import from
    targets: list[TargetReport]
    command_s: float = 0.0
    command_exit: int | None = 0    # a failing test still records its calls: said, not refused


def store_for(repo_root: Path) -> Path:
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    digest = hashlib.sha256(str(repo_root.resolve()).encode()).hexdigest()[:12]
    return base / "autoloop" / "traces" / f"{repo_root.name}-{digest}"


def parse_target(text: str) -> str:
    module, sep, qual = text.partition(":")
    ident = all(p.isidentifier() for p in module.split(".")) and all(p.isidentifier() for p in qual.split("."))
    if not sep or not module or not qual or not ident:
        raise UsageError(f"--target {text!r}: give MODULE:NAME, e.g. mypkg.text:slugify or "
                         "mypkg.parse:Parser.parse")
    return text


def _source(name: str) -> str:
    return resources.files("autoloop.trace").joinpath(name).read_text(encoding="utf-8")


def copy_modules(folder: Path) -> None:
    """The replay's modules (BENCH_MODULES) into `folder`, under their bench/ names."""
    for name in BENCH_MODULES:
        (folder / name).write_text(_source(name[len("trace"):]), encoding="utf-8")


def _loader_dir(tmp: Path) -> Path:
    """A folder for PYTHONPATH: sitecustomize.py starts the recorder in every Python process."""
    d = tmp / "loader"
    d.mkdir()
    (d / "_autoloop_recorder.py").write_text(_source("recorder.py"), encoding="utf-8")
    (d / "sitecustomize.py").write_text(
        "try:\n    import _autoloop_recorder\n    _autoloop_recorder.install()\n"
        "except Exception as _exc:  # the workload must run even if recording cannot\n"
        "    import sys\n    print('autoloop trace: recorder not started: %r' % (_exc,), file=sys.stderr)\n",
        encoding="utf-8")
    return d


def _merge(rec_dir: Path, names: list[str]) -> tuple[dict, str, dict[str, TargetReport]]:
    """The processes' records as one: (records for the check, the interpreter, reports)."""
    merged: dict[str, dict] = {n: {"calls": {}} for n in names}
    reports = {n: TargetReport(n) for n in names}
    python = ""
    for path in sorted(rec_dir.glob("rec-*.pkl")):
        with open(path, "rb") as f:
            data = pickle.load(f)   # bytes, strings and numbers only: the arguments stay pickled
        python = python or data["python"]
        for name, t in data["targets"].items():
            r = reports[name]
            r.seen += t["seen"]
            r.file = r.file or (t["file"] or "")
            for reason, (count, example) in t["refused"].items():
                slot = r.refused.setdefault(reason, [0, example])
                slot[0] += count
            for blob, outcome, count in t["calls"]:
                key = hashlib.sha1(blob).hexdigest()
                have = merged[name]["calls"].get(key)
                if have is None:
                    merged[name]["calls"][key] = [blob, outcome, count]
                else:
                    have[2] += count
    records = {n: {"calls": list(m["calls"].values())} for n, m in merged.items()}
    for n in names:
        reports[n].distinct = len(records[n]["calls"])
    return records, python, reports


def _relative(path: str, roots: tuple[Path, ...]) -> str | None:
    """`path` relative to the first of `roots` it is in, as written (a venv's python is a link
    out of the venv: resolved, it would be the base interpreter), else resolved; or None."""
    for candidate, resolve in ((os.path.normpath(path), os.path.normpath), (os.path.realpath(path), os.path.realpath)):
        for root in roots:
            base = resolve(str(root))
            if candidate == base or candidate.startswith(base + os.sep):
                return os.path.relpath(candidate, base).replace(os.sep, "/")
    return None


def _import_root(rel_file: str, module: str) -> str:
    """The sys.path entry (repository-relative, '' for the root) `module` is imported from."""
    parts = rel_file.split("/")
    depth = len(module.split(".")) + (1 if parts[-1] == "__init__.py" else 0)
    return "/".join(parts[:-depth]) if len(parts) > depth else ""


def record(repo_root: Path, command: str, targets: list[str], *, budget_s: float = 1.0,
           timeout: float = 3600) -> Trace:
    """Run `command` at HEAD with the recorder, check what it recorded, fill the store and plan
    a measurement of about `budget_s` seconds inside the targets (at HEAD). RunFailure when the
    command or the check fails; the reports say what each target kept and why not the rest."""
    ws = Workspace(repo_root, "trace")
    ws.check_state()
    head = ws.head()
    tmp = temp_dir("trace")
    tree = Worktree(repo_root, ws.common_dir, tmp / "tree")
    try:
        tree.open(head)
        for name in VENV_NAMES:   # an untracked venv of the checkout, for a command that names it
            if (repo_root / name).is_dir() and not (tree.path / name).exists():
                (tree.path / name).symlink_to(repo_root / name)
        rec_dir = tmp / "records"
        rec_dir.mkdir()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_loader_dir(tmp)), env.get("PYTHONPATH", "")]))
        env.update(AUTOLOOP_TRACE_DIR=str(rec_dir), AUTOLOOP_TRACE_TARGETS=",".join(targets))
        res = proc.run(command, cwd=tree.path, env=env, timeout=timeout, log_stem=tmp / "logs" / "command")
        if res.timed_out:
            raise RunFailure(f"--trace command did not end within {timeout:.0f} s: {command}")
        records, python, reports = _merge(rec_dir, targets)
        if not python:
            raise RunFailure(f"--trace {command!r} ran no Python process that loaded the recorder "
                             f"({res.describe()}); it must start Python without -I, -E or -S, which skip "
                             "PYTHONPATH's sitecustomize")
        roots = _place(reports, (tree.path, repo_root))
        store = store_for(repo_root)
        remove_tree(store, quiet=True)
        store.mkdir(parents=True)
        os.chmod(store, 0o700)
        _check(python, records, reports, roots, tree.path, store, tmp)
        _plan(list(reports.values()), budget_s)
        rel_python = _relative(python, (tree.path, repo_root))
        return Trace(store, rel_python if rel_python and not rel_python.startswith("..") else python,
                     roots, [reports[n] for n in targets], res.duration_s, res.exit_code)
    finally:
        tree._discard()
        remove_tree(tmp, quiet=True)


def _place(reports: dict[str, TargetReport], roots: tuple[Path, ...]) -> list[str]:
    """Each target's module file made repository-relative; a target imported from elsewhere (an
    installed copy) is unusable: the benchmark would not measure the repository's code."""
    paths: list[str] = []
    for r in reports.values():
        if not r.file:
            if r.seen == 0:
                r.error = "never called by the command"
            continue
        rel = _relative(r.file, roots)
        parts = rel.split("/") if rel else []
        if parts and (parts[0] in VENV_NAMES or {"site-packages", "dist-packages"} & set(parts)):
            rel = None   # the checkout's venv: a copy pip installed (for a test dependency, say)
        if rel is None:
            r.error = (f"imported from {r.file}, not from the repository's own files (an installed copy): the "
                       "benchmark would not measure your code; install the project in editable mode "
                       "(`pip install -e .`, again after installing anything that depends on it) or run the "
                       "command so that the repository's folder comes first on sys.path")
            continue
        r.file = rel
        root = _import_root(rel, r.name.split(":")[0])
        if root not in paths:
            paths.append(root)
    return paths


def _check(python: str, records: dict, reports: dict[str, TargetReport], roots: list[str], tree: Path,
           store: Path, tmp: Path) -> None:
    usable = {n: records[n] for n, r in reports.items() if not r.error and records[n]["calls"]}
    rec_path, report_path = tmp / "records.pkl", tmp / "report.json"
    with open(rec_path, "wb") as f:
        pickle.dump(usable, f, 4)
    (tmp / "bench").mkdir()
    copy_modules(tmp / "bench")
    (tmp / "bench" / "tracecheck.py").write_text(_source("check.py"), encoding="utf-8")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree / r) if r else str(tree) for r in roots] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    res = proc.run([python, str(tmp / "bench" / "tracecheck.py"), str(rec_path), str(store), str(report_path)],
                   cwd=tree, env=env, timeout=3600, log_stem=tmp / "logs" / "check")
    if not res.ok:
        raise RunFailure(f"checking the recorded calls at HEAD failed ({res.describe()}): "
                         f"{res.stderr_tail(600).strip()}")
    found = json.loads(report_path.read_text())
    for name, got in found.items():
        r = reports[name]
        r.error = got.get("error", "")
        for reason, (count, example) in got["refused"].items():
            slot = r.refused.setdefault(reason, [0, example])
            slot[0] += count
        r.usable, r.derivable, r.seconds = got["usable"], got["derivable"], got["seconds"]
        r.frozen = got.get("frozen", [])
        r.new_share = got.get("new_share", 1.0)
        r.kept, r.skew = got.get("kept", []), got.get("skew")
        r.order_dependent = got.get("order_dependent", 0)
        r.derived_seconds = got["derived_seconds"] / got["derived"] if got["derived"] else 0.0
        r.derived_raise = got["derived_raise"] / got["derived"] if got["derived"] else 0.0
    for n, r in reports.items():
        if not r.error and n not in found and r.seen:
            r.error = "no call could be recorded"


def _plan(reports: list[TargetReport], budget_s: float) -> None:
    """Each usable target gets an equal share of `budget_s`, filled with derived calls (at their
    mean time at HEAD) and RECORDED_SHARE of recorded ones, each at most once."""
    live = [r for r in reports if not r.error and r.usable >= MIN_USABLE]
    for r in live:
        share = budget_s / len(live)
        per_call = r.derived_seconds or (r.seconds / r.usable if r.usable else 0.0) or 1e-6
        # a draw that leaves repeats out is drawn that much larger, up to five times
        n = max(1, min(MAX_DERIVED, math.ceil(share / per_call / max(r.new_share, 0.2)))) if r.derivable else 0
        r.recorded = min(r.usable, max(1, math.ceil(n * derive.RECORDED_SHARE))) if n else r.usable
        r.derived = n


def usable(trace: Trace) -> list[TargetReport]:
    return [r for r in trace.targets if not r.error and r.usable >= MIN_USABLE]


def plan_json(trace: Trace) -> str:
    # a call's limit: far above what calls take at HEAD, so that only a call that does not end
    # (or takes a thousand times as long) reaches it, in produce and score alike
    # a batch: the calls the worker holds at once (the only ones a target can see ahead of it),
    # large enough that the round trip per batch stays a small share
    return json.dumps({"targets": [{"name": r.name, "derived": r.derived, "recorded": r.recorded,
                                    "limit": round(max(CALL_LIMIT_S, 1000 * r.derived_seconds), 3),
                                    "batch": batch_size(r.derived_seconds),
                                    "check": "all" if r.order_dependent else "sample"}
                                   for r in usable(trace)]}, indent=1) + "\n"


def batch_size(per_call_s: float) -> int:
    return max(1, min(MAX_BATCH, math.ceil(BATCH_S / per_call_s))) if per_call_s > 0 else 64
