"""Helpers for the black-box end-to-end tests: a throwaway git repository with a program.md, a
scripted generator (gen_plan.py), and the real CLI run as a subprocess (`python -m autoloop`).

Nothing here imports autoloop: the tests judge the installed command from the outside.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import signal
import stat
import subprocess
import sys
import textwrap
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCRIPTS = Path(__file__).resolve().parent
GEN = SCRIPTS / "gen_plan.py"
PROJECT_ROOT = SCRIPTS.parent.parent
PY = sys.executable

# The verifier every project gets: the score is whatever val.txt holds, with a few special values.
SCORE_PY = '''\
import os, sys, time
from pathlib import Path
v = open("val.txt").read().strip()
print("verifier: reading val.txt")
if v == "exit":
    print("score: 1")
    print("VERIFIER-STDERR-TAIL exit 3", file=sys.stderr)
    sys.exit(3)
if v == "none":
    print("nothing parsable here")
    sys.exit(0)
if v == "slow":
    Path(os.environ["E2E_OUT"], "verifier-started").write_text(str(os.getpid()))
    time.sleep(60)
print(f"score: {v}")
'''

GUARD_PY = '''\
import sys
sys.exit(1 if "FAIL" in open("notes.txt").read() else 0)
'''

BASE_FILES = {
    "score.py": SCORE_PY,
    "guard.py": GUARD_PY,
    "val.txt": "40.25\n",
    "notes.txt": "ok\n",
    "README.md": "# demo\n",
    ".gitignore": "*.log\n__pycache__/\n",
}

GOAL = "Lower the score that score.py prints"
BODY = "BODY-MARKER-7f3a: change val.txt, one small step at a time."
TSV_HEAD = ["cycle", "commit", "metric", "status", "description"]


def isolated_env(base: Path) -> dict[str, str]:
    """An environment with its own HOME, cache and git config, none of the caller's RAY_*
    variables (a developer's RAY_AUTH_MODE or RAY_ADDRESS would change which cluster a run
    reaches and how), and a unique E2E_ID that every process started under it inherits (so
    leftovers can be found in /proc)."""
    home = base / "home"
    home.mkdir(parents=True, exist_ok=True)
    out = base / "out"
    out.mkdir(parents=True, exist_ok=True)
    (home / ".gitconfig").write_text("[user]\n\tname = Test User\n\temail = test@example.com\n"
                                     "[init]\n\tdefaultBranch = main\n")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GIT_", "AUTOLOOP_", "ANTHROPIC_", "OPENAI_", "RAY_"))
           and k not in ("CI", "GITHUB_STEP_SUMMARY", "PYTHONPATH", "NO_COLOR")}
    # The checkout under test first on the path: `python -m autoloop` then runs this tree's code
    # even if the editable install is stale, broken or shadowed (it maps to the same files).
    env["PYTHONPATH"] = str(PROJECT_ROOT)
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"),
               XDG_CONFIG_HOME=str(home / ".config"), XDG_DATA_HOME=str(home / ".local" / "share"),
               XDG_STATE_HOME=str(home / ".local" / "state"), GIT_CONFIG_NOSYSTEM="1",
               GIT_CONFIG_GLOBAL=str(home / ".gitconfig"), E2E_OUT=str(out),
               E2E_ID=uuid.uuid4().hex, PYTHONDONTWRITEBYTECODE="1", LC_ALL="C.UTF-8")
    return env


def git(repo: Path, *args: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    """git for the tests' own reads: hooks and fsmonitor off, no optional locks (no index refresh)."""
    e = dict(env or os.environ)
    e["GIT_OPTIONAL_LOCKS"] = "0"
    out = subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", *args],
                         cwd=repo, env=e, capture_output=True, text=True)
    if check and out.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {out.stderr}")
    return out.stdout.strip()


