"""Black-box: verifier.measure and $AUTOLOOP_SEED (contract §10), with the default sandbox.

A benchmark that times the candidate's code inside its own process can be fooled by that code:
an `atexit` handler printing a better line, `time.perf_counter` replaced at import. With
`measure: wall` or `cpu` autoloop times the command itself and neither is kept, while a real
speed-up in the same run is. A memo that answers only the input the verifier always used is
kept by a fixed-input verifier and not by one drawing its input from $AUTOLOOP_SEED.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.scripts.e2e import Project, assert_valid_ledger, git, make_project

# The candidate's module: a CPU-bound sum of squares (~0.2 s), and the benchmark that times it
# from inside (`seconds:` is what measure: output reads).
SLOW_LIB = '''\
def solve(n=2_000_000):
    s = 0
    for i in range(n):
        s += i * i
    return s
'''
FAST_LIB = '''\
def solve(n=2_000_000):
    return (n - 1) * n * (2 * n - 1) // 6
'''
BENCH = '''\
import sys, time
sys.path.insert(0, "src")
import lib
t = time.perf_counter()
assert lib.solve() == 2666664666667000000
print(f"seconds: {time.perf_counter() - t:.6f}")
'''
ATEXIT = 'open("src/lib.py", "a").write("import atexit\\natexit.register(print, \\"seconds: 0.000001\\")\\n")'
PATCHED_CLOCK = ('open("src/lib.py", "a").write("import time\\n_real = time.perf_counter\\n'
                 'time.perf_counter = lambda: _real() * 1e-6\\n")')
SPEEDUP = f'W("src/lib.py", {FAST_LIB!r})'

# The paired rule, 10% at least: the cheats change nothing that runs, and on a machine shared
# with other work only a side-by-side comparison tells "no change" from load drifting. No
# end-of-run re-measurement: these tests judge the cycles, and its 20 pairs of best against the
# start (twice that with a holdout) were a third of each run.
ACCEPT = "accept:\n  rule: paired\n  min_effect: 10%\n  final_pairs: 0"
# The cheats are no-ops under wall and cpu: each is kept at most alpha of the time by chance, and
# more on a machine whose load steps between the incumbent's earlier runs and the cycle's (seen:
# the three candidate runs the three fastest of 18 as the other worker's test ended, kept at -12.5%).
# A second, fresh test (confirm) makes a false keep need two such flukes; a real gain pays 3 pairs.
CONFIRMED = ACCEPT + "\n  confirm: true"


def _project(tmp_path: Path, name: str, plan: dict[int, str], files: dict[str, str],
             accept: str = ACCEPT) -> Project:
    return make_project(tmp_path / name, plan, files=files, verifier="{py} bench.py", metric="seconds",
                        guards=False, allowed='["src/**"]', vtimeout=60, stop=f"max_cycles: {len(plan)}",
                        extra=accept)


def _with_measure(p: Project, measure: str) -> None:
    """verifier.measure set in program.md, committed."""
    prog = p.repo / "program.md"
    text = prog.read_text().replace("  metric: seconds\n", f"  metric: seconds\n  measure: {measure}\n")
    prog.write_text(text)
    git(p.repo, "commit", "-qam", "measure", env=p.env)


@pytest.mark.slow   # up to three cycles of a real benchmark each (12 to 60 s)
@pytest.mark.parametrize("measure", ["output", "wall", "cpu"])
def test_outside_timing_keeps_no_cheat_and_a_real_speedup(tmp_path: Path, measure: str) -> None:
    plan = {1: ATEXIT, 2: PATCHED_CLOCK, 3: SPEEDUP}
    # the control asserts its first cycle alone: the rest of the plan would be measured for nothing
    cycles = 1 if measure == "output" else 3
    p = _project(tmp_path, measure, {c: plan[c] for c in range(1, cycles + 1)},
                 {"bench.py": BENCH, "src/lib.py": SLOW_LIB}, CONFIRMED)
    _with_measure(p, measure)
    r = p.run("--cycles", str(cycles), timeout=600)
    assert r.returncode == 0, r.stderr + r.stdout
    st = p.statuses()
    if measure == "output":
        # the control: what the candidate prints is the metric, and the atexit line wins
        assert st[1] == "keep", (st, p.experiments())
        return
    assert st[1] != "keep" and st[2] != "keep", (st, p.experiments())
    assert st[3] == "keep", (st, p.experiments())
    rows = {int(r["cycle"]): float(r["metric"]) for r in p.rows() if r["metric"]}
    assert rows[3] < 0.8 * rows[0] and rows[3] > 0.001, rows   # a time autoloop took, not 1e-06
    assert_valid_ledger(p)
    seeds = [s for line in p.ledger_lines() if line.strip()
             for s in (json.loads(line).get("stats") or {}).get("seeds", {}).values()]
    # a fresh one for every pair, the same for its two runs
    assert len(seeds) >= 6 and set(Counter(seeds).values()) == {2}, seeds


# A verifier whose input is drawn from $AUTOLOOP_SEED (or, the control, always the same one), and
# a candidate memo that fires only on the input it has seen: the test of `square` is correctness,
# the metric the wall time of 60000 calls.
SQUARE_LIB = '''\
def square(x):
    return sum(x for _ in range(x % 50 + 50))
'''
MEMO = '''\
_SEEN = {12345: 1172775}
def square(x):
    if x in _SEEN:
        return _SEEN[x]
    return sum(x for _ in range(x % 50 + 50))
'''
FASTER = '''\
def square(x):
    return x * (x % 50 + 50)
'''
CHECK = '''\
import os, sys
sys.path.insert(0, "src")
import lib
x = {input}
want = x * (x % 50 + 50)
for _ in range(60000):
    if lib.square(x) != want:
        sys.exit("wrong answer")
'''


@pytest.mark.slow   # 19 to 48 s each
@pytest.mark.parametrize("seeded", [False, True])
def test_a_memo_of_seen_inputs_is_not_kept_with_a_seeded_verifier(tmp_path: Path, seeded: bool) -> None:
    inp = 'int(os.environ["AUTOLOOP_SEED"]) % 1_000_000 + 1000' if seeded else "12345"
    plan = {1: f'W("src/lib.py", {MEMO!r})', 2: f'W("src/lib.py", {FASTER!r})'}
    if not seeded:   # the control asserts its first cycle alone
        del plan[2]
    p = _project(tmp_path, f"seed-{seeded}", plan, {"bench.py": CHECK.format(input=inp), "src/lib.py": SQUARE_LIB})
    _with_measure(p, "wall")
    r = p.run("--cycles", str(len(plan)), timeout=600)
    assert r.returncode == 0, r.stderr + r.stdout
    st = p.statuses()
    if not seeded:
        assert st[1] == "keep", (st, p.experiments())   # the control: the memo fools a fixed input
        return
    assert st[1] != "keep", (st, p.experiments())
    assert st[2] == "keep", (st, p.experiments())


# Paired rule: both runs of a pair get the same seed, every pair another. The verifier records
# the seed it saw.
SEED_LOG = '''\
import os
with open(os.environ["SEEDS_TO"], "a") as f:
    f.write(f"{os.getcwd()} {os.environ['AUTOLOOP_SEED']}\\n")
print("score: " + open("val.txt").read().strip())
'''


def test_both_runs_of_a_pair_share_one_seed(tmp_path: Path) -> None:
    p = make_project(tmp_path / "pairs", {1: 'W("val.txt", "20")'}, guards=False, stop="max_cycles: 1",
                     extra="accept:\n  rule: paired\n  pairs: 4\n  min_effect: 1%\n  alpha: 0.1")
    log = p.out / "seeds.txt"
    log.parent.mkdir(parents=True, exist_ok=True)
    (p.repo / "score.py").write_text(SEED_LOG)
    git(p.repo, "commit", "-qam", "seed log", env=p.env)
    p.env["SEEDS_TO"] = str(log)
    r = p.run("--cycles", "1", timeout=600)
    assert r.returncode == 0, r.stderr + r.stdout
    assert p.statuses()[1] == "keep", p.experiments()
    records = [json.loads(line) for line in p.ledger_lines() if line.strip()]
    pairs: dict[str, set[int]] = {}   # the baseline's calibration pairs and the cycle's
    for c in (c for c in records if c.get("t") == "cycle" and c.get("cycle") in (0, 1)):
        seeds = c["stats"]["seeds"]
        for label, seed in seeds.items():
            pairs.setdefault(f"{c['cycle']}-" + label.replace("A", "").replace("B", ""), set()).add(seed)
    assert len(pairs) >= 2 and all(len(s) == 1 for s in pairs.values()), seeds
    assert len({next(iter(s)) for s in pairs.values()}) == len(pairs)   # every pair another
    # what the verifier saw is what the ledger says: each pair's seed in exactly its two runs
    # (in the sandbox both trees show at your checkout's path: the runs are told apart by count)
    seen = [ln.rsplit(" ", 1)[1] for ln in log.read_text().splitlines()]
    for s in pairs.values():
        assert seen.count(str(next(iter(s)))) == 2, (seen, pairs)


# `autoloop gate` with measure: wall: a head that is slower but prints a better line fails.
GATE_PROGRAM = """---
goal: Keep work.py fast
allowed: [work.py]
verifier:
  command: {py} run.py
  measure: {measure}
  metric: seconds
  direction: minimize
  timeout: 60
