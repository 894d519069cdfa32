"""The honest ratchet through the real CLI (`python -m autoloop run`), on a simulated noisy
verifier (tests/scripts/sim_verifier.py) and a scripted generator: what strict keeps and paired
does not, confirmation, the calibration warning, the end-of-run record, the holdout, guard
metrics, and every reported number recomputed from the ledger's raw samples."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

from autoloop.base.numbers import formatter, pct_interval, plain_pct, signed_pct

from tests.conftest import git, run_cli

SCRIPTS = Path(__file__).resolve().parent / "scripts"
PY = f"{sys.executable} -S"


def make_program(repo: Path, accept: str = "", extra: str = "") -> None:
    (repo / "program.md").write_text(
        "---\n"
        "goal: Lower the score\n"
        "allowed: [work.py]\n"
        "verifier:\n"
        f"  command: {PY} {SCRIPTS / 'sim_verifier.py'}\n"
        "  metric: score\n"
        "  direction: minimize\n"
        f"{accept}{extra}"
        "generator:\n"
        f"  command: {PY} {SCRIPTS / 'sim_generator.py'}\n"
        "---\nLower the score.\n")


@pytest.fixture
def sim(make_repo, tmp_path: Path):
    """sim(accept=..., extra=..., cv=..., edit=..., seed=...) -> (repo, env)."""

    def _make(accept: str = "", extra: str = "", *, cv: float = 0.0, edit: str | None = None,
              seed: int = 1) -> tuple[Path, dict[str, str]]:
        repo = make_repo({"work.py": "# the code being improved\n"}, commit=False)
        # the simulated verifier counts its runs in a file outside the tree: a folder the
        # measurement sandbox (on by default) must leave writable
        state = tmp_path / "sim"
        state.mkdir(exist_ok=True)
        if "sandbox" not in extra:
            extra += f"sandbox:\n  writable: [{state}]\n"
        make_program(repo, accept, extra)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "start")
        env = {"SIM_STATE": str(state / "runs"), "SIM_CV": str(cv), "SIM_SEED": str(seed)}
        if edit is not None:
            env["SIM_EDIT"] = edit
        return repo, env

    return _make


def run(repo: Path, env: dict[str, str], cycles: int, tag: str = "t") -> subprocess.CompletedProcess[str]:
    return run_cli("run", "--tag", tag, "--cycles", str(cycles), cwd=repo, env=env, timeout=600)


def ledger(repo: Path, tag: str = "t") -> list[dict]:
    path = repo / ".autoloop" / tag / "ledger.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def cycles(repo: Path, tag: str = "t") -> list[dict]:
    return [r for r in ledger(repo, tag) if r["t"] == "cycle"]


def tsv(repo: Path) -> list[dict[str, str]]:
    with open(repo / "results.tsv", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def statuses(repo: Path) -> list[str]:
    return [c["status"] for c in cycles(repo) if c["cycle"] > 0]


PAIRED = "accept:\n  rule: paired\n  pairs: 6\n  final_pairs: 6\n"


# ---- what each rule keeps on a noisy verifier ------------------------------------------------


def test_strict_keeps_no_op_changes_on_a_noisy_verifier(sim) -> None:
    repo, env = sim(cv=0.03, extra="", accept="accept:\n  final_pairs: 6\n")
    res = run(repo, env, 8)
    assert res.returncode == 0, res.stderr
    assert "keep" in statuses(repo)


def test_paired_keeps_no_no_op_change_on_the_same_verifier(sim) -> None:
    repo, env = sim(PAIRED, cv=0.03)
    res = run(repo, env, 8)
    assert res.returncode == 0, res.stderr
    assert "keep" not in statuses(repo)
    assert set(statuses(repo)) == {"discard"}
    assert git(repo, "rev-list", "--count", "autoloop/t") == "1"      # no commit on the branch


def test_paired_keeps_a_real_gain_and_commits_it(sim) -> None:
    repo, env = sim(PAIRED, cv=0.005, edit="# GAIN {n}")
    res = run(repo, env, 2)
    assert res.returncode == 0, res.stderr
    assert statuses(repo) == ["keep", "keep"]
    message = git(repo, "log", "-1", "--format=%B", "autoloop/t")
    assert "Measured: score" in message and re.search(r"LR=[0-9.e+]+", message)
    # the change it states is the verdict's (the estimate over the pairs), not stored best → median
    c = cycles(repo)[2]
    pooled, fmt = c["stats"]["pooled"], formatter([])
    ci = pct_interval(pooled["change_ci_pct"], pooled["ci_level"])
    # and its noise, as its lesson states it (autoloop.decide.wording)
    noise = f"noise ±{plain_pct(c['stats']['step_pct'])} over {pooled['n']} pairs"
    assert message.splitlines()[2] == (
        f"score {signed_pct(pooled['change_pct'])} ({ci}), {noise}; estimated against the "
        f"incumbent measured beside it (medians {fmt(pooled['median_a'])} → {fmt(c['metric'])})")
    assert f"score {signed_pct(pooled['change_pct'])} ({ci}), {noise}" in c["result"]
    assert noise in c["lesson"] and "Verdict: kept by the ratchet" in message


def test_paired_confirmation_test_is_recorded(sim) -> None:
    repo, env = sim(PAIRED + "  confirm: true\n", cv=0.005, edit="# GAIN {n}")
    run(repo, env, 1)
    batches = cycles(repo)[1]["stats"]["batches"]
    assert [b["name"] for b in batches] == ["batch", "confirm"]
    assert all(len(b["a"]) == len(b["b"]) <= 6 and b["decision"] == "keep" for b in batches)
    row = tsv(repo)[1]
    sizes = "+".join(str(len(b["a"])) for b in batches)
    assert row["rule"] == "paired" and row["pairs"] == sizes and row["p_confirm"]


def test_paired_without_confirm_runs_one_batch(sim) -> None:
    repo, env = sim(PAIRED + "  confirm: false\n", cv=0.005, edit="# GAIN {n}")
    run(repo, env, 1)
    assert len(cycles(repo)[1]["stats"]["batches"]) == 1
    assert tsv(repo)[1]["p_confirm"] == ""


def test_generator_sees_coarse_feedback_not_samples(sim) -> None:
    repo, env = sim(PAIRED, cv=0.02)
    run(repo, env, 2)
    c1 = cycles(repo)[1]
    prompt = (repo / ".autoloop" / "t" / "logs" / "cycle-0002" / "prompt.md").read_text()
    assert c1["feedback"] in prompt
    for x in c1["stats"]["batches"][0]["a"] + c1["stats"]["batches"][0]["b"]:
        assert f"{x:.6g}" not in prompt and repr(x) not in prompt


# ---- calibration ---------------------------------------------------------------------------------


def test_calibration_warns_loudly_about_noise_under_strict(sim) -> None:
    repo, env = sim(cv=0.03, accept="accept:\n  final_pairs: 0\n")
    res = run(repo, env, 1)
    assert "autoloop: WARNING: the verifier is noisy" in res.stderr
    assert "**Warning:** the verifier is noisy" in (repo / "experiments.md").read_text()
    assert cycles(repo)[0]["stats"]["warning"]


def test_calibration_of_a_deterministic_verifier_is_quiet(sim) -> None:
    repo, env = sim(cv=0.0)
    res = run(repo, env, 1)
    assert "WARNING" not in res.stderr
    base = cycles(repo)[0]
    assert base["stats"]["deterministic"] and base["stats"]["runs"] == [base["metric"]] * 2


def test_calibration_warns_when_pairs_cannot_detect_min_effect(sim) -> None:
    repo, env = sim(PAIRED, cv=0.03)
    res = run(repo, env, 0)
    stats = cycles(repo)[0]["stats"]
    prop = stats["proposal"]
    assert "WARNING" in res.stderr and f"your verifier's noise is {prop['noise_pct']:.2g}% per run" in res.stderr
    assert re.search(r"kept \d+% of the time with accept.min_effect: [0-9.]+% \(", res.stderr)
    assert re.search(r"≈ \d+ verifier runs a keep, ≈ [0-9.]+ (s|min|h) at [0-9.]+ s a run", res.stderr)
    assert len(stats["a"]) == 6 and stats["detectable"] > stats["min_gain"]


def test_contract_rule_with_keys_off_keeps_the_first_baseline_value(sim) -> None:
    repo, env = sim(cv=0.03, accept="accept:\n  final_pairs: 0\n")
    run(repo, env, 0)
    base = cycles(repo)[0]
    assert base["metric"] == base["stats"]["runs"][0]


# ---- the end of a run ---------------------------------------------------------------------------


def test_end_of_run_record_log_and_final_line(sim) -> None:
    repo, env = sim(PAIRED, cv=0.005, edit="# GAIN {n}")
    res = run(repo, env, 1)
    finals = [r for r in ledger(repo) if r["t"] == "final"]
    assert len(finals) == 1 and finals[0]["pairs"] == 6
    last = res.stdout.strip().splitlines()[-1]
    # one gain on the last line, the re-measured one with its interval
    assert last.startswith("stopped:") and "re-measured" in last and "CI" in last
    assert signed_pct(finals[0]["change_pct"]) in last
    assert "re-measured best vs start: score" in res.stdout
    log = run_cli("log", "--tag", "t", cwd=repo)
    assert finals[0]["text"] in log.stdout
    assert "**End-of-run check** (after cycle 1)" in (repo / "experiments.md").read_text()
    # the cycle's % is the paired test's estimate, not the change between the two medians shown
    # beside it: progress and log label it so
    pooled = cycles(repo)[1]["stats"]["pooled"]
    est = signed_pct(pooled["change_pct"])
    row = next(ln for ln in res.stdout.splitlines() if ln.startswith("cycle    1  keep"))
    assert re.search(rf"vs +{re.escape(formatter([])(pooled['median_a']))} +est\. {re.escape(est)} ", row), row
    lines = log.stdout.splitlines()
    head = next(ln for ln in lines if ln.startswith("cycle  status"))
    assert "vs (in cycle) est. change  hypothesis" in head, head
    assert re.search(rf"^    1  keep .* {re.escape(est)}  ", next(ln for ln in lines if ln.startswith("    1  keep")))


def test_end_of_run_with_a_deterministic_verifier_takes_one_run(sim) -> None:
    repo, env = sim(cv=0.0, edit="# GAIN {n}")
    res = run(repo, env, 2)
    final = [r for r in ledger(repo) if r["t"] == "final"][0]
    base = cycles(repo)[0]
    # the start is not measured again (cycle 0 did, twice); the best once, in a fresh tree
    assert final["deterministic"] and final["verifier_runs"] == 1 and final["order"] == "fB1"
    assert final["reused"] and final["a"] == [base["metric"]] and final["b"] == [cycles(repo)[-1]["metric"]]
    assert final["change_pct"] == pytest.approx((0.95 ** 2 - 1) * 100)
    # its cost is printed with its result
    assert re.search(r"\[1 verifier run, \d+\.\d s\]", final["text"]) and final["text"] in res.stdout


def test_a_strict_run_on_a_deterministic_verifier_never_imports_numpy_or_scipy(sim) -> None:
    repo, env = sim(cv=0.0, edit="# GAIN {n}")
    code = ("import sys; from autoloop.cli import main; rc = main(['run', '--tag', 't', '--cycles', '1']); "
            "print('LOADED', sorted(m for m in ('numpy', 'scipy') if m in sys.modules)); sys.exit(rc)")
    res = subprocess.run([sys.executable, "-c", code], cwd=repo, env={**os.environ, **env},
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "LOADED []" in res.stdout
    assert [r for r in ledger(repo) if r["t"] == "final"][0]["reused"]


def test_a_deterministic_claim_that_breaks_runs_the_full_check(sim, tmp_path: Path) -> None:
    # cycle 0 sees identical values; by the end of the run the verifier has turned noisy
    repo, env = sim(cv=0.0, edit="# GAIN {n}")
    run(repo, env, 1)
    env["SIM_CV"] = "0.01"
    run(repo, env, 1)
    final = [r for r in ledger(repo) if r["t"] == "final"][-1]
    assert "determinism_broken" in final and final["pairs"] >= 2 and not final.get("reused")
    assert final["verifier_runs"] == 1 + 2 * final["pairs"] and final["determinism_broken"]["b"] is not None


def test_end_of_run_skips_measuring_when_nothing_was_kept(sim) -> None:
    repo, env = sim(PAIRED, cv=0.03)
    res = run(repo, env, 1)
    final = [r for r in ledger(repo) if r["t"] == "final"][0]
    assert "nothing was kept" in final["skipped"] and final["change_pct"] == 0.0
    assert "not re-measured: nothing was kept" in res.stdout
    assert "end-of-run check" not in res.stdout, res.stdout    # nothing measured, nothing announced


def test_no_end_of_run_check_on_interrupt(sim) -> None:
    repo, env = sim(PAIRED, cv=0.03)
    proc = subprocess.Popen([sys.executable, "-m", "autoloop", "run", "--tag", "t", "--cycles", "50"],
                            cwd=repo, env={**os.environ, **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("cycle    1"):
            proc.send_signal(signal.SIGINT)
            break
    proc.communicate(timeout=120)
    assert proc.returncode == 130
    kinds = [r["t"] for r in ledger(repo)]
    assert "final" not in kinds and kinds[-1] == "end"


# ---- holdout and guard metrics ---------------------------------------------------------------------


HOLDOUT = (f"holdout:\n  command: {PY} {SCRIPTS / 'sim_verifier.py'} --holdout\n"
           "  metric: heldout\n")


def test_holdout_reports_overfitting(sim) -> None:
    repo, env = sim(PAIRED, HOLDOUT, cv=0.005, edit="# GAIN {n}")       # main improves, holdout not
    res = run(repo, env, 1)
    c1 = cycles(repo)[1]
    assert c1["status"] == "keep" and c1["stats"]["holdout"]["overfit"]
    assert "possible overfitting" in c1["result"] and "holdout" not in c1["lesson"]
    assert tsv(repo)[1]["holdout"] == "overfit"
    assert "possible overfitting" in res.stdout
    final = [r for r in ledger(repo) if r["t"] == "final"][0]
    assert final["overfit"] and "possible overfitting" in final["text"]


def test_holdout_that_improves_is_not_overfitting(sim) -> None:
    repo, env = sim(PAIRED, HOLDOUT, cv=0.005, edit="# GAIN HOLD {n}")
    run(repo, env, 1)
    hold = cycles(repo)[1]["stats"]["holdout"]
    assert hold["improved"] and not hold["overfit"]
    assert tsv(repo)[1]["holdout"] == "improved"


def test_holdout_is_never_in_the_prompt(sim) -> None:
    repo, env = sim(PAIRED, HOLDOUT, cv=0.005, edit="# GAIN {n}")
    run(repo, env, 2)
    prompt = (repo / ".autoloop" / "t" / "logs" / "cycle-0002" / "prompt.md").read_text()
    assert "holdout" not in prompt.lower() and "heldout" not in prompt and "overfit" not in prompt


def test_guard_metric_over_its_limit_is_a_guard_fail(sim) -> None:
    limits = "limits:\n  - {metric: mem, max_increase: 10%}\n"
    repo, env = sim(PAIRED, limits, cv=0.005, edit="# GAIN MEM {n}")   # faster but 50% more memory
    run(repo, env, 1)
    c1 = cycles(repo)[1]
    assert c1["status"] == "guard_fail" and "limit mem: 150 is more than 10% above the baseline 100" in c1["lesson"]
    assert cycles(repo)[0]["stats"]["secondary"] == {"mem": 100.0}


def test_guard_metric_with_the_strict_rule(sim) -> None:
    limits = "limits:\n  - {metric: mem, max_increase: 10%}\n"
    repo, env = sim("", limits, cv=0.0, edit="# GAIN MEM {n}")
    run(repo, env, 1)
    assert statuses(repo) == ["guard_fail"]


def test_strict_repeats_records_every_sample(sim) -> None:
    repo, env = sim("", "", cv=0.01, edit="# GAIN {n}")
    (repo / "program.md").write_text((repo / "program.md").read_text().replace(
        "  direction: minimize\n", "  direction: minimize\n  repeats: 3\n"))
    git(repo, "commit", "-qam", "repeats")
    run(repo, env, 1)
    base, c1 = cycles(repo)[:2]
    assert len(base["stats"]["runs"]) == 3 and base["metric"] == float(np.median(base["stats"]["runs"]))
    assert len(c1["stats"]["samples"]) == 3 and c1["metric"] == float(np.median(c1["stats"]["samples"]))
    assert tsv(repo)[1]["samples"].startswith("samples=")


# ---- every reported number, recomputed from the ledger's raw samples ----------------------------------


def walsh(g: list[float]) -> np.ndarray:
    g = np.asarray(g)
    i, j = np.triu_indices(len(g))
    return np.sort((g[i] + g[j]) / 2)


def null_lower_tail(n: int) -> np.ndarray:
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1
    for r in range(1, n + 1):
        counts[r:] = counts[r:] + counts[:-r].copy()
    return np.cumsum(counts) / 2 ** n


def recompute(a: list[float], b: list[float]) -> tuple[float, float, float, float]:
    """Independently of autoloop: change %, CI % (exact signed-rank interval), p (minimize)."""
    gains = [np.log(x / y) for x, y in zip(a, b)]
    w = walsh(gains)
    n, m = len(gains), len(w)
    tail = null_lower_tail(n)
    ks = [k for k in range(m // 2) if tail[k] <= 0.025]
    k = ks[-1] if ks else 0
    est = float(np.median(w))
    to_pct = lambda g: (np.exp(-g) - 1) * 100  # noqa: E731
    p = scipy.stats.wilcoxon(gains, alternative="greater").pvalue
    return to_pct(est), to_pct(w[m - 1 - k]), to_pct(w[k]), p


def test_reported_numbers_reproduce_from_the_ledger(sim) -> None:
    repo, env = sim(PAIRED, cv=0.01, edit="# GAIN {n}")
    res = run(repo, env, 3)
    assert res.returncode == 0, res.stderr
    rows = tsv(repo)
    for c, row in zip(cycles(repo), rows):
        if c["cycle"] == 0:
            s = c["stats"]
            assert c["metric"] == float(np.median(s["a"] + s["b"]))
            continue
        batches = c["stats"]["batches"]
        a = [x for bt in batches for x in bt["a"]]
        b = [x for bt in batches for x in bt["b"]]
        change, lo, hi, _ = recompute(a, b)
        assert float(row["effect_pct"]) == pytest.approx(change, abs=5e-4)
        assert (float(row["ci_low_pct"]), float(row["ci_high_pct"])) == (
            pytest.approx(lo, abs=5e-4), pytest.approx(hi, abs=5e-4))
        assert float(row["p_value"]) == pytest.approx(recompute(batches[0]["a"], batches[0]["b"])[3], rel=1e-3)
        assert c["metric"] == float(np.median(b))
        fa, fb = (formatter(bt["a"]) for bt in batches), (formatter(bt["b"]) for bt in batches)
        assert row["samples"] == " | ".join(
            "a=" + ",".join(f(x) for x in bt["a"]) + ";b=" + ",".join(g(x) for x in bt["b"])
            for bt, f, g in zip(batches, fa, fb))
    # the end-of-run check: the final line's gain and interval
    final = [r for r in ledger(repo) if r["t"] == "final"][0]
    change, lo, hi, p = recompute(final["a"], final["b"])
    last = next(ln for ln in res.stdout.splitlines() if ln.startswith("final "))
    m = re.search(r"re-measured best vs start: score ([-+]\d+\.\d+)% \(\d+% CI ([-+]\d+\.\d+)% … "
                  r"([-+]\d+\.\d+)%\), p=(\S+), (\d+) pairs", last)
    assert m is not None, last
    assert float(m.group(1)) == pytest.approx(change, abs=0.006)
    assert (float(m.group(2)), float(m.group(3))) == (pytest.approx(lo, abs=0.006), pytest.approx(hi, abs=0.006))
    assert float(m.group(4)) == pytest.approx(p, rel=2e-3) and int(m.group(5)) == len(final["a"])
    # `autoloop log`: gain and keep rate from the cycle records
    log = run_cli("log", "--tag", "t", cwd=repo).stdout
    cs = cycles(repo)
    base = cs[0]["metric"]
    best = [c["metric"] for c in cs if c["status"] == "keep"][-1] if "keep" in statuses(repo) else base
    kept = statuses(repo).count("keep")
    # the headline gain is the re-measured one; the one-cycle medians' is named as such
    assert f"gain       {signed_pct(final['change_pct'])} (" in log
    medians = signed_pct((best - base) / abs(base) * 100)
    assert medians == signed_pct(final["change_pct"]) or f"baseline → best said {medians}" in log
    assert f"keep rate  {kept / 3 * 100:.0f}% ({kept} of 3)" in log
    assert final["text"] in log
    # the per-cycle table gives each interval with the coverage the ledger says it has: a
    # sequential test stops after a few pairs, whose [min, max] covers less than 95%
    judged = [c for c in cs if (c.get("stats") or {}).get("pooled")]
    assert judged
    for c in judged:
        pooled = c["stats"]["pooled"]
        want = "one pair, no CI" if pooled["n"] == 1 else \
            pct_interval(pooled["change_ci_pct"], pooled["ci_level"])
        assert re.search(rf"^ +{c['cycle']} +{c['status']} +\S+ +{re.escape(want)} ", log, re.M), (want, log)


def test_a_resume_that_keeps_nothing_reuses_the_end_of_run_check(sim) -> None:
    repo, env = sim(PAIRED, cv=0.005, edit="# GAIN {n}")
    assert run(repo, env, 1).returncode == 0
    first = [r for r in ledger(repo) if r["t"] == "final"]
    assert len(first) == 1 and first[0]["verifier_runs"] > 0 and "reused_from" not in first[0]
    runs_file = Path(env["SIM_STATE"])
    env.pop("SIM_EDIT")    # no-op edits from here on: nothing more is kept
    before = int(runs_file.read_text())
    res = run(repo, env, 1)
    assert res.returncode == 0, res.stderr
    assert statuses(repo) == ["keep", "discard"]
    finals = [r for r in ledger(repo) if r["t"] == "final"]
    assert len(finals) == 2
    again = finals[1]
    # the same best, start and verifier: the earlier numbers, said where they come from
    assert again["reused_from"]["ts"] == first[0]["ts"] and again["reused_from"]["after_cycle"] == 1
    assert again["verifier_runs"] == 0 and again["after_cycle"] == 2
    assert (again["a"], again["b"], again["change_pct"]) == (first[0]["a"], first[0]["b"], first[0]["change_pct"])
    assert again["text"].startswith("end-of-run check: reused from ") and again["text"] in res.stdout
    assert again["text"].endswith("6 pairs") and "verifier run" not in again["text"], again["text"]
    assert "end-of-run check: re-measuring" not in res.stdout, res.stdout   # no re-measurement started
    # the verifier ran only for cycle 2's batch, not once for the end
    batches = cycles(repo)[2]["stats"]["batches"]
    assert int(runs_file.read_text()) - before == sum(len(b["a"]) + len(b["b"]) for b in batches)
    assert "re-measured" in next(ln for ln in res.stdout.splitlines() if ln.startswith("stopped: "))
    log = run_cli("log", "--tag", "t", cwd=repo, env=env, timeout=120)
    assert again["text"] in log.stdout


def test_an_end_of_run_check_is_reused_only_for_the_same_best_start_and_check() -> None:
    from autoloop.engine.ending import reusable_final

    check = {"verifier": {"command": "v"}, "final_pairs": 6, "holdout": None}
    rec = {"t": "final", "ts": 1.0, "after_cycle": 3, "start": "s", "best": "b", "check": check,
           "a": [1.0], "b": [0.9], "change_pct": -10.0}
    assert reusable_final([rec], "s", "b", check) is rec
    assert reusable_final([rec], "s", "c", check) is None                       # another best
    assert reusable_final([rec], "x", "b", check) is None                       # another start
    assert reusable_final([rec], "s", "b", {**check, "final_pairs": 20}) is None
    assert reusable_final([{**rec, "check": None}], "s", "b", check) is None    # an older ledger's
    assert reusable_final([{**rec, "skipped": "budget"}], "s", "b", check) is None
    assert reusable_final([{**rec, "error": "B1: exit 1"}], "s", "b", check) is None


def test_paired_keeps_real_gains_through_bursts(sim) -> None:
    """Issue 24's run: 1% noise and bursts of +40% in 15% of the runs; cycle 1 a real 5% gain
    whose first candidate run is a burst, cycles 2-5 no-ops, cycle 6 a real gain on top. The
    Gaussian rule kept neither gain (cycle 1 was decided on that one pair); both are kept, no
    no-op is, and the calibration states the bursts apart from the noise."""
    repo, env = sim("accept:\n  rule: paired\n  final_pairs: 0\n", cv=0.01, seed=3)
    # the calibration is 6 pairs (runs 0-11) and the reads probe run 12: run 13 is cycle 1's first
    # candidate run; run 4 a burst in the calibration too (its 12 runs hold none at this seed)
    env.update(SIM_BURST_RATE="0.15", SIM_BURSTS="4,13", SIM_GAIN_CYCLES="1,6")
    res = run(repo, env, 6)
    assert res.returncode == 0, res.stderr
    cs = cycles(repo)
    assert [c["status"] for c in cs[1:]] == ["keep", "discard", "discard", "discard", "discard", "keep"], \
        [c.get("result") for c in cs[1:]]
    assert cs[1]["stats"]["batches"][0]["b"][0] > 130       # the burst it was kept through
    s = cs[0]["stats"]
    assert s["noise_pct"] < 2 and s["burst_rate"] > 0.05 and 30 < s["burst_pct"] < 50