def program_text(*, command: str, verifier: str = "{py} score.py", metric: str = "score",
                 direction: str = "minimize", vtimeout: float = 30, gtimeout: float = 30,
                 guards: bool = True, stop: str = "", allowed: str = '[val.txt, notes.txt, "src/**"]',
                 extra: str = "") -> str:
    verifier = verifier.format(py=PY)
    lines = [
        "---",
        f"goal: {GOAL}",
        f"allowed: {allowed}",
        "verifier:",
        f"  command: {verifier}",
        f"  metric: {metric}",
        f"  direction: {direction}",
        f"  timeout: {vtimeout}",
    ]
    if guards:
        lines += ["guards:", f"  - {{name: notes, command: {PY} guard.py, timeout: 30}}"]
    lines += ["generator:", "  kind: command", f"  command: {command}", f"  timeout: {gtimeout}"]
    if stop:
        lines += ["stop:"] + ["  " + s for s in stop.strip().splitlines()]
    if extra:
        lines += extra.strip().splitlines()
    lines += ["---", BODY, ""]
    return "\n".join(lines)


@dataclass
class Project:
    base: Path
    repo: Path
    env: dict[str, str]
    tag: str = "t1"
    plan_path: Path = field(default=None)  # type: ignore[assignment]
    rec_dir: Path = field(default=None)  # type: ignore[assignment]

    # ---- driving the CLI -------------------------------------------------------------------

    @property
    def out(self) -> Path:
        return Path(self.env["E2E_OUT"])

    def set_plan(self, plan: dict[Any, str]) -> None:
        self.plan_path.write_text(json.dumps({str(k): textwrap.dedent(v) for k, v in plan.items()}))

    def cli(self, *args: str, timeout: float = 120, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PY, "-m", "autoloop", *args], cwd=cwd or self.repo, env=self.env,
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def run(self, *extra: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.cli("run", "program.md", "--tag", self.tag, *extra, timeout=timeout)

    def popen(self, *extra: str, nohup: bool = False) -> subprocess.Popen[str]:
        """Start a run in its own session (so a test can signal it like a terminal would);
        `nohup`: with hangups ignored, as `nohup autoloop run ...` starts it. Without, a hangup is
        the default's (a suite itself started with `nohup` would pass its own on)."""
        hangup = signal.SIG_IGN if nohup else signal.SIG_DFL
        return subprocess.Popen([PY, "-m", "autoloop", "run", "program.md", "--tag", self.tag, *extra],
                                cwd=self.repo, env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGHUP, hangup))

    # ---- reading what the run wrote --------------------------------------------------------

    def tsv(self) -> tuple[list[str], list[dict[str, str]]]:
        text = (self.repo / "results.tsv").read_text()
        lines = text.rstrip("\n").split("\n")
        header = lines[0].split("\t")
        rows = []
        for ln in lines[1:]:
            cells = ln.split("\t")
            assert len(cells) == len(header), f"row has {len(cells)} cells, header {len(header)}: {ln!r}"
            rows.append(dict(zip(header, cells)))
        return header, rows

    def rows(self) -> list[dict[str, str]]:
        return self.tsv()[1]

    def statuses(self) -> dict[int, str]:
        return {int(r["cycle"]): r["status"] for r in self.rows()}

    def ledger_path(self) -> Path:
        return self.repo / ".autoloop" / self.tag / "ledger.jsonl"

    def ledger_lines(self) -> list[bytes]:
        return self.ledger_path().read_bytes().split(b"\n")

    def experiments(self) -> str:
        return (self.repo / "experiments.md").read_text()

    def decision(self, cycle: int) -> str | None:
        """The paired rule's decision on `cycle` (keep, discard, undecided), from the ledger."""
        for line in self.ledger_lines():
            rec = json.loads(line) if line.strip() else {}
            if rec.get("cycle") == cycle and rec.get("status"):
                batches = (rec.get("stats") or {}).get("batches") or [{}]
                return batches[-1].get("decision")
        return None

    def kept_on_retry(self, cycle: int, change: str, timeout: float = 600) -> int:
        """The cycle at which a real gain was kept: `cycle`, or, when the paired rule ran out of
        pairs there (undecided: the machine's speed moved under the test, never a decided
        discard), the next one, the same change proposed again in a resumed run with fresh pairs.
        A timing verdict gets a second test, as a user's night would give it another cycle."""
        if self.statuses().get(cycle) == "keep":
            return cycle
        assert self.decision(cycle) == "undecided", (cycle, self.statuses(), self.decision(cycle))
        self.set_plan({cycle + 1: change})
        res = self.run("--cycles", "1", timeout=timeout)
        assert res.returncode == 0, res.stdout + res.stderr
        assert self.statuses().get(cycle + 1) == "keep", (self.statuses(), self.decision(cycle + 1))
        return cycle + 1

    def branch(self) -> str:
        return f"autoloop/{self.tag}"

    def branch_head(self) -> str:
        return git(self.repo, "rev-parse", f"refs/heads/{self.branch()}", env=self.env)

    def branch_commits(self, since: str) -> list[str]:
        out = git(self.repo, "rev-list", "--first-parent", f"{since}..refs/heads/{self.branch()}", env=self.env)
        return out.split() if out else []

    def message(self, commit: str) -> str:
        return git(self.repo, "log", "-1", "--format=%B", commit, env=self.env)

    def show(self, rev: str, path: str) -> bytes:
        return subprocess.run(["git", "show", f"{rev}:{path}"], cwd=self.repo, env=self.env,
                              capture_output=True, check=True).stdout

    def records(self) -> list[dict[str, Any]]:
        """What the generator saw, one dict per generator invocation, in order."""
        if not self.rec_dir.exists():
            return []
        files = sorted(self.rec_dir.glob("cycle-*.json"), key=lambda p: int(p.stem.split("-")[2]))
        return [json.loads(p.read_text()) for p in files]

    def record(self, cycle: int) -> dict[str, Any]:
        found = [r for r in self.records() if r["cycle"] == cycle]
        assert found, f"the generator was not called for cycle {cycle}"
        return found[-1]

    def worktree(self) -> Path:
        """The run's work tree (where the generator edits): the one git lists under the cache,
        named after the tag (autoloop may keep other, helper worktrees next to it)."""
        out = git(self.repo, "worktree", "list", "--porcelain", env=self.env)
        paths = [Path(ln[len("worktree "):]) for ln in out.splitlines() if ln.startswith("worktree ")]
        cache = Path(self.env["XDG_CACHE_HOME"])
        mine = [p for p in paths if str(p).startswith(str(cache)) and p.name == self.tag]
        assert len(mine) == 1, f"expected one autoloop worktree named {self.tag}, found {paths}"
        return mine[0]


