"""Shared pieces of the cycle benchmarks: a synthetic repository, autoloop driven on it, and
shell scripts doing the same cycle with the fewest git commands — all measured side by side.

The repository: N small files in folders of 100, plus work.txt (the one allowed file), the
generator and verifier scripts and program.md; committed and packed (as any clone is).

The cycle (every side runs exactly these two children, each through /bin/sh -c):
  generator  appends one line to work.txt and prints a hypothesis (no-op-ish)
  verifier   prints `score: -N` on even cycles (better: keep) and `score: 1000000` on odd ones
             (worse: discard) — so half the cycles are kept, half reverted
Both come as shell built-ins (`sh`, the default: the cheapest possible cycle, so the figure is
autoloop against git alone) or as Python scripts (`python`: the cheapest real verifier — an
interpreter has to start).

ISOLATED_SH is the baseline of the targets: the minimal git operations a cycle of *this tool*
needs — detect the change and commit the candidate (`git add -A`, `git commit`), check that
commit out for verification in a second worktree made exactly that commit (`reset --hard` +
`clean -ffdx`: nothing the generator or a previous verifier left is there), verify there, and
advance the branch (the commit already did) or reset it on a discard (`reset --hard HEAD~1`):
4 or 5 git processes a cycle. It finds no more than git shows, checks no rules, guards no .git
and keeps no journal: that is autoloop's own work, and what the ratio prices.

BASELINE_SH (`in-place`) is shown beside it for reference, and was the yardstick of the
targets until the issue8 rework: what a person scripts without any isolation — generate, verify
in the same tree, then `git add -A && git commit` to keep or `git checkout -- .` to revert (1
or 2 git processes a cycle). It omits steps this tool's cycle cannot do without: the candidate
is never committed before it is measured, the verifier runs in the tree the generator just
wrote (with whatever else the generator left there), and `checkout -- .` leaves new files
behind on a revert. A ratio against it measures the price of isolation as much as autoloop.

autoloop's time per cycle comes from its ledger: the time between consecutive `cycle` records,
which covers everything the loop does per cycle (journal rendering included) and leaves out
start-up. The scripts' comes from bash's $EPOCHREALTIME around their loops.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# Two sets of the same two children. `sh`: shell built-ins only — the cheapest possible cycle,
# so the ratio is autoloop's cost against git's alone. `python`: the same logic as Python
# scripts — the cheapest verifier a real project has (an interpreter has to start).

# Runs autoloop's CLI and, at exit, writes its peak and current RSS (and whether numpy/scipy were
# loaded) to $AUTOLOOP_BENCH_MEM: what peak_memory.py and end_check.py read.
MEM_WRAPPER = """\
import atexit, json, os, sys
def _report():
    fields = {"modules": sorted(m for m in ("numpy", "scipy") if m in sys.modules)}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmHWM", "VmRSS"):
                fields[k] = int(v.split()[0]) * 1024
    with open(os.environ["AUTOLOOP_BENCH_MEM"], "w") as f:
        json.dump(fields, f)
atexit.register(_report)
from autoloop.cli import main
sys.exit(main(sys.argv[1:]))
"""

CHILDREN = {
    "sh": (
        'echo "line $AUTOLOOP_CYCLE" >> work.txt; echo "Hypothesis: append line $AUTOLOOP_CYCLE"',
        'if [ $((AUTOLOOP_CYCLE % 2)) = 0 ]; then echo "score: -$AUTOLOOP_CYCLE"; else echo "score: 1000000"; fi',
    ),
    "python": ("{python} gen.py", "{python} verify.py"),
}
GEN_PY = """\
import os
n = os.environ["AUTOLOOP_CYCLE"]
with open("work.txt", "a") as f:
    f.write(f"line {n}\\n")
