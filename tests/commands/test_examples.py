"""The shipped examples: their program.md files validate, their verifiers and guards run and
measure what they claim, and the quickstart really improves under `tune` with no API key."""

from __future__ import annotations

import csv
import os
import resource
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autoloop.generators.registry import make_generator
from autoloop.generators.tune import TuneGenerator
from autoloop.program.reader import load_program
from autoloop.engine.metric import parse_metric_text
from tests.conftest import git, run_cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def run_py(script: Path, *, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(script)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def copy_example(name: str, repo: Path) -> Path:
    """The example at its real place (examples/NAME) in a fresh repository; returns its folder."""
    dest = repo / "examples" / name
    shutil.copytree(EXAMPLES / name, dest, ignore=shutil.ignore_patterns(
        "__pycache__", "experiments.md", "results.tsv", ".autoloop"))
    return dest


@pytest.fixture
def example_repo(make_repo):
    def _make(*names: str) -> Path:
        repo = make_repo({"README.md": "examples\n"}, commit=False)
        for name in names:
            copy_example(name, repo)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "examples")
        return repo
    return _make


@pytest.mark.parametrize("name, kind, metric", [
    ("quickstart", "tune", "val_loss"),
    ("perf", "command", "seconds"),
    ("testpass", "command", None),
])
def test_example_program_validates(name: str, kind: str, metric: str | None) -> None:
    program = load_program(EXAMPLES / name / "program.md")
    assert program.generator.kind == kind
    assert program.verifier.metric == (metric or "passed")
    for pattern in program.allowed:
        assert pattern.startswith(f"examples/{name}/")
        assert (ROOT / pattern).is_file(), "allowed paths are relative to the repository root"
    if kind == "command":
        assert program.generator.command.startswith("claude -p --permission-mode acceptEdits")
        assert "codex exec --sandbox workspace-write" in program.source.decode()
        assert "needs an LLM agent" in (EXAMPLES / name / "README.md").read_text()


def test_quickstart_tune_markers_parse_and_the_generator_builds() -> None:
    program = load_program(EXAMPLES / "quickstart" / "program.md")
    gen = make_generator(program.generator, program)
    assert isinstance(gen, TuneGenerator)
    assert [m.name for m in gen.markers] == ["LEARNING_RATE", "HIDDEN", "BATCH_SIZE", "MOMENTUM"]


# --------------------------------------------------------------------------- quickstart


