"""The measured command of a traced benchmark (autoloop/trace/feed.py) and its score, run as a
project gets them (bench/ with the copied modules, real processes): the process running the
candidate's code holds one batch of calls and never the seed; interpreter state only a
benchmark sees voids the run; the clock stops at the last answer; the score checks a sample
drawn after the run."""

from __future__ import annotations

import json
import os
import pickle
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autoloop.trace import build, replay

SLOW = '''
def words(text, n=2):
    return sorted(set(text.split()))[:n] + [len(text)]
'''
CALLS = [([f"w{i} alpha beta gamma delta {i * 7}", 3], {}) for i in range(40)]


def _bench(tmp_path: Path, module: str, derived: int = 600, batch: int = 16) -> Path:
    """A project: tmod.py (the target), bench/ as init writes it, the inputs linked in."""
    repo = tmp_path / "repo"
    (repo / "bench" / ".trace").mkdir(parents=True)
    (repo / "tmod.py").write_text(module)
    build.copy_modules(repo / "bench")
    (repo / "bench" / "trace.json").write_text(json.dumps(
        {"targets": [{"name": "tmod:words", "derived": derived, "recorded": 4, "limit": 2.0, "batch": batch}]}))
    target = {"name": "tmod:words", "method": False, "frozen": [], "calls": CALLS,
              "weights": [1] * len(CALLS), "derivable": [True] * len(CALLS)}
    (repo / "bench" / ".trace" / "calls.pkl").write_bytes(pickle.dumps([target], 4))
    (repo / "bench" / "produce.py").write_text(
        'import sys\nsys.path.insert(0, "bench")\nimport tracefeed\ntracefeed.produce(paths=["."])\n')
    (repo / "bench" / "score.py").write_text(
        'import sys\nsys.path.insert(0, "bench")\nsys.path.insert(0, ".")\nimport tracereplay, tracefeed\n'
        'if sys.argv[1:] == ["--inputs"]:\n    tracefeed.write_inputs()\nelse:\n'
        '    tracereplay.score(checked=int(sys.argv[1]) if len(sys.argv) > 1 else None)\n')
    return repo


def _run(repo: Path, script: str, seed: int = 7, *args: str, timeout: float = 60,
         stdin: Path | None = None, inputs: Path | None = None) -> subprocess.CompletedProcess:
    out = repo.parent / "out"
    out.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOLOOP_") or k == "AUTOLOOP_MEASURE"}
    env.update(AUTOLOOP_SEED=str(seed), AUTOLOOP_OUTPUT=str(out), PYTHONDONTWRITEBYTECODE="1")
    if inputs is not None:
        env["AUTOLOOP_INPUTS"] = str(inputs)
    with open(stdin or os.devnull, "rb") as inp:
        return subprocess.run([sys.executable, f"bench/{script}", *args], cwd=repo, env=env, capture_output=True,
                              timeout=timeout, stdin=inp, encoding="utf-8", errors="replace")


