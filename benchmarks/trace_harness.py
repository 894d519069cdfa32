"""What a run of a traced benchmark (`init --trace`) costs, before and after the feeder/worker
harness: runs per hour and decisions per hour at the same noise.

usage: python benchmarks/trace_harness.py REPO --trace "CMD" --target MOD:FUNC [--before REF] [--runs N]

REPO is a committed project (a library's sdist after `git init`). For each side — `before`, the
autoloop of git REF (the commit this branch started from, by default), and `after`, this
checkout — the script copies REPO, runs that autoloop's `init --trace … --no-check` on the copy,
then measures N runs as a run's measurement does, without the sandbox and the guards (the same
for both sides): `verifier.inputs` when the program has it (counted at half: both runs of a pair
share it), the command (wall time, and the CPU time of its whole tree by wait4), the score. It
prints one table:

- timed: the metric's seconds (before: wall; after: cpu), the median over the runs;
- run: inputs/2 + command + score (wall), and its ratio to the command's own wall seconds;
- harness share: 1 - (targets' calls + their import) / timed, from the command's timing.json;
- noise: the runs' spread of the timed seconds (median absolute deviation / median, x1.4826);
- runs/h = 3600 / run; decisions/h = runs/h / the runs a decision takes at one common noise
  (autoloop.decide.cost at alpha 0.005, min_effect 2%, a run noise of 2%): the same divisor for
  both sides, so it prices the run alone; the measured noise is shown beside it.

With --through-run, one more row: the after side as a user runs it, `autoloop run` with its
default sandbox and guards, one cycle whose generator adds a comment to the target's module
(a change that does nothing, measured in pairs); its numbers are the means of the runs, read
back from the ledger's stats.run_parts (what `run` prints after the baseline), for the
baseline's calibration (every run scored) and for the cycle (the incumbent's runs beside the
candidate are not), and the harness share from the score's lines.

The machine it runs on is shared: say how loaded it was when quoting the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
GIT_ENV = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.invalid",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.invalid"}
MIN_EFFECT = 0.02


def _autoloop_at(ref: str, tmp: Path) -> Path:
    """autoloop's package at git `ref`, unpacked into tmp (importable from the returned folder)."""
    out = tmp / f"autoloop-{ref}"
    out.mkdir()
    archive = subprocess.run(["git", "-C", str(HERE), "archive", ref, "autoloop"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "x", "-C", str(out)], input=archive, check=True)
    return out


def _init(repo: Path, pythonpath: Path, trace: str, target: str, data: Path) -> dict:
    env = {**os.environ, **GIT_ENV, "PYTHONPATH": str(pythonpath), "XDG_DATA_HOME": str(data)}
    res = subprocess.run([sys.executable, "-m", "autoloop", "init", "--template", "speed", "--trace", trace,
                          "--target", target, "--no-check"], cwd=repo, env=env, capture_output=True, text=True,
                         timeout=3600)
    if res.returncode != 0:
        sys.exit(f"init failed in {repo}:\n{res.stdout}\n{res.stderr}")
    print(res.stdout, file=sys.stderr)
    store = next((data / "autoloop" / "traces").iterdir())
    (repo / "bench" / ".trace").symlink_to(store / "inputs")
    program = (repo / "program.md").read_text()

    def key(name: str) -> str | None:
        for line in program.splitlines():
            if line.strip().startswith(f"{name}:"):
                return line.split(":", 1)[1].split("#", 1)[0].strip()
        return None
    return {"command": key("command"), "score": key("score"), "inputs": key("inputs"),
            "measure": key("measure"), "store": store}


