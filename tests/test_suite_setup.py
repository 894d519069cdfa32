"""How the suite itself runs: CI runs exactly the README's test command, and under pytest-xdist
(tests/conftest.py) a module's shared fixture stays in one worker, a `timing` test runs with
no other test beside it, and the slow tests start first."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ci_runs_exactly_the_readmes_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"^pip install -e '\.\[test\]' && (python -m pytest[^\n]*)$", readme, re.M)
    assert len(commands) == 1, commands
    ci = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()
          if ln.strip().startswith("python -m pytest")]
    assert ci == commands, (ci, commands)


# each test appends (name, worker pid, start, end) to a file of its own
# and the temporary folder it has, and a process it starts has
RECORD = '''\
import json, os, subprocess, sys, tempfile, time, pytest
from pathlib import Path

def record(name, seconds):
    t0 = time.monotonic()
    time.sleep(seconds)
    child = subprocess.run([sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"],
                           capture_output=True, text=True, check=True).stdout.strip()
    Path(tempfile.gettempdir(), "mine").write_text(name)
    tmp = [os.environ[v] for v in ("TMPDIR", "TEMP", "TMP")] + [tempfile.gettempdir(), child]
    Path(os.environ["RECORDS"], name).write_text(json.dumps([os.getpid(), t0, time.monotonic(), tmp]))
'''
SHARED = RECORD + '''
@pytest.fixture(scope="module")
def made_once():
    return os.getpid()

@pytest.mark.parametrize("i", range(4))
def test_shares(made_once, i):
    assert made_once == os.getpid()
    record(f"shared{i}", 0.1)
'''
TIMED = RECORD + '''
@pytest.mark.timing
@pytest.mark.parametrize("i", range(2))
def test_timed(i):
    record(f"timed{i}", 0.4)
'''
PLAIN = RECORD + '''
@pytest.mark.parametrize("i", range(8))
def test_plain(i):
    record(f"plain{i}", 0.2)
'''
# last in file order: handed out first all the same
SLOW = RECORD + '''
@pytest.mark.slow
def test_slow():
    record("slow", 0.2)
'''


def test_shared_fixtures_stay_in_one_worker_and_timing_tests_run_alone(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "tests").mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "conftest.py", tree / "tests" / "conftest.py")
    (tree / "tests" / "__init__.py").write_text("")
    (tree / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n"
                                     "markers =\n    timing: alone\n    ray: ray\n    slow: slow\n")
    for name, text in (("test_shared.py", SHARED), ("test_timed.py", TIMED), ("test_plain.py", PLAIN),
                       ("test_zslow.py", SLOW)):
        (tree / "tests" / name).write_text(text)
    records = tmp_path / "records"
    records.mkdir()
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--basetemp", str(tmp_path / "bt")], cwd=tree, capture_output=True,
                         text=True, timeout=300, env={**_env(), "RECORDS": str(records)})
    assert res.returncode == 0, res.stdout + res.stderr
    runs = {f.name: json.loads(f.read_text()) for f in records.iterdir()}
    assert len(runs) == 15, sorted(runs)
    assert len({runs[f"shared{i}"][0] for i in range(4)}) == 1, runs          # one worker
    assert len({pid for pid, *_ in runs.values()}) == 2, runs                  # and two at work
    # each test has a temporary folder of its own, under the run's base folder, empty but for
    # what it wrote itself, and the processes it starts use it too
    folders = {name: tmp for name, (*_, tmp) in runs.items()}
    assert all(len(set(tmp)) == 1 for tmp in folders.values()), folders
    assert len({tmp[0] for tmp in folders.values()}) == len(runs), folders
    for name, (folder, *_) in folders.items():
        assert Path(folder).is_relative_to(tmp_path / "bt"), folder
        assert [f.name for f in Path(folder).iterdir()] == ["mine"] and (Path(folder) / "mine").read_text() == name
    for name in ("timed0", "timed1"):
        _, start, end, _ = runs[name]
        beside = [other for other, (_, s, e, _) in runs.items() if other != name and s < end and e > start]
        assert not beside, (name, beside)
    # the slow units (`timing` ones are slow too) are handed out first, whatever the file order:
    # each starts before any quick test of the file that comes before theirs (xdist's own order,
    # by number of tests, hands out the eight plain ones, then those)
    slow_started = max(runs[name][1] for name in ("timed0", "timed1", "slow"))
    assert all(runs[f"plain{i}"][1] > slow_started for i in range(8)), sorted(runs, key=lambda n: runs[n][1])


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