print(f"Hypothesis: append line {n}")
"""
VERIFY_PY = """\
import os
n = int(os.environ["AUTOLOOP_CYCLE"])
print(f"score: {-n if n % 2 == 0 else 1000000}")
"""

BASELINE_SH = r'''#!/bin/bash
# For reference only: the cycle without isolation (verify in place, keep or revert in place).
# usage: baseline.sh FIRST_CYCLE COUNT BEST LOG_DIR   (run in the repository)
set -e
GEN=$(cat "$4/gen.cmd"); VERIFY=$(cat "$4/verify.cmd")
first=$1; count=$2; best=$3; log=$4
t0=$EPOCHREALTIME
for ((n = first; n < first + count; n++)); do
    export AUTOLOOP_CYCLE=$n
    /bin/sh -c "$GEN" > "$log/gen.out" 2> "$log/gen.err" < /dev/null
    /bin/sh -c "$VERIFY" > "$log/verify.out" 2> "$log/verify.err" < /dev/null
    score=
    while IFS= read -r line; do
        case $line in "score: "*) score=${line#score: } ;; esac
    done < "$log/verify.out"
    if [ -n "$score" ] && [ "$score" -lt "$best" ]; then
        git add -A
        git commit -q -m "cycle $n"
        best=$score
    else
        git checkout -q -- .
    fi
done
t1=$EPOCHREALTIME
echo "$t0 $t1 $best"
'''

# The baseline of the targets: this tool's cycle in the fewest git commands. The candidate is
# committed (add -A finds the change), measured in a second worktree made exactly that commit
# (reset --hard + clean, so nothing the generator or a previous verifier left is there), and a
# worse one is dropped by resetting the first tree. No snapshot, no scope rules, no journal.
ISOLATED_SH = r'''#!/bin/bash
# usage: isolated.sh FIRST_CYCLE COUNT BEST LOG_DIR VERIFY_TREE   (run in the repository)
set -e
GEN=$(cat "$4/gen.cmd"); VERIFY=$(cat "$4/verify.cmd")
first=$1; count=$2; best=$3; log=$4; vt=$5
t0=$EPOCHREALTIME
for ((n = first; n < first + count; n++)); do
    export AUTOLOOP_CYCLE=$n
    /bin/sh -c "$GEN" > "$log/gen.out" 2> "$log/gen.err" < /dev/null
    git add -A
    git commit -q --allow-empty -m "candidate $n"
    git -C "$vt" reset -q --hard main
    git -C "$vt" clean -ffdxq
    (cd "$vt" && /bin/sh -c "$VERIFY" > "$log/verify.out" 2> "$log/verify.err" < /dev/null)
    score=
    while IFS= read -r line; do
        case $line in "score: "*) score=${line#score: } ;; esac
    done < "$log/verify.out"
    if [ -n "$score" ] && [ "$score" -lt "$best" ]; then
        best=$score
    else
        git reset -q --hard HEAD~1
    fi
done
t1=$EPOCHREALTIME
echo "$t0 $t1 $best"
'''


@dataclass
class Bench:
    root: Path        # scratch folder
    repo: Path        # autoloop's repository
    base: Path        # the baseline's copy of it
    env: dict[str, str]
    iso: Path | None = None   # the isolated baseline's copy, and its verify worktree

    # ---- set-up --------------------------------------------------------------------------

    @classmethod
    def create(cls, root: Path, files: int, per_dir: int = 100, children: str = "sh",
               python: str = sys.executable) -> "Bench":
        root.mkdir(parents=True, exist_ok=True)
        gitconfig = root / "gitconfig"
        gitconfig.write_text("[user]\n\tname = bench\n\temail = bench@example.com\n"
                             "[init]\n\tdefaultBranch = main\n[gc]\n\tauto = 0\n[maintenance]\n\tauto = false\n")
        env = dict(os.environ, XDG_CACHE_HOME=str(root / "cache"), GIT_CONFIG_NOSYSTEM="1",
                   GIT_CONFIG_GLOBAL=str(gitconfig), LC_ALL="C")
        for k in list(env):
            if k.startswith("GIT_") and k not in ("GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_GLOBAL"):
                del env[k]
        b = cls(root, root / "repo", root / "baseline", env)
        gen_cmd, verify_cmd = (c.format(python=python) for c in CHILDREN[children])
        _make_repo(b.repo, files, per_dir, env, gen_cmd, verify_cmd)
        # the baseline works on an identical copy (same files, same history)
        subprocess.run(["git", "clone", "-q", str(b.repo), str(b.base)], check=True, env=env)
        b.iso = root / "isolated"
        subprocess.run(["git", "clone", "-q", str(b.repo), str(b.iso)], check=True, env=env)
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(root / "isolated-verify"), "main"],
                       cwd=b.iso, check=True, env=env, capture_output=True)
        (root / "isolated.sh").write_text(ISOLATED_SH)
        b._iso_next, b._iso_best = 1, 0
        logs = root / "baseline-logs"
        logs.mkdir()
        (logs / "gen.cmd").write_text(gen_cmd)
        (logs / "verify.cmd").write_text(verify_cmd)
        (root / "baseline.sh").write_text(BASELINE_SH)
        b._base_next = 1
        b._base_best = 0
        return b

    # ---- the two sides -------------------------------------------------------------------

    def autoloop(self, cycles: int, tag: str = "bench", python: str = sys.executable,
                 wrapper: list[str] | None = None, repo: Path | None = None,
                 pythonpath: str | None = None) -> dict:
        """One `autoloop run` invocation of `cycles` cycles (resuming the tag). Returns the
        per-cycle intervals of this invocation and its wall time. `pythonpath`: run another
        autoloop source tree (e.g. an older version, in its own copy of the repository)."""
        repo = repo or self.repo
        env = self.env if pythonpath is None else dict(self.env, PYTHONPATH=pythonpath)
        cmd = (wrapper or [python, "-m", "autoloop"]) + ["run", "program.md", "--tag", tag,
                                                         "--cycles", str(cycles)]
        t0, cpu0 = time.perf_counter(), _children_cpu()
        res = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True)
        wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
        if res.returncode != 0:
            raise SystemExit(f"autoloop failed ({res.returncode}):\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
        ledger = [json.loads(x) for x in (repo / ".autoloop" / tag / "ledger.jsonl").read_text().splitlines()]
        last_start = max(i for i, r in enumerate(ledger) if r["t"] == "start")
        mine = [r for r in ledger[last_start:] if r["t"] == "cycle" and r["cycle"] > 0]
        statuses: dict[str, int] = {}
        for c in mine:
            statuses[c["status"]] = statuses.get(c["status"], 0) + 1
        ts = [r["ts"] for r in mine]
        return {"intervals": [b - a for a, b in zip(ts, ts[1:])], "wall": wall, "cpu": cpu,
                "statuses": statuses, "stdout": res.stdout, "stderr": res.stderr}

    def baseline(self, cycles: int) -> dict:
        per_cycle, self._base_best = self._shell_cycles("baseline.sh", self.base, self._base_next, cycles,
                                                        self._base_best)
        self._base_next += cycles
        return {"per_cycle": per_cycle}

    def isolated(self, cycles: int) -> dict:
        assert self.iso is not None
        per_cycle, self._iso_best = self._shell_cycles("isolated.sh", self.iso, self._iso_next, cycles,
                                                       self._iso_best, str(self.root / "isolated-verify"))
        self._iso_next += cycles
        return {"per_cycle": per_cycle}

    def _shell_cycles(self, script: str, cwd: Path, first: int, cycles: int, best: int,
                      *extra: str) -> tuple[float, int]:
        """Run `cycles` cycles of one of the shell baselines: (seconds a cycle, the best metric after)."""
        res = subprocess.run(["bash", str(self.root / script), str(first), str(cycles), str(best),
                              str(self.root / "baseline-logs"), *extra],
                             cwd=cwd, env=self.env, capture_output=True, text=True)
        if res.returncode != 0:
            raise SystemExit(f"{script} failed:\n{res.stdout}\n{res.stderr}")
        t0, t1, after = res.stdout.split()
        return (float(t1) - float(t0)) / cycles, int(after)

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _make_repo(repo: Path, files: int, per_dir: int, env: dict[str, str], gen_cmd: str, verify_cmd: str) -> None:
    repo.mkdir(parents=True)

    def git(*a: str) -> None:
        subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True, env=env)

    git("init", "-q")
    for i in range(files):
        d = repo / "src" / f"pkg{i // per_dir:05d}"
        if i % per_dir == 0:
            d.mkdir(parents=True)
        (d / f"mod{i}.py").write_text(f"X = {i}\n" * 4)
    (repo / "work.txt").write_text("")
    (repo / "gen.py").write_text(GEN_PY)
    (repo / "verify.py").write_text(VERIFY_PY)
    (repo / ".gitignore").write_text("__pycache__/\n")
    (repo / "program.md").write_text(
        "---\ngoal: benchmark\nallowed: [work.txt]\n"
        f"verifier: {{command: {json.dumps(verify_cmd)}, metric: score, direction: minimize}}\n"
        f"generator: {{kind: command, command: {json.dumps(gen_cmd)}}}\n---\n")
    git("add", "-A")
    git("commit", "-qm", "init")
    git("repack", "-adq")   # as any cloned repository is: objects in a pack, not 100k loose files


def _children_cpu() -> float:
    """CPU seconds (user + system) of every finished child and its waited-for descendants: the
    invocation's own work, which a busy machine slows down far less than its wall time."""
    import resource
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def summary(values: list[float]) -> str:
    """median [min – max] of a list of ratios or times."""
    return f"{statistics.median(values):.2f} [{min(values):.2f} – {max(values):.2f}]"