def _timed(argv: str, cwd: Path, env: dict, stdin: Path | None = None) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of the whole tree, exit status) of one command."""
    with open(stdin or os.devnull, "rb") as inp:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, shell=True, cwd=cwd, env=env, stdin=inp, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        err = p.stderr.read() if p.stderr else b""
    if p.returncode != 0:
        print(f"  {argv}: exit {p.returncode}: {err.decode(errors='replace')[-400:]}", file=sys.stderr)
    return wall, usage.ru_utime + usage.ru_stime, p.returncode


def _measure(repo: Path, prog: dict, runs: int, tmp: Path) -> list[dict]:
    out = []
    python_dir = str(Path(sys.executable).parent)
    for i in range(runs):
        seed = str(1000 + i // 2)   # pairs share a seed, as a run's pairs do
        output = tmp / f"out-{repo.name}-{i}"
        output.mkdir()
        env = {**os.environ, "AUTOLOOP_SEED": seed, "AUTOLOOP_OUTPUT": str(output),
               "AUTOLOOP_MEASURE": prog["measure"] or "wall", "PATH": python_dir + os.pathsep + os.environ["PATH"]}
        row = {"inputs": 0.0}
        made = None
        if prog["inputs"]:
            made = tmp / f"inputs-{repo.name}-{seed}.bin"
            if not made.exists():
                with open(made, "wb") as f:
                    t0 = time.perf_counter()
                    subprocess.run(prog["inputs"], shell=True, cwd=repo, env=env, stdout=f, check=True)
                    row["inputs"] = time.perf_counter() - t0
            env["AUTOLOOP_INPUTS"] = str(made)
        row["wall"], row["cpu"], rc = _timed(prog["command"], repo, env, made)
        score = prog["score"].replace("~", str(Path.home()))
        row["score"], _, src = _timed(score, repo, env)
        row["ok"] = rc == 0 and src == 0
        try:
            timing = json.loads((output / "timing.json").read_text())
        except (OSError, ValueError):
            timing = {}
        row["code"] = float(timing.get("target_seconds", 0.0)) + float(timing.get("import_seconds", 0.0))
        out.append(row)
        shutil.rmtree(output, ignore_errors=True)
    return out


def _decision_runs(noise: float) -> float:
    sys.path.insert(0, str(HERE))
    from autoloop.decide import cost
    c = cost.expected(0.005, False, 16, MIN_EFFECT / noise if noise > 0 else 0.0)
    return (c.keep_runs + c.discard_runs) / 2


def _summary(name: str, prog: dict, rows: list[dict]) -> dict:
    timed = [r["cpu"] if prog["measure"] == "cpu" else r["wall"] for r in rows]
    med = statistics.median(timed)
    mad = statistics.median(abs(t - med) for t in timed) * 1.4826
    run = [r["inputs"] + r["wall"] + r["score"] for r in rows]   # inputs is 0 for a pair's second run
    run_s = statistics.median(run) if not prog["inputs"] else statistics.mean(run)
    noise = mad / med if med else 0.0
    return {"side": name, "measure": prog["measure"], "ok": all(r["ok"] for r in rows), "timed": med,
            "command": statistics.median(r["wall"] for r in rows), "score": statistics.median(r["score"] for r in rows),
            "inputs": statistics.mean(r["inputs"] for r in rows), "run": run_s,
            "ratio": run_s / statistics.median(r["wall"] for r in rows),
            "harness": 1 - statistics.median(r["code"] for r in rows) / med if med else 0.0,
            "noise": noise, "runs_h": 3600 / run_s,
            "dec_h_common": 3600 / run_s / _decision_runs(0.02)}


def _through_run(repo: Path, data: Path, target: str) -> list[dict]:
    """The after side measured by `autoloop run` itself, sandboxed: the baseline's runs and a cycle's."""
    module = target.split(":")[0].replace(".", "/")
    source = next(rel for rel in (f"{module}.py", f"{module}/__init__.py") if (repo / rel).is_file())
    program = (repo / "program.md").read_text()
    head, _, body = program.partition("\ngenerator:\n")
    rest = body.split("\n\n", 1)[1] if "\n\n" in body else ""
    script = repo.parent / "comment.sh"   # outside the repository: the generator's, not the tree's
    script.write_text(f"echo '# x' >> {source}\n")
    gen = f"sh {script}"
    (repo / "program.md").write_text(head + f'\ngenerator:\n  kind: command\n  command: "{gen}"\n\n' + rest)
    with open(repo / ".git" / "info" / "exclude", "a") as f:
        f.write("program.md\n")
    (repo / "bench" / ".trace").unlink()
    env = {**os.environ, **GIT_ENV, "PYTHONPATH": str(HERE), "XDG_DATA_HOME": str(data)}
    res = subprocess.run([sys.executable, "-m", "autoloop", "run", "program.md", "--cycles", "1", "--tag", "cost"],
                         cwd=repo, env=env, capture_output=True, text=True, timeout=3600)
    if res.returncode != 0:
        sys.exit(f"autoloop run failed in {repo}:\n{res.stdout}\n{res.stderr}")
    records = [json.loads(line) for line in (repo / ".autoloop/cost/ledger.jsonl").read_text().splitlines()]
    cycles = {r["cycle"]: r for r in records if r.get("t") == "cycle"}
    code = []
    for out in (repo / ".autoloop/cost/logs/cycle-0000/runs").glob("*/score.out"):
        said = dict(line.split(": ", 1) for line in out.read_text().splitlines() if line.endswith(tuple("0123456789"))
                    and ": " in line)
        code.append(float(said.get("target_seconds", 0)) + float(said.get("import_seconds", 0)))

    rows = []
    for n, what in ((0, "calibration"), (1, "a cycle")):
        parts = list(cycles[n]["stats"]["run_parts"].values())

        def mean(key: str) -> float:
            return statistics.mean(float(p[key]) for p in parts)

        timed = [float(p["timed"]) for p in parts]
        med = statistics.median(timed)
        run_s = mean("command") + mean("score") + mean("inputs")
        noise = statistics.median(abs(t - med) for t in timed) * 1.4826 / med
        rows.append({"side": f"after, `autoloop run` (sandboxed): {what}, {len(parts)} runs", "measure": "cpu",
                     "ok": cycles[n]["status"] in ("baseline", "keep", "discard"), "timed": mean("timed"),
                     "command": mean("command"), "score": mean("score"), "inputs": mean("inputs"), "run": run_s,
                     "ratio": run_s / mean("command"), "per_timed": run_s / mean("timed"),
                     "harness": 1 - statistics.mean(code) / mean("timed") if code else 0.0,
                     "noise": noise, "runs_h": 3600 / run_s, "dec_h_common": 3600 / run_s / _decision_runs(0.02)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("repo", type=Path)
    ap.add_argument("--trace", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--before", default="b0b6027", help="autoloop's git ref for the `before` side")
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--through-run", action="store_true",
                    help="also measure the after side through `autoloop run` (sandboxed, guards on)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="trace-harness-"))
    try:
        results = []
        for name, path in (("before", _autoloop_at(args.before, tmp)), ("after", HERE)):
            repo = tmp / name
            shutil.copytree(args.repo, repo, symlinks=True)
            prog = _init(repo, path, args.trace, args.target, tmp / f"data-{name}")
            rows = _measure(repo, prog, args.runs, tmp)
            results.append(_summary(name, prog, rows))
        if args.through_run:
            results += _through_run(tmp / "after", tmp / "data-after", args.target)
        print("| side | measure | all passed | timed (s) | command wall (s) | inputs (s, per run) | score (s) "
              "| run (s) | run / command | harness share | noise | runs/h | decisions/h (at 2% noise) |")
        print("|" + " --- |" * 13)
        for r in results:
            print(f"| {r['side']} | {r['measure']} | {r['ok']} | {r['timed']:.2f} | {r['command']:.2f} | "
                  f"{r['inputs']:.2f} | {r['score']:.2f} | {r['run']:.2f} | {r['ratio']:.2f}× | {r['harness']:.0%} | "
                  f"{r['noise']:.1%} | {r['runs_h']:.0f} | {r['dec_h_common']:.1f} |")
        for r in results:
            if "per_timed" in r:
                print(f"\n{r['side']}: a run is {r['per_timed']:.2f}× its timed CPU seconds")
        print(f"\nload average at the end: {os.getloadavg()}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