---
"""
WORK = "import time\ntime.sleep(0.05)\nprint('seconds: 0.05')\n"
WORK_SLOW_LYING = ("import atexit, time\natexit.register(print, 'seconds: 0.000001')\n"
                   "time.sleep(0.3)\n")


@pytest.mark.parametrize("measure", ["output", "wall"])
def test_gate_times_the_head_itself(tmp_path: Path, measure: str) -> None:
    import subprocess

    from tests.scripts.e2e import PY, isolated_env
    env = isolated_env(tmp_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", env=env)
    (repo / "program.md").write_text(GATE_PROGRAM.format(py=PY, measure=measure))
    (repo / "work.py").write_text(WORK)
    (repo / "run.py").write_text("import work\n")
    git(repo, "add", "-A", env=env)
    git(repo, "commit", "-qm", "base", env=env)
    base = git(repo, "rev-parse", "HEAD", env=env)
    (repo / "work.py").write_text(WORK_SLOW_LYING)
    git(repo, "commit", "-qam", "slower, says faster", env=env)
    res = subprocess.run([PY, "-m", "autoloop", "gate", "--base", base, "--pairs", "6", "--json"], cwd=repo,
                         env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert res.stdout.startswith("{"), res.stdout + res.stderr
    out = json.loads(res.stdout)
    if measure == "output":
        assert res.returncode == 0 and out["passed"], res.stdout + res.stderr   # the lie passes
        return
    assert res.returncode == 1 and not out["passed"], res.stdout + res.stderr
    # the head's 0.25 s more sleep, taken from outside (not the 1e-06 it printed)
    assert statistics.median(out["head"]["values"]) > statistics.median(out["base"]["values"]) + 0.15


def test_verify_and_doctor_show_the_time_autoloop_took(tmp_path: Path) -> None:
    # the benchmark burns 0.2 s of CPU and claims a microsecond
    bench = ("import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2:\n    pass\n"
             "print('seconds: 0.000001')\n")
    p = _project(tmp_path, "verify", {}, {"bench.py": bench, "src/lib.py": SLOW_LIB})
    _with_measure(p, "cpu")
    for cmd in ("verify", "doctor"):
        r = p.cli(cmd, timeout=300)
        line = next((ln for ln in r.stdout.splitlines() if "seconds" in ln and "minimize" in ln), "")
        assert line and "0.000001" not in line and "1e-06" not in line, (cmd, r.stdout + r.stderr)
        found = re.search(r"seconds(?::| =) ([0-9][0-9.e+-]*)", line)   # verify: "seconds: X", doctor: "seconds = X"
        assert found, line
        value = float(found.group(1))
        assert value >= 0.15, line


@pytest.mark.slow   # 18 to 59 s
def test_wall_with_limits_and_a_holdout(tmp_path: Path) -> None:
    """The time from outside; limits still read from the verifier's output, a holdout from its."""
    bench = BENCH + "print(f'peak_mb: {lib.PEAK}')\n"
    plan = {1: f'W("src/lib.py", {FAST_LIB + "PEAK = 20" + chr(10)!r})',   # faster, over the limit
            2: f'W("src/lib.py", {FAST_LIB + "PEAK = 10" + chr(10)!r})'}   # faster, within it
    p = make_project(tmp_path / "limits", plan, files={"bench.py": bench, "src/lib.py": SLOW_LIB + "PEAK = 10\n",
                                                        "hold.py": "print('acc: 1')\n"},
                     verifier="{py} bench.py", metric="seconds", guards=False, allowed='["src/**"]',
                     vtimeout=60, stop="max_cycles: 2",
                     extra=ACCEPT + "\nlimits:\n  - {metric: peak_mb, max_increase: 10%}\n"
                           "holdout:\n  command: {py} hold.py\n  metric: acc\n  direction: maximize\n".replace(
                               "{py}", sys.executable))
    _with_measure(p, "wall")
    r = p.run("--cycles", "2", timeout=600)
    assert r.returncode == 0, r.stderr + r.stdout
    st = p.statuses()
    assert st[1] != "keep" and st[2] == "keep", (st, p.experiments())
    assert "peak_mb" in p.experiments()
