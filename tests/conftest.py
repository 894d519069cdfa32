"""Shared fixtures: real git repositories in tmp_path, with an isolated HOME and git config so a
developer's global hooks, signing or templates, Ray token or caches never leak into a test, and
a temporary folder of its own per test (TMPDIR, TEMP, TMP), so no test sees another's leftovers
in /tmp."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest as _unittest
from pathlib import Path

import _pytest.python as _pytest_python
import pytest


@pytest.fixture(autouse=True)
def isolated_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    # a fresh temporary folder, for this process (tempfile caches the first one it finds: the
    # cache is reset, and restored afterwards) and every process a test starts (they inherit it)
    tmp = tmp_path_factory.mktemp("tmp")
    for var in ("TMPDIR", "TEMP", "TMP"):
        monkeypatch.setenv(var, str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "CI", "GITHUB_STEP_SUMMARY",
                "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL",
                "NO_COLOR", "PYTHONPATH"):
        monkeypatch.delenv(var, raising=False)
    for var in [v for v in os.environ if v.startswith("RAY_")]:   # a developer's Ray auth or address
        monkeypatch.delenv(var)
    (home / ".gitconfig").write_text(
        "[user]\n\tname = Test User\n\temail = test@example.com\n"
        "[init]\n\tdefaultBranch = main\n"
    )
    return home


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True)
    return out.stdout.strip()


@pytest.fixture
def make_repo(tmp_path: Path):
    """make_repo({"path": "content", ...}, program=None) -> Path of a committed repo."""

    def _make(files: dict[str, str], *, name: str = "repo", commit: bool = True) -> Path:
        repo = tmp_path / name
        repo.mkdir()
        git(repo, "init", "-q")
        for rel, content in files.items():
            p = repo / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(textwrap.dedent(content))
        if commit:
            git(repo, "add", "-A")
            git(repo, "commit", "-q", "-m", "initial")
        return repo

    return _make


@pytest.fixture
def python() -> str:
    return sys.executable


def run_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 300, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real CLI as a subprocess (`python -m autoloop`), as a user would."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    return subprocess.run([sys.executable, "-m", "autoloop", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout, input=input)


# ---- running in parallel (pytest-xdist: `-n 2` in the README's command) --------------------
#
# Tests are spread over the workers one by one, except those that must share a process:
# - the tests of a module that share a module- or class-scoped fixture (a soak, a run whose
#   journal several tests read, a module that uninstalls last what its earlier tests used) run
#   in one worker, in file order, as they do serially: each such fixture is made once (per
#   parameter);
# - every module with Ray tests runs in one worker: a Ray head takes fixed default ports (its
#   dashboard's 8265, its client server's 10001, an agent's 52365) that two would fight over.
# - tests marked `xdist_group(NAME)` run in one worker, one after another (the real probes: two
#   at once would time each other, and one checks that no probe left its cache in /tmp).
# The workers collect and name each test's group; they write the groups where the controller's
# scheduler reads them (xdist's own `loadgroup` cannot carry them: it appends the group to the
# test's id, which pytest 9.2 no longer lets a plugin change).
# Tests marked `timing` (a verdict that rests on timing a workload) run with no other test
# beside them: each holds an exclusive lock that every other test holds shared.
# The units (a test, or a group) that hold a `slow` test are handed out first, the largest first,
# then the rest, the largest first: the suite's wall time is its work over the two workers plus
# the tail, and a two-minute probe handed out last is a two-minute tail on one worker.

SHARED_SCOPES = ("module", "class", "package")


def _group(item: pytest.Item, ray_modules: set[str]) -> str | None:
    """The test's `xdist_group` mark, or the module (and the parameters) of the shared fixtures
    it uses, if any."""
    module = item.nodeid.split("::")[0]
    if module in ray_modules:
        return "ray"
    mark = item.get_closest_marker("xdist_group")
    if mark is not None:
        return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
    info = getattr(item, "_fixtureinfo", None)
    shared = sorted(name for name, defs in (info.name2fixturedefs.items() if info else ())
                    if defs and defs[-1].scope in SHARED_SCOPES)
    if not shared:
        return None
    callspec = getattr(item, "callspec", None)
    params = [f"{n}={callspec.indices[n]}" for n in shared if callspec and n in callspec.indices]
    return ":".join([module, *params])


@pytest.hookimpl(tryfirst=True)   # before `-m` deselects by the marks added here
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    for item in items:   # the quick tier (`-m "not slow"`) leaves out real clusters and probes
        if item.get_closest_marker("ray") or item.get_closest_marker("timing"):
            item.add_marker(pytest.mark.slow)
    folder = _shared_folder(config)
    if folder is None:
        return
    ray_modules = {i.nodeid.split("::")[0] for i in items if i.get_closest_marker("ray") is not None}
    groups = {i.nodeid: g for i in items if (g := _group(i, ray_modules)) is not None}
    # the order the controller's scheduler hands the units out in (it keeps the workers'
    # collection order, see below); a stable sort, so the tests of a group keep their file order
    size: dict[str, int] = {}
    slow: set[str] = set()
    for item in items:
        unit = groups.get(item.nodeid, item.nodeid)
        size[unit] = size.get(unit, 0) + 1
        if item.get_closest_marker("slow") is not None:
            slow.add(unit)

    def order(item: pytest.Item) -> tuple[bool, int]:
        unit = groups.get(item.nodeid, item.nodeid)
        return unit not in slow, -size[unit]

    items.sort(key=order)
    worker = config.workerinput["workerid"]   # type: ignore[attr-defined]
    part = folder / f"groups-{worker}.json.part"
    part.write_text(json.dumps(groups))
    part.replace(folder / f"groups-{worker}.json")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    if config.getvalue("dist") != "load":   # `-n N` alone; another --dist is the caller's choice
        return None
    from xdist.scheduler import LoadScopeScheduling

    folder = Path(config._tmp_path_factory.getbasetemp())   # type: ignore[attr-defined]
    # xdist's default re-sorts the units by their number of tests alone: the workers' order (slow
    # units first, pytest_collection_modifyitems above) is the one to keep
    config.option.loadscopereorder = False

    class Grouped(LoadScopeScheduling):
        """Load scheduling whose unit is a test, or the whole group it belongs to."""

        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:   # every worker has collected (and written) before scheduling
                self.groups = {}
                for f in sorted(folder.glob("groups-*.json")):
                    self.groups.update(json.loads(f.read_text()))
            return self.groups.get(nodeid, nodeid)

    return Grouped(config, log)   # type: ignore[arg-type]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # type: ignore[no-untyped-def]
    """Set-up, call and tear-down of one test under the workers' shared lock (see above)."""
    folder = _shared_folder(item.config)
    if folder is None:
        yield
        return
    import fcntl

    exclusive = item.get_closest_marker("timing") is not None
    with open(folder / "gate.lock", "a") as gate, open(folder / "tests.lock", "a") as tests:
        # the gate queues an exclusive test ahead of shared ones that come after it, so a
        # stream of ordinary tests on the other worker cannot starve it
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(tests, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        if not exclusive:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(tests, fcntl.LOCK_UN)
            fcntl.flock(gate, fcntl.LOCK_UN)


def _shared_folder(config: pytest.Config) -> Path | None:
    """The controller's base temp folder, which holds each worker's (None when the tests run in
    one process)."""
    if not hasattr(config, "workerinput"):
        return None
    return Path(config._tmp_path_factory.getbasetemp()).parent   # type: ignore[attr-defined]


# A plant `doctor --probe` uses switches the test runner off in the process it runs in (its
# point: the guards then pass without running). Executed inside a test by mistake, every later
# test of that worker would pass without running — measured once: the suite "passed" in 9 min
# instead of 21. Each test ends by checking the runner is still the runner.
_RUNNER = (_pytest_python.Function.runtest, _unittest.TestCase.run)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    if (_pytest_python.Function.runtest, _unittest.TestCase.run) != _RUNNER:
        _pytest_python.Function.runtest, _unittest.TestCase.run = _RUNNER
        pytest.exit(f"{item.nodeid} switched the test runner off in this process (a probe plant run "
                    "in-process?): the tests after it would pass without running", returncode=3)