def interleaved(bench: Bench, rounds: int, cycles: int, report=print, before: str | None = None) -> dict:
    """`rounds` × (autoloop run of `cycles` cycles, then each baseline for as many — and, with
    `before`, another autoloop source tree on its own copy of the repository), alternated so
    all see the same machine load; returns the per-round figures."""
    rows = []
    old_repo = None
    if before is not None:
        old_repo = bench.root / "repo-before"
        if not old_repo.exists():
            subprocess.run(["git", "clone", "-q", str(bench.repo), str(old_repo)], check=True, env=bench.env)
    for r in range(rounds):
        a = bench.autoloop(cycles)
        b = bench.baseline(cycles)
        i = bench.isolated(cycles)
        a_cycle = statistics.mean(a["intervals"])
        # "ratio" (the targets' figure) is against the minimal cycle of this tool (ISOLATED_SH)
        row = {"autoloop": a_cycle, "baseline": i["per_cycle"], "ratio": a_cycle / i["per_cycle"],
               "inplace": b["per_cycle"], "ratio_inplace": a_cycle / b["per_cycle"],
               "statuses": a["statuses"], "wall": a["wall"]}
        extra = ""
        if before is not None:
            o = bench.autoloop(cycles, repo=old_repo, pythonpath=before)
            row["before"] = statistics.mean(o["intervals"])
            row["speedup"] = row["before"] / a_cycle
            row["cpu_speedup"] = o["cpu"] / a["cpu"]    # whole invocations, start-up included
            extra = (f";  before {row['before'] * 1000:7.1f} (×{row['speedup']:.2f}, "
                     f"CPU ×{row['cpu_speedup']:.2f})")
        rows.append(row)
        report(f"  round {r + 1}/{rounds}: autoloop {a_cycle * 1000:7.1f}  baseline {i['per_cycle'] * 1000:7.1f}"
               f"  in-place {b['per_cycle'] * 1000:7.1f} ms/cycle;  ratio {a_cycle / i['per_cycle']:.2f}"
               f" (vs in-place {a_cycle / b['per_cycle']:.2f}){extra};  "
               f"{', '.join(f'{k} {v}' for k, v in sorted(a['statuses'].items()))}")
    return {"rows": rows}


def run_workload(code: str, root: Path, *args: str) -> dict:
    """Run `code` (a script printing one JSON object) in a child Python importing autoloop from
    `root`, from a neutral folder; its JSON."""
    import tempfile
    out = subprocess.run([sys.executable, "-c", code, *args], env=dict(os.environ, PYTHONPATH=str(root)),
                         cwd=tempfile.gettempdir(), capture_output=True, text=True, check=True).stdout
    return json.loads(out)