def random_moves_plan(max_sleep: float) -> dict[Any, str]:
    """A plan for long runs that get killed: every cycle, after up to `max_sleep` s, a random
    move — a gain, a loss, a crash of the verifier, a cheat on the verifier, or nothing."""
    return {"*": f'''
    r = random.Random(cycle * 7919 + time.time_ns())
    time.sleep(r.uniform(0, {max_sleep}))
    k = r.random()
    cur = float(open("val.txt").read())
    if k < 0.45:
        W("val.txt", str(round(cur - r.uniform(0.1, 2.0), 3)))
    elif k < 0.65:
        W("val.txt", str(cur + 5))
    elif k < 0.75:
        W("val.txt", "exit")
    elif k < 0.85:
        open("score.py", "a").write("# cheat\\n")
    print(f"Hypothesis: random move {{cycle}} k={{k:.2f}}")
'''}


def make_project(base: Path, plan: dict[Any, str] | None = None, *, files: dict[str, str] | None = None,
                 tag: str = "t1", records_in: Path | None = None, **program_kw: Any) -> Project:
    """A committed repository with score.py (the verifier), guard.py, val.txt (the score) and a
    program.md that drives gen_plan.py. `records_in`: the folder gen_plan.py keeps its plan and
    records in (default `base`), for a test whose own `sandbox:` lets the generator write there."""
    base.mkdir(parents=True, exist_ok=True)
    env = isolated_env(base)
    repo = base / "repo"
    repo.mkdir()
    plan_path = (records_in or base) / "plan.json"
    rec_dir = (records_in or base) / "records"
    rec_dir.mkdir(parents=True, exist_ok=True)
    command = program_kw.pop("command", f"{PY} {GEN} {plan_path} {rec_dir}")
    all_files = dict(BASE_FILES)
    if "sandbox" not in program_kw.get("extra", ""):
        # The default sandbox (auto) stays on; the test generator and verifiers only need to
        # write their own records outside the trees.
        program_kw["extra"] = (program_kw.get("extra", "") + "\nsandbox:\n"
                               f"  writable: [{rec_dir}, {base / 'out'}]\n")
    all_files["program.md"] = program_text(command=command, **program_kw)
    all_files.update(files or {})
    git(repo, "init", "-q", env=env)
    for rel, content in all_files.items():
        p = repo / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(content)
    git(repo, "add", "-A", env=env)
    git(repo, "commit", "-q", "-m", "initial", env=env)
    proj = Project(base, repo, env, tag, plan_path, rec_dir)
    proj.set_plan(plan or {})
    return proj