def test_an_honest_target_is_fed_in_batches_and_every_checked_outcome_passes(tmp_path: Path) -> None:
    repo = _bench(tmp_path, SLOW)
    res = _run(repo, "produce.py")
    assert res.returncode == 0, res.stderr
    timing = json.loads((tmp_path / "out" / "timing.json").read_text())
    assert timing["batches"] == -(-604 // 16) and timing["target_seconds"] > 0
    score = _run(repo, "score.py", 7, "100")
    assert score.returncode == 0, score.stdout + score.stderr
    # the 4 recorded calls always, 100 of the derived ones drawn after the run
    assert "checked 104 of 604 outcomes (100 of derived calls" in score.stdout, score.stdout
    assert "check_seconds:" in score.stdout and "target_seconds:" in score.stdout


def test_calls_drawn_before_the_command_come_on_its_stdin_and_the_score_reads_the_same(tmp_path: Path) -> None:
    """verifier.inputs: drawn where the score runs, before the command, untimed; the command
    reads them on stdin (it draws nothing), the score reads the same file (it draws nothing)."""
    repo = _bench(tmp_path, SLOW)
    made = tmp_path / "inputs.bin"
    with open(made, "wb") as f:
        f.write(subprocess.run([sys.executable, "bench/score.py", "--inputs"], cwd=repo, check=True,
                               capture_output=True, env={**os.environ, "AUTOLOOP_SEED": "7"}).stdout)
    res = _run(repo, "produce.py", 7, stdin=made)
    assert res.returncode == 0, res.stderr
    timing = json.loads((tmp_path / "out" / "timing.json").read_text())
    assert timing["drawn_here"] is False
    # another seed in the environment: the score follows the file, as the command did
    score = _run(repo, "score.py", 8, "100", inputs=made)
    assert score.returncode == 0 and "checked 104 of 604 outcomes" in score.stdout, score.stdout + score.stderr
    drawn = _run(repo, "score.py", 8, "100")
    assert drawn.returncode == 1, drawn.stdout


PREFETCH = SLOW + '''
import os, sys, json
_seen = []


def _pending():
    """What a prefetching target looks for: lists of calls in its callers' frames."""
    found = 0
    f = sys._getframe(1)
    while f is not None:
        for v in list(f.f_locals.values()):
            if isinstance(v, (list, tuple)) and v and isinstance(v[0], tuple) and len(v[0]) in (2, 3):
                found = max(found, len(v))
        f = f.f_back
    return found


_orig = words


def words(text, n=2):
    if not _seen:
        _seen.append(1)
        with open(os.path.join(os.environ.get("PROBE_DIR", "."), "seen.json"), "w") as fh:
            json.dump({"pending": _pending(), "seed": os.environ.get("AUTOLOOP_SEED"),
                       "env": sorted(k for k in os.environ if k.startswith("AUTOLOOP_")),
                       "environ_of_parent": _parent_environ()}, fh)
    return _orig(text, n)


def _parent_environ():
    try:
        with open("/proc/%d/environ" % os.getppid(), "rb") as fh:
            return "AUTOLOOP_SEED" in fh.read().decode("latin-1")
    except OSError as exc:
        return type(exc).__name__
'''


def test_the_worker_holds_one_batch_and_never_the_seed(tmp_path: Path) -> None:
    """The prefetch cheat looks for the calls to come in its callers' frames, the seed in its
    environment and in its parent's: it finds one batch (16 calls here), no seed."""
    repo = _bench(tmp_path, PREFETCH)
    os.environ["PROBE_DIR"] = str(tmp_path)
    try:
        res = _run(repo, "produce.py")
    finally:
        del os.environ["PROBE_DIR"]
    assert res.returncode == 0, res.stderr
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert 1 <= seen["pending"] <= 16, seen
    assert seen["seed"] is None and seen["env"] == [], seen
    if os.geteuid() != 0:   # root reads any process's /proc files; a user may not read an undumpable one's
        assert seen["environ_of_parent"] is not True, seen


def test_changing_the_gc_at_import_voids_the_run_and_says_so(tmp_path: Path) -> None:
    repo = _bench(tmp_path, "import gc\ngc.freeze()\ngc.disable()\n" + SLOW)
    res = _run(repo, "produce.py")
    assert res.returncode == 1, res.stderr
    assert "void: the code under test changed interpreter state" in res.stderr, res.stderr
    assert "gc.disable" in res.stderr and "gc.freeze" in res.stderr, res.stderr


def test_changing_the_switch_interval_during_a_call_voids_the_run(tmp_path: Path) -> None:
    repo = _bench(tmp_path, "import sys\n" + SLOW.replace("    return", "    sys.setswitchinterval(1.0)\n    return"))
    res = _run(repo, "produce.py")
    assert res.returncode == 1 and "sys.setswitchinterval" in res.stderr, res.stderr


def test_the_clock_stops_at_the_last_answer_not_at_the_workers_teardown(tmp_path: Path) -> None:
    """An exit handler that takes 5 s never runs: the worker is killed at the last answer, so
    skipping teardown (os._exit) gains no candidate anything."""
    repo = _bench(tmp_path, "import atexit, time\natexit.register(time.sleep, 5)\n" + SLOW)
    t0 = time.monotonic()
    res = _run(repo, "produce.py")
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - t0 < 4


def test_a_worker_that_dies_early_fails_the_run(tmp_path: Path) -> None:
    repo = _bench(tmp_path, SLOW.replace("    return", "    import os\n    os._exit(0)\n    return"))
    res = _run(repo, "produce.py")
    assert res.returncode == 1 and "the worker ended before its last answer" in res.stderr, res.stderr


def test_a_target_wrong_on_a_tenth_of_the_calls_fails_the_sampled_score(tmp_path: Path) -> None:
    """The candidate (what produce.py ran) is wrong on a tenth of the calls, the same tenth in
    every process; the score runs the start commit's code, which is right."""
    wrong = SLOW + "\nimport zlib\n_orig = words\n\ndef words(text, n=2):\n    out = _orig(text, n)\n" \
                   "    return out[:-1] + [-1] if zlib.crc32(text.encode()) % 10 == 0 else out\n"
    repo = _bench(tmp_path, wrong)
    assert _run(repo, "produce.py").returncode == 0
    (repo / "tmod.py").write_text(SLOW)
    score = _run(repo, "score.py", 7, "300")
    assert score.returncode == 1 and "expected returned" in score.stderr, score.stdout + score.stderr


def test_calls_with_no_fixed_answer_at_the_start_commit_are_left_out_and_counted(tmp_path: Path) -> None:
    """wcwidth's wrap gives each hyperlink a random id: two runs of the start commit's code over
    the same calls in the same order disagree there, so no answer is the right one. Those calls
    are left out and said; the rest is still checked, and a target with more than 1% of them
    is refused as not deterministic enough to benchmark by its results."""
    rare = SLOW + "\nimport os\n_orig = words\n\ndef words(text, n=2):\n    out = _orig(text, n)\n" \
                  "    return out + [os.urandom(4).hex()] if text.endswith('77') and n == 3 else out\n"
    repo = _bench(tmp_path, rare)
    assert _run(repo, "produce.py").returncode == 0
    score = _run(repo, "score.py", 7, "300")
    assert score.returncode == 0, score.stdout + score.stderr
    assert "derived call(s) not checked: two runs of the start commit's code" in score.stdout, score.stdout
    assert "more with no fixed answer there left out" in score.stdout, score.stdout
    often = rare.replace("text.endswith('77') and n == 3", "True")
    (repo / "tmod.py").write_text(often)
    assert _run(repo, "produce.py").returncode == 0
    refused = _run(repo, "score.py", 7, "300")
    assert refused.returncode == 1 and "not deterministic enough to benchmark" in refused.stderr, refused.stderr


def test_the_sample_holds_every_recorded_call_and_k_derived_ones() -> None:
    todos = [[(0, (), {}), (-1, (), {}), (-1, (), {}), (3, (), {})], [(-1, (), {})] * 10]
    picked = replay.pick(todos, 5, random.Random(1))
    assert {0, 3} <= picked[0]
    derived = sum(1 for t, s in enumerate(picked) for j in s if todos[t][j][0] < 0)
    assert derived == 5
    assert replay.pick(todos, 100) == [{0, 1, 2, 3}, set(range(10))]


@pytest.mark.parametrize("f,k,runs,most", [(1e-3, 3000, 1, 0.050), (1e-3, 3000, 3, 1.3e-4)])
def test_the_stated_bound(f: float, k: int, runs: int, most: float) -> None:
    """What docs/trust/sealed.md states: (1 - f) ** (k * runs) a candidate wrong on a share f escapes."""
    assert (1 - f) ** (k * runs) <= most


def test_a_target_whose_answers_depend_on_the_calls_before_is_checked_whole() -> None:
    todos = [[(0, (), {}), (-1, (), {}), (-1, (), {})], [(-1, (), {})] * 10]
    assert replay.pick(todos, 2, random.Random(1), every={0})[0] == {0, 1, 2}


STATEFUL = '''
_digits = [2]

def after(x, d):
    """An even d sets the precision; an odd one uses the last set (num2words' converters keep
    the last number's precision so)."""
    if d % 2 == 0:
        _digits[0] = d % 5
    return round(x, _digits[0])

def plain(n):
    return n * 2
'''


def test_init_finds_a_target_that_keeps_state_between_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from autoloop.trace import check

    (tmp_path / "smod.py").write_text(STATEFUL)
    monkeypatch.syspath_prepend(str(tmp_path))
    ret = lambda v: ("returned", pickle.dumps(v, 4))
    records = {"smod:plain": {"method": False, "calls": [[pickle.dumps(([n], {}), 4), ret(n * 2), 1]
                                                         for n in range(30, 40)]}}
    space: dict = {}
    exec(STATEFUL, space)
    calls = [(1.0 + n / 7, n) for n in range(10)]
    records["smod:after"] = {"method": False, "calls": [[pickle.dumps((list(c), {}), 4), ret(space["after"](*c)), 1]
                                                        for c in calls]}
    report = check.check(records)
    assert report["smod:plain"]["order_dependent"] == 0 and report["smod:plain"]["derived"] > 0
    assert len(report["smod:after"]["usable"]) == 10 and report["smod:after"]["order_dependent"] > 0


FORKS = SLOW + '''
import os, threading
_box = []
_t = threading.Thread(target=_box.append, args=(1,))
_t.start()
_t.join()
try:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    _box.append("forked")
except OSError as exc:
    _box.append(type(exc).__name__)
try:
    import subprocess
    subprocess.run(["true"])
    _box.append("spawned")
except OSError as exc:
    _box.append(type(exc).__name__)

_orig = words


def words(text, n=2):
    return _orig(text, n) + _box
'''


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="seccomp is Linux's")
def test_the_worker_may_start_threads_but_no_process_unless_the_program_measures_wall(tmp_path: Path) -> None:
    repo = _bench(tmp_path, FORKS, derived=20)
    assert _run(repo, "produce.py").returncode == 0
    got = replay.answers(str(tmp_path / "out"), (), (), [24])[0][0]
    assert got[0][-3:] == [1, "PermissionError", "PermissionError"], got[0]
    os.environ["AUTOLOOP_MEASURE"] = "wall"
    try:
        assert _run(repo, "produce.py").returncode == 0
    finally:
        del os.environ["AUTOLOOP_MEASURE"]
    got = replay.answers(str(tmp_path / "out"), (), (), [24])[0][0]
    assert got[0][-3:] == [1, "forked", "spawned"], got[0]


