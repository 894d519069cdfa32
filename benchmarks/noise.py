"""How honest is the ratchet on a noisy metric? strict vs paired(+confirm), through the real CLI.

Each scenario is one real run (`python -m autoloop run`) on a fresh temporary repository with
a simulated verifier: a tiny Python script whose score is

    100 * (1 - gain) ** (number of `GAIN` lines in work.py)
        * (1 + drift * sin(2 pi run / period + phase))       # slow drift of the machine
        * (1 + cv * N(0, 1))                                   # run-to-run noise
        * (1 + burst * U(0.5, 1.5) in a share --burst-rate of the runs)   # bursts

with its noise drawn from a seed and a run counter kept outside the tree (so every run of the
benchmark is reproducible). The generator appends one line to work.py per cycle: a comment
(a change that does nothing) or a `GAIN` line (a real improvement of known size).

    python benchmarks/noise.py                  # the table in the README (a few minutes, 2 cores)
    python benchmarks/noise.py --noop-cycles 30 --gain-cycles 15    # a quicker look
    python benchmarks/noise.py --rules paired --noop-cv 0.01 --gain 0.05 --burst-rate 0.15 --burst 0.4
                                                # heavy-tailed: 15% of runs are bursts of ~+40%

For thousands of candidates on many noise shapes (the bound on false keeps), the rule alone in
process: benchmarks/noise_shapes.py.

Reported per scenario: candidates and keeps, the keep rate with its 95% interval (the false-keep
rate for no-op changes, the power for real gains), the gain the run reports (stored baseline →
stored best) and the gain re-measured at the end of the run (best vs start, 20 interleaved
pairs, with its 95% confidence interval): the phantom gain when the changes did nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from scipy.stats import binomtest

VERIFIER = """\
import math, os, random
state = os.environ["NOISE_STATE"]
try:
    n = int(open(state).read() or 0)
except FileNotFoundError:
    n = 0
with open(state, "w") as f:
    f.write(str(n + 1))
seed = os.environ["NOISE_SEED"]
rng = random.Random(f"{seed}:{n}")
phase = random.Random(f"phase:{seed}").uniform(0, 2 * math.pi)
cv, drift = float(os.environ["NOISE_CV"]), float(os.environ["NOISE_DRIFT"])
period, gain = float(os.environ["NOISE_PERIOD"]), float(os.environ["NOISE_GAIN"])
gains = open("work.py").read().count("GAIN")
value = 100.0 * (1 - gain) ** gains
value *= 1 + drift * math.sin(2 * math.pi * n / period + phase)
if os.environ.get("NOISE_DIST") == "t3":     # Student t, 3 degrees of freedom: heavy tails
    value *= math.exp(cv * rng.gauss(0, 1) / math.sqrt(rng.gammavariate(1.5, 1 / 1.5)))
else:
    value *= 1 + cv * rng.gauss(0, 1)
if rng.random() < float(os.environ.get("NOISE_BURST_RATE") or 0):   # another job, a GC pause
    value *= 1 + float(os.environ["NOISE_BURST"]) * rng.uniform(0.5, 1.5)
print(f"score: {value:.6f}")
"""

GENERATOR = """\
import os
n = os.environ["AUTOLOOP_CYCLE"]
line = "# GAIN " + n if os.environ["NOISE_KIND"] == "gain" else "# note " + n
with open("work.py", "a") as f:
    f.write(line + "\\n")