# ---- checks -----------------------------------------------------------------------------------


def tree_state(root: Path, skip: tuple[str, ...] = ()) -> dict[str, tuple]:
    """Every entry under root (including .git unless skipped): kind, mode, content hash."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames.sort()
        for name in list(dirnames) + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if rel.split(os.sep)[0] in skip or rel in skip:
                if name in dirnames:
                    dirnames.remove(name)
                continue
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("l", os.readlink(full))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("d", stat.S_IMODE(st.st_mode))
            else:
                with open(full, "rb") as f:
                    out[rel] = ("f", stat.S_IMODE(st.st_mode), hashlib.sha256(f.read()).hexdigest())
    return out


def repo_state(repo: Path, env: dict[str, str]) -> dict[str, Any]:
    """Everything a 'nothing changed' check compares: refs, HEAD, status, the whole file tree."""
    return {
        "refs": git(repo, "for-each-ref", "--format=%(refname) %(objectname)", env=env, check=False),
        "head": git(repo, "symbolic-ref", "-q", "HEAD", env=env, check=False),
        "status": git(repo, "status", "--porcelain=v2", "--ignored", "--untracked-files=all", env=env, check=False),
        "tree": tree_state(repo),
    }


def assert_valid_ledger(p: Project) -> list[dict[str, Any]]:
    data = p.ledger_path().read_bytes()
    assert data.endswith(b"\n"), "the ledger ends in a torn line"
    recs = []
    for i, line in enumerate(data.split(b"\n")[:-1], 1):
        try:
            recs.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"ledger line {i} is not JSON: {line[:200]!r}") from None
    return recs


def experiments_sections(text: str) -> list[tuple[int, str]]:
    """[(cycle, section text)] in file order."""
    heads = list(re.finditer(r"^## Cycle (\d+)\b.*$", text, re.M))
    out = []
    for i, m in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        out.append((int(m.group(1)), text[m.start():end]))
    return out


def section_field(section: str, name: str) -> str | None:
    m = re.search(rf"^(?:\*\*)?{name}:(?:\*\*)?[ \t]*(.*)$", section, re.M)
    return m.group(1).strip() if m else None


def assert_journal_consistent(p: Project) -> None:
    """results.tsv and experiments.md agree: the same cycles, in order, each once."""
    rows = p.rows()
    cycles = [int(r["cycle"]) for r in rows]
    assert cycles == list(range(len(cycles))), f"results.tsv cycles not 0..N once each: {cycles}"
    secs = [c for c, _ in experiments_sections(p.experiments())]
    assert secs in (cycles, cycles[1:]), f"experiments.md sections {secs} vs results.tsv {cycles}"


def marked_pids(env: dict[str, str]) -> list[int]:
    """Live processes (zombies excluded) that inherited this test's E2E_ID."""
    needle = f"E2E_ID={env['E2E_ID']}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read()
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X") and needle in environ.split(b"\0"):
            pids.append(int(entry))
    return pids


def kill_marked(env: dict[str, str]) -> None:
    for _ in range(5):
        pids = marked_pids(env)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def wait_for(pred, timeout: float, interval: float = 0.02) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(interval)
    return bool(pred())


def error_lines(stderr: str) -> list[str]:
    """stderr lines that are not argparse's usage text."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    out = []
    in_usage = False
    for ln in lines:
        if ln.startswith("usage:"):
            in_usage = True
            continue
        if in_usage and ln.startswith(" "):
            continue
        in_usage = False
        out.append(ln)
    return out


def tsv_from_text(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text), delimiter="\t", quoting=csv.QUOTE_NONE))