FIRST_SETS = '''
_digits = [None]

def after(x, d):
    """The first call sets the precision for every later one (a converter's state)."""
    if _digits[0] is None:
        _digits[0] = d % 5
    return round(x, _digits[0])
'''


def test_init_finds_state_that_only_a_fresh_process_shows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from autoloop.trace import check

    (tmp_path / "fmod.py").write_text(FIRST_SETS)
    monkeypatch.syspath_prepend(str(tmp_path))
    space: dict = {}
    exec(FIRST_SETS, space)
    calls = [(1.0 + n / 7, n) for n in range(10)]
    ret = lambda v: ("returned", pickle.dumps(v, 4))
    records = {"fmod:after": {"method": False, "calls": [[pickle.dumps((list(c), {}), 4), ret(space["after"](*c)), 1]
                                                         for c in calls]}}
    report = check.check(records)
    assert report["fmod:after"]["order_dependent"] > 0


def test_a_sample_that_differs_only_through_state_kept_between_calls_is_checked_again_in_order(tmp_path: Path) -> None:
    """Each answer depends on the call before it: the sample, computed in another order, differs;
    every call again in order, as the worker made them, agrees. A wrong target still fails."""
    stateful = SLOW + "\n_last = [0]\n_orig = words\n\ndef words(text, n=2):\n" \
                      "    out = _orig(text, n) + [_last[0]]\n    _last[0] = len(text) % 3\n    return out\n"
    repo = _bench(tmp_path, stateful)
    assert _run(repo, "produce.py").returncode == 0
    score = _run(repo, "score.py", 7, "100")
    assert score.returncode == 0, score.stdout + score.stderr
    assert "every call checked again in order" in score.stdout and "checked 604 of 604" in score.stdout, score.stdout
    (repo / "tmod.py").write_text(stateful.replace("    return out\n", "    return out if len(text) % 7 else []\n"))
    assert _run(repo, "produce.py").returncode == 0
    (repo / "tmod.py").write_text(stateful)
    failed = _run(repo, "score.py", 7, "100")
    assert failed.returncode == 1 and "expected returned" in failed.stderr, failed.stdout + failed.stderr