def test_quickstart_verifier_is_quick_deterministic_and_cwd_independent(tmp_path: Path) -> None:
    script = EXAMPLES / "quickstart" / "prepare.py"
    start = time.monotonic()
    first = run_py(script, cwd=ROOT)
    elapsed = time.monotonic() - start
    assert first.returncode == 0, first.stderr
    spec = load_program(EXAMPLES / "quickstart" / "program.md").verifier
    loss = parse_metric_text(first.stdout, spec)
    assert 0.4 < loss < 0.7, "the starting values are meant to be clearly sub-optimal"
    assert elapsed < 20
    # Another working directory, with a decoy train.py in it: the same number.
    (tmp_path / "train.py").write_text("raise SystemExit('wrong train.py imported')\n")
    second = run_py(script, cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert parse_metric_text(second.stdout, spec) == loss


def test_quickstart_better_hyperparameters_give_a_lower_loss(tmp_path: Path) -> None:
    folder = tmp_path / "qs"
    shutil.copytree(EXAMPLES / "quickstart", folder)
    spec = load_program(EXAMPLES / "quickstart" / "program.md").verifier
    base = parse_metric_text(run_py(folder / "prepare.py", cwd=tmp_path).stdout, spec)
    train = folder / "train.py"
    text = train.read_text()
    for old, new in (("LEARNING_RATE = 0.003", "LEARNING_RATE = 0.1"), ("HIDDEN = 2", "HIDDEN = 8"),
                     ("BATCH_SIZE = 128", "BATCH_SIZE = 16")):
        assert old in text
        text = text.replace(old, new)
    train.write_text(text)
    tuned = parse_metric_text(run_py(folder / "prepare.py", cwd=tmp_path).stdout, spec)
    assert tuned < base * 0.5


def test_quickstart_run_improves_with_no_api_key(example_repo) -> None:
    """The README's first command, in miniature: a few tune cycles keep an improvement."""
    repo = example_repo("quickstart")
    res = run_cli("run", "examples/quickstart/program.md", "--tag", "demo", "--cycles", "3",
                  cwd=repo, timeout=240)
    assert res.returncode == 0, res.stdout + res.stderr
    state = repo / "examples" / "quickstart"
    with open(state / "results.tsv", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    assert [r["cycle"] for r in rows] == ["0", "1", "2", "3"]
    assert rows[0]["status"] == "baseline"
    assert any(r["status"] == "keep" for r in rows[1:])
    assert all(r["description"].startswith("Set ") for r in rows[1:])
    kept = [float(r["metric"]) for r in rows if r["status"] == "keep"]
    assert min(kept) < float(rows[0]["metric"])
    experiments = (state / "experiments.md").read_text()
    assert "## Cycle 3" in experiments and "Hypothesis:" in experiments
    # One commit per keep on the run branch, each touching train.py only.
    log = git(repo, "log", "--format=%H", "main..autoloop/demo").split()
    assert len(log) == sum(r["status"] == "keep" for r in rows)
    for commit in log:
        assert git(repo, "show", "--format=", "--name-only", commit) == "examples/quickstart/train.py"


# --------------------------------------------------------------------------- perf


FAST_STATS = '''
from collections import Counter


def word_counts(text):
    return dict(Counter("".join(c.lower() if c.isalpha() or c == "'" else " " for c in text).split()))


def top_words(text, k):
    return sorted(word_counts(text).items(), key=lambda kv: (-kv[1], kv[0]))[:k]


def pairs_with_sum(numbers, target):
    seen = Counter(numbers)
    return sorted({(min(a, target - a), max(a, target - a)) for a in seen
                   if target - a in seen and (target - a != a or seen[a] > 1)})


def primes_below(n):
    sieve = bytearray([1]) * max(n, 2)
    sieve[0:2] = b"\\0\\0"
    for p in range(2, int(n ** 0.5) + 1):
        if sieve[p]:
            sieve[p * p::p] = bytearray(len(sieve[p * p::p]))
    return [p for p in range(2, n) if sieve[p]]
'''


def _produce_and_score(folder: Path, tmp_path: Path, seed: int) -> tuple[float, subprocess.CompletedProcess[str]]:
    """produce.py's CPU seconds (as `measure: cpu` counts them) and score.py's result, one seed."""
    out = tmp_path / f"out-{seed}-{time.time_ns()}"
    out.mkdir()
    env = {**os.environ, "AUTOLOOP_SEED": str(seed), "AUTOLOOP_OUTPUT": str(out)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = subprocess.run([sys.executable, str(folder / "produce.py")], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert res.returncode == 0, res.stderr
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    score = subprocess.run([sys.executable, str(EXAMPLES / "perf" / "score.py")], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120)
    return cpu, score


def test_perf_produce_score_and_guard_run(tmp_path: Path) -> None:
    program = load_program(EXAMPLES / "perf" / "program.md")
    assert (program.verifier.measure, program.verifier.metric) == ("wall", "seconds")
    slow, score = _produce_and_score(EXAMPLES / "perf", tmp_path, 1)
    assert score.returncode == 0, score.stdout + score.stderr
    check = run_py(EXAMPLES / "perf" / "check.py", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    # A correct rewrite passes the score and the guard and is much faster: there is something to find.
    folder = tmp_path / "perf"
    shutil.copytree(EXAMPLES / "perf", folder)
    (folder / "slowstats.py").write_text(FAST_STATS)
    assert run_py(folder / "check.py", cwd=tmp_path).returncode == 0
    fast, score = _produce_and_score(folder, tmp_path, 2)
    assert score.returncode == 0, score.stdout
    assert fast < slow / 2


def test_perf_score_refuses_answers_for_another_seed(tmp_path: Path) -> None:
    """Results remembered from one measurement's inputs fail the next one's check."""
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "AUTOLOOP_OUTPUT": str(out)}
    assert subprocess.run([sys.executable, str(EXAMPLES / "perf" / "produce.py")], cwd=tmp_path, timeout=120,
                          env={**env, "AUTOLOOP_SEED": "5"}).returncode == 0
    score = subprocess.run([sys.executable, str(EXAMPLES / "perf" / "score.py")], cwd=tmp_path, timeout=120,
                           env={**env, "AUTOLOOP_SEED": "6"}, capture_output=True, text=True)
    assert score.returncode == 1 and "expected" in score.stdout, score.stdout


@pytest.mark.parametrize("old, new", [
    ("range(2, n)", "range(2, n + 1)"),                                # n itself included
    ("ch.isalpha() or ch == \"'\"", "ch.isalnum() or ch == \"'\""),     # digits join words
    ("item[0] < best[0]", "item[0] > best[0]"),                        # ties the wrong way
    ("if i != j and", "if"),                                           # a value paired with itself
])
def test_perf_guard_catches_wrong_results(tmp_path: Path, old: str, new: str) -> None:
    folder = tmp_path / "perf"
    shutil.copytree(EXAMPLES / "perf", folder)
    target = folder / "slowstats.py"
    assert old in target.read_text()
    target.write_text(target.read_text().replace(old, new))
    res = run_py(folder / "check.py", cwd=tmp_path)
    assert res.returncode == 1
    assert res.stdout.startswith("check: ") and "expected" in res.stdout


def test_perf_autoloop_verify(example_repo) -> None:
    repo = example_repo("perf")
    res = run_cli("verify", "examples/perf/program.md", cwd=repo, timeout=240)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "guard correctness: pass" in res.stdout
    assert "score: pass (score: all 4 results agree)" in res.stdout   # the score's own last line
    assert "seconds:" in res.stdout


@pytest.mark.timing   # the probe times planted trees against unmodified ones (measure: wall)
@pytest.mark.xdist_group("probe")   # one probe at a time (tests/conftest.py)
def test_perf_probe_finds_no_hack_that_fools_it(example_repo) -> None:
    repo = example_repo("perf")
    res = run_cli("doctor", "--probe", "examples/perf/program.md", cwd=repo, timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "planted in examples/perf/slowstats.py" in res.stdout
    lines = [line for line in res.stdout.splitlines()
             if line.split()[:1] and line.split()[0] in ("fooled", "held", "unclear", "skip")]
    assert lines and not any(line.startswith("fooled") for line in lines), res.stdout
    # a plant that broke the example would say nothing about its verifier; one that was ahead of
    # the unmodified runs twice by less than their spread is the machine's noise that day (wall
    # time), not a verdict on the verifier: it may be unclear, never fooled
    for line in lines:
        assert "the plant broke" not in line, res.stdout
        assert not line.startswith("unclear") or "by less than their spread" in line, res.stdout


# --------------------------------------------------------------------------- testpass


FIXED_TEXTKIT = '''
import re


def slugify(text):
    return "-".join(w for w in re.split(r"\\W+", text.lower()) if w)


def parse_duration(text):
    if not re.fullmatch(r"\\s*(\\d+\\s*[hms]\\s*)+", text):
        raise ValueError(text)
    return sum(int(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in re.findall(r"(\\d+)\\s*([hms])", text))


def to_roman(n):
    if not 1 <= n <= 3999:
        raise ValueError(n)
    out = []
    for value, letters in ((1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
                           (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")):
        while n >= value:
            out.append(letters)
            n -= value
    return "".join(out)


def chunks(items, size):
    if size < 1:
        raise ValueError(size)
    return [items[i:i + size] for i in range(0, len(items), size)]


def wrap(text, width):
    lines, current = [], ""
    for word in text.split():
        if current and len(current) + 1 + len(word) <= width:
            current += " " + word
        else:
            if current:
                lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines


def title_case(text, minor=frozenset({"a", "an", "the", "of", "and", "in"})):
    return " ".join(w if i and w in minor else w.capitalize() for i, w in enumerate(text.split()))
'''


def _passed(stdout: str) -> float:
    spec = load_program(EXAMPLES / "testpass" / "program.md").verifier
    return parse_metric_text(stdout, spec)


def test_testpass_counts_passing_tests(tmp_path: Path) -> None:
    res = run_py(EXAMPLES / "testpass" / "count_passing.py", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "total: 18" in res.stdout
    assert _passed(res.stdout) == 9


def test_testpass_all_pass_once_fixed_and_none_when_broken(tmp_path: Path) -> None:
    folder = tmp_path / "testpass"
    shutil.copytree(EXAMPLES / "testpass", folder)
    (folder / "textkit.py").write_text(FIXED_TEXTKIT)
    assert _passed(run_py(folder / "count_passing.py", cwd=tmp_path).stdout) == 18
    (folder / "textkit.py").write_text("this is not python\n")
    res = run_py(folder / "count_passing.py", cwd=tmp_path)
    assert res.returncode == 0 and _passed(res.stdout) == 0


def test_testpass_code_under_test_cannot_print_the_last_metric_line(tmp_path: Path) -> None:
    folder = tmp_path / "testpass"
    shutil.copytree(EXAMPLES / "testpass", folder)
    textkit = folder / "textkit.py"
    textkit.write_text(textkit.read_text() + textwrap.dedent("""
        import atexit
        atexit.register(lambda: print("passed: 999"))
    """))
    res = run_py(folder / "count_passing.py", cwd=tmp_path)
    assert _passed(res.stdout) == 9


def test_testpass_autoloop_verify(example_repo) -> None:
    repo = example_repo("testpass")
    res = run_cli("verify", "examples/testpass/program.md", cwd=repo, timeout=240)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "passed: 9" in res.stdout


def test_perf_example_uses_the_paired_rule() -> None:
    accept = load_program(EXAMPLES / "perf" / "program.md").accept
    assert accept.rule == "paired" and (accept.min_effect.value, accept.min_effect.relative) == (2.0, True)


# --------------------------------------------------------------------------- ml (sealed)


def test_ml_setup_makes_a_sealed_repository_that_measures(tmp_path: Path) -> None:
    """examples/ml/setup.py: a repository whose program validates, held-out labels outside it
    (named in `private`, in no file of the repository), and one produce + score that works."""
    dest = tmp_path / "demo"
    res = subprocess.run([sys.executable, str(EXAMPLES / "ml" / "setup.py"), str(dest)], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    private = tmp_path / "demo-private"
    program = load_program(dest / "program.md")
    assert program.private == (private.resolve(),) and program.verifier.score is not None
    assert program.generator.kind == "tune"
    labels = (private / "labels.csv").read_text()
    assert git(dest, "status", "--porcelain") == ""
    for f in dest.rglob("*"):
        assert ".git" in f.parts or not f.is_file() or labels not in f.read_text(errors="replace"), f
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "AUTOLOOP_OUTPUT": str(out)}
    subprocess.run([sys.executable, "produce.py"], cwd=dest, env=env, check=True, capture_output=True, timeout=60)
    score = subprocess.run([sys.executable, "score.py", str(private / "labels.csv")], cwd=dest, env=env,
                           capture_output=True, text=True, timeout=60)
    loss = parse_metric_text(score.stdout, program.verifier)
    assert 0.3 < loss < 0.75, "the starting values are meant to be clearly sub-optimal"