print("Hypothesis: " + ("a real improvement" if "GAIN" in line else "a change that does nothing") + " (" + n + ")")
"""


@dataclass(frozen=True)
class Scenario:
    name: str
    rule: str           # strict | paired (with confirmation) | paired-once (without)
    kind: str           # noop | gain
    cv: float
    drift: float
    cycles: int
    seed: int


@dataclass
class Outcome:
    scenario: Scenario
    kept: int
    candidates: int
    reported_pct: float | None
    remeasured_pct: float | None
    ci_pct: tuple[float, float] | None
    ci_level: float | None
    final_note: str
    seconds: float
    exit_code: int
    runs_keep: list[int]          # verifier runs spent on each kept candidate
    runs_other: list[int]         # ... and on each candidate that was not kept

    @property
    def rate(self) -> float:
        return self.kept / self.candidates if self.candidates else 0.0

    @property
    def rate_ci(self) -> tuple[float, float]:
        ci = binomtest(self.kept, self.candidates).proportion_ci(0.95, method="exact")
        return ci.low, ci.high


def program_text(tmp: Path, rule: str, final_pairs: int) -> str:
    py = os.path.realpath(sys.executable)
    # "paired" is the rule with the version's own defaults (main: two batches of 8; now: the
    # sequential test without a confirmation); "paired-confirm" asks for a confirmation
    accept = {"strict": "accept:\n", "paired": "accept:\n  rule: paired\n",
              "paired-once": "accept:\n  rule: paired\n  confirm: false\n",
              "paired-confirm": "accept:\n  rule: paired\n  confirm: true\n"}[rule]
    accept += f"  final_pairs: {final_pairs}\n"
    return ("---\ngoal: Lower the score\nallowed: [work.py]\nverifier:\n"
            f"  command: {py} -S -I {tmp / 'verifier.py'}\n  metric: score\n  direction: minimize\n"
            f"{accept}sandbox:\n  writable: [{tmp / 'state'}]\n"
            f"generator:\n  command: {py} -S -I {tmp / 'generator.py'}\n---\n"
            "Lower the score.\n")


def run_scenario(s: Scenario, args: argparse.Namespace) -> Outcome:
    with tempfile.TemporaryDirectory(prefix=f"autoloop-noise-{s.name}-") as t:
        tmp = Path(t)
        (tmp / "verifier.py").write_text(VERIFIER)
        (tmp / "state").mkdir()   # the verifier's run counter: writable in the measurement sandbox
        (tmp / "generator.py").write_text(GENERATOR)
        repo = tmp / "repo"
        repo.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(HOME=str(tmp), XDG_CACHE_HOME=str(tmp / "cache"), GIT_CONFIG_NOSYSTEM="1",
                   GIT_CONFIG_GLOBAL=str(tmp / "gitconfig"), NOISE_STATE=str(tmp / "state" / "runs"),
                   NOISE_SEED=str(s.seed), NOISE_CV=str(s.cv), NOISE_DRIFT=str(s.drift),
                   NOISE_PERIOD=str(args.period), NOISE_GAIN=str(args.gain), NOISE_KIND=s.kind,
                   NOISE_BURST_RATE=str(args.burst_rate), NOISE_BURST=str(args.burst), NOISE_DIST=args.dist)
        (tmp / "gitconfig").write_text("[user]\n\tname = bench\n\temail = bench@example.com\n")

        def git(*a: str) -> None:
            subprocess.run(["git", *a], cwd=repo, env=env, check=True, capture_output=True)

        git("init", "-q")
        (repo / "work.py").write_text("# the code being improved\n")
        (repo / "program.md").write_text(program_text(tmp, s.rule, args.final_pairs))
        git("add", "-A")
        git("commit", "-q", "-m", "start")
        t0 = time.monotonic()
        res = subprocess.run([sys.executable, "-m", "autoloop", "run", "--tag", "bench",
                              "--cycles", str(s.cycles)], cwd=repo, env=env, capture_output=True,
                             text=True)
        seconds = time.monotonic() - t0
        if res.returncode != 0:
            sys.stderr.write(f"{s.name}: exit {res.returncode}\n{res.stderr[-2000:]}\n")
        records = [json.loads(line) for line in
                   (repo / ".autoloop" / "bench" / "ledger.jsonl").read_text().splitlines()]
    cycles = [r for r in records if r["t"] == "cycle"]
    done = [c for c in cycles if c["cycle"] > 0]
    kept = sum(1 for c in done if c["status"] == "keep")
    base = next((c["metric"] for c in cycles if c["status"] == "baseline"), None)
    best = next((c["metric"] for c in reversed(cycles) if c["status"] in ("keep", "baseline")), None)
    reported = None if base is None or best is None else (best - base) / abs(base) * 100
    final = next((r for r in reversed(records) if r["t"] == "final"), {})
    ci = final.get("change_ci_pct")
    runs_keep = [verifier_runs(c) for c in done if c["status"] == "keep"]
    runs_other = [verifier_runs(c) for c in done if c["status"] != "keep"]
    return Outcome(s, kept, len(done), reported, final.get("change_pct"),
                   tuple(ci) if ci else None, final.get("ci_level"),
                   final.get("skipped") or "", seconds, res.returncode, runs_keep, runs_other)


def verifier_runs(cycle: dict) -> int:
    """Verifier runs a candidate decision took, counted from the raw values in its ledger
    record (so the same count works for every version of the rule): both sides of every pair
    of every batch, plus warm-up runs; one per repeat for strict (1 when there is no record)."""
    st = cycle.get("stats") or {}
    warm = st.get("warmup") or []
    n_warm = len(warm.get("a", [])) + len(warm.get("b", [])) if isinstance(warm, dict) else len(warm)
    if st.get("batches") is not None:
        return n_warm + sum(len(b.get("a") or []) + len(b.get("b") or []) for b in st["batches"])
    if st.get("samples") is not None:
        return n_warm + len(st["samples"])
    return 1


def fmt_pct(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:+.{digits}f}%"


RULES = {"strict": "strict", "paired": "paired (defaults)", "paired-once": "paired, no confirm",
         "paired-confirm": "paired + confirm"}


def _kind(s: Scenario, args: argparse.Namespace) -> str:
    return "no-op changes" if s.kind == "noop" else f"real {args.gain * 100:g}% gains"


def table(outcomes: list[Outcome], args: argparse.Namespace) -> str:
    head = ("| scenario | rule | CV | drift | seed | candidates | kept | keep rate [95% CI] "
            "| reported gain | re-measured gain [95% CI] | time |")
    rows = [head, "|" + "---|" * 11]
    for o in outcomes:
        s = o.scenario
        lo, hi = o.rate_ci
        if o.ci_pct is not None:
            remeasured = f"{fmt_pct(o.remeasured_pct)} [{fmt_pct(o.ci_pct[0])}, {fmt_pct(o.ci_pct[1])}]"
        elif o.final_note:
            remeasured = f"{fmt_pct(o.remeasured_pct)} (nothing kept)"
        else:
            remeasured = "-"
        rows.append(f"| {_kind(s, args)} | {RULES[s.rule]} | {s.cv * 100:g}% | ±{s.drift * 100:g}% "
                    f"| {s.seed} | {o.candidates} "
                    f"| {o.kept} | {o.rate * 100:.1f}% [{lo * 100:.1f}, {hi * 100:.1f}] "
                    f"| {fmt_pct(o.reported_pct)} | {remeasured} | {o.seconds:.0f}s |")
    return "\n".join(rows)


def _runs_text(xs: list[int]) -> str:
    return f"{statistics.mean(xs):.1f} / {statistics.median(xs):g}" if xs else "-"


def runs_table(outcomes: list[Outcome], args: argparse.Namespace) -> str:
    """Verifier runs per candidate decision, all runs of a scenario together: mean / median."""
    rows = ["| scenario | rule | decisions | runs per decision (mean / median) | per keep | per other "
            "| runs in all |", "|" + "---|" * 7]
    groups: dict[tuple[str, str], list[Outcome]] = {}
    for o in outcomes:
        groups.setdefault((o.scenario.kind, o.scenario.rule), []).append(o)
    for (kind, rule), group in groups.items():
        keep = [x for o in group for x in o.runs_keep]
        other = [x for o in group for x in o.runs_other]
        rows.append(f"| {_kind(group[0].scenario, args)} | {RULES[rule]} | {len(keep) + len(other)} "
                    f"| {_runs_text(keep + other)} | {_runs_text(keep)} | {_runs_text(other)} "
                    f"| {sum(keep) + sum(other)} |")
    return "\n".join(rows)


def pooled(outcomes: list[Outcome]) -> tuple[int, int, float, float]:
    kept = sum(o.kept for o in outcomes)
    n = sum(o.candidates for o in outcomes)
    ci = binomtest(kept, n).proportion_ci(0.95, method="exact") if n else None
    return kept, n, ci.low if ci else 0.0, ci.high if ci else 1.0


def summary(outcomes: list[Outcome], args: argparse.Namespace) -> str:
    """All runs of a scenario together: the keep rate over every candidate."""
    rows = ["| scenario | rule | runs | candidates | kept | keep rate [95% CI] | re-measured gain: CI contains 0 |",
            "|" + "---|" * 7]
    groups: dict[tuple[str, str], list[Outcome]] = {}
    for o in outcomes:
        groups.setdefault((o.scenario.kind, o.scenario.rule), []).append(o)
    for (kind, rule), group in groups.items():
        kept, n, lo, hi = pooled(group)
        zeros = sum(1 for o in group if _contains_zero(o))
        rows.append(f"| {_kind(group[0].scenario, args)} | {RULES[rule]} | {len(group)} | {n} | {kept} "
                    f"| {kept / n * 100:.1f}% [{lo * 100:.1f}, {hi * 100:.1f}] | {zeros} of {len(group)} |")
    return "\n".join(rows)


def _contains_zero(o: Outcome) -> bool:
    if o.ci_pct is None:
        return o.remeasured_pct == 0.0
    return o.ci_pct[0] <= 0.0 <= o.ci_pct[1]


def verdicts(outcomes: list[Outcome]) -> list[str]:
    def group(rule: str, kind: str) -> list[Outcome]:
        return [o for o in outcomes if (o.scenario.rule, o.scenario.kind) == (rule, kind)]

    out = []
    g = group("paired", "noop")
    if g:
        kept, n, _, _ = pooled(g)
        _, _, _, hi = pooled(g)
        out.append(f"false keeps, paired, no-op changes at CV {g[0].scenario.cv * 100:g}% "
                   f"with drift: {kept} of {n} = {kept / n * 100:.2f}%, upper 95% bound "
                   f"{hi * 100:.2f}% (target <= 1%): {'PASS' if kept / n <= 0.01 else 'FAIL'}"
                   f"{'' if hi <= 0.01 else ' on the rate; the bound needs more candidates'}")
        other = [x for o in g for x in o.runs_other]
        if other:
            med = statistics.median(other)
            out.append(f"median verifier runs per no-op decision, paired: {med:g} (target <= 8): "
                       f"{'PASS' if med <= 8 else 'FAIL'}")
        zero = all(_contains_zero(o) for o in g)
        out.append(f"phantom gain after {g[0].candidates} no-op candidates, paired: "
                   + "; ".join(fmt_pct(o.remeasured_pct) + (f" [{fmt_pct(o.ci_pct[0])}, {fmt_pct(o.ci_pct[1])}]"
                                                            if o.ci_pct else " (nothing kept)") for o in g)
                   + f" (target: CI contains 0): {'PASS' if zero else 'FAIL'}")
    g = group("strict", "noop")
    if g:
        out.append("strict on the same no-op changes, reported → re-measured: "
                   + "; ".join(f"{fmt_pct(o.reported_pct)} → {fmt_pct(o.remeasured_pct)}"
                               + (f" [{fmt_pct(o.ci_pct[0])}, {fmt_pct(o.ci_pct[1])}]" if o.ci_pct else "")
                               for o in g))
    g = group("paired", "gain")
    if g:
        kept, n, _, _ = pooled(g)
        out.append(f"power, paired, real gains at CV {g[0].scenario.cv * 100:g}%: "
                   f"{kept} of {n} = {kept / n * 100:.1f}% (target >= 90%): "
                   f"{'PASS' if kept / n >= 0.90 else 'FAIL'}")
        keep = [x for o in g for x in o.runs_keep]
        if keep:
            med = statistics.median(keep)
            out.append(f"median verifier runs per keep, paired: {med:g} (target <= 12): "
                       f"{'PASS' if med <= 12 else 'FAIL'}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--noop-cycles", type=int, default=100, help="no-op candidates per run (100)")
    ap.add_argument("--gain-cycles", type=int, default=40, help="real-gain candidates per run (40)")
    ap.add_argument("--noop-cv", type=float, default=0.03, help="noise of the no-op runs (0.03)")
    ap.add_argument("--gain-cv", type=float, default=0.01, help="noise of the real-gain runs (0.01)")
    ap.add_argument("--drift", type=float, default=0.02, help="amplitude of the slow drift (0.02)")
    ap.add_argument("--period", type=float, default=300, help="drift period in verifier runs (300)")
    ap.add_argument("--gain", type=float, default=0.02, help="size of a real gain (0.02)")
    ap.add_argument("--final-pairs", type=int, default=20, help="end-of-run pairs (20)")
    ap.add_argument("--burst-rate", type=float, default=0.0, help="share of runs that are bursts (0)")
    ap.add_argument("--burst", type=float, default=0.4, help="a burst's size, times U(0.5, 1.5) (0.4)")
    ap.add_argument("--dist", default="gauss", choices=["gauss", "t3"], help="the noise's shape (gauss)")
    ap.add_argument("--rules", default="strict,paired",
                    help="rules to compare: strict, paired (its defaults), paired-once, paired-confirm")
    ap.add_argument("--runs", type=int, default=3, help="independent runs per scenario (3)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the first run (then +1, +2, ...)")
    ap.add_argument("--jobs", type=int, default=2, help="scenarios run at once (2)")
    args = ap.parse_args(argv)
    rules = [r for r in args.rules.split(",") if r]
    scenarios = [Scenario(f"{kind}-{rule}-{seed}", rule, kind, cv, args.drift, n, seed)
                 for kind, cv, n in (("noop", args.noop_cv, args.noop_cycles),
                                     ("gain", args.gain_cv, args.gain_cycles))
                 for rule in rules
                 for seed in range(args.seed, args.seed + args.runs)]
    # the longest first, so two workers finish together
    order = sorted(scenarios, key=lambda s: -(s.cycles * (1 if s.rule == "strict" else 8)
                                              * (3 if s.kind == "gain" else 1)))
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        done = dict(zip(order, pool.map(lambda s: run_scenario(s, args), order)))
    outcomes = [done[s] for s in scenarios]
    bursts = (f", bursts in {args.burst_rate * 100:g}% of runs of ~+{args.burst * 100:g}%"
              if args.burst_rate else "") + (", Student t3 noise" if args.dist == "t3" else "")
    print(f"autoloop noise benchmark: {args.runs} runs per scenario (seeds {args.seed}.."
          f"{args.seed + args.runs - 1}), drift period {args.period:g} verifier runs, end-of-run "
          f"check {args.final_pairs} pairs{bursts}; {time.monotonic() - t0:.0f}s in all\n")
    print(table(outcomes, args))
    print()
    print(summary(outcomes, args))
    print()
    print(runs_table(outcomes, args))
    print()
    for line in verdicts(outcomes):
        print(line)
    return 0 if all(o.exit_code == 0 for o in outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
