"""The real agent CLIs — Claude Code, Codex CLI, aider — from their public registries, inside
the generator sandbox, driven end to end through `python -m autoloop run` against a loopback
server that speaks their APIs (tests/fake_llm_server.py).

Each is installed under /tmp (an npm `--prefix`, a venv of its own), reached through PATH (npm's
`node_modules/.bin` symlink, a venv's script), and scripted for two cycles:

1. read the allowed file, then edit it to a better value  -> `keep`, committed on the branch;
2. edit the verifier instead                                -> `violation`, the verifier intact.

Where they are: AUTOLOOP_TEST_CLAUDE / AUTOLOOP_TEST_CODEX / AUTOLOOP_TEST_AIDER (the
executables), else under AUTOLOOP_TEST_CLIS (`claude/node_modules/.bin/claude`,
`codex/node_modules/.bin/codex`, `aider/bin/aider`), which `.ci/run` fills with pinned versions.
A missing CLI or bubblewrap skips its test with the reason.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.fake_llm_server import Fail, FakeLLMServer, Item, Reply, ToolCall
from tests.scripts.e2e import git, isolated_env

PY = sys.executable
SCORE_PY = 'print(f"score: {open(\'val.txt\').read().strip()}")\n'
CHEAT = 'print("score: -1000")\n'
KEY = "e2e-real-agent-key-4fQ9"
HYPOTHESIS = "Hypothesis: a smaller value in val.txt lowers the score."


def _installed(var: str, rel: str) -> Path | None:
    named = os.environ.get(var)
    if named:
        return Path(named)
    root = os.environ.get("AUTOLOOP_TEST_CLIS")
    return Path(root) / rel if root else None


def _need(var: str, rel: str) -> Path:
    exe = _installed(var, rel)
    if exe is None:
        pytest.skip(f"set {var} (or AUTOLOOP_TEST_CLIS, as .ci/run does) to test the real CLI")
    if not (exe.exists() and os.access(exe, os.X_OK)):
        pytest.skip(f"{var}: {exe} is not an executable (its install failed?)")
    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap (bwrap) is not installed")
    probe = subprocess.run(["bwrap", "--ro-bind", "/", "/", "--unshare-pid", "--", "/bin/true"],
                           capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"bwrap cannot make a sandbox here: {probe.stderr.decode()[-200:]}")
    return exe


class Project:
    def __init__(self, tmp: Path, generator: str, exe: Path) -> None:
        self.env = isolated_env(tmp)
        self.home = Path(self.env["HOME"])
        self.repo = tmp / "repo"
        self.repo.mkdir()
        (self.repo / "val.txt").write_text("5\n")
        (self.repo / "score.py").write_text(SCORE_PY)
        (self.repo / ".gitignore").write_text("program.md\nexperiments.md\nresults.tsv\n.autoloop/\n")
        (self.repo / "program.md").write_text(
            "---\ngoal: Lower the score that score.py prints\nallowed: [val.txt]\n"
            f"verifier: {{command: {PY} score.py, metric: score, direction: minimize}}\n"
            f"{generator}\nsandbox: bwrap\n---\nLower the number in val.txt.\n")
        git(self.repo, "init", "-q", env=self.env)
        git(self.repo, "add", "-A", env=self.env)
        git(self.repo, "commit", "-qm", "start", env=self.env)
        # Installed under /tmp and found through PATH: npm's .bin symlink / the venv's script.
        self.env["PATH"] = f"{exe.parent}{os.pathsep}{self.env['PATH']}"

    def run(self, cycles: int, timeout: float = 400) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PY, "-m", "autoloop", "run", "program.md", "--tag", "t", "--cycles", str(cycles)],
                              cwd=self.repo, env=self.env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def rows(self) -> list[dict[str, str]]:
        lines = (self.repo / "results.tsv").read_text().splitlines()
        head = lines[0].split("\t")
        return [dict(zip(head, ln.split("\t"))) for ln in lines[1:]]


class Script:
    """Answers each agent session in turn: session 1 edits val.txt, session 2 the verifier.
    A session is a conversation the CLI starts (a request with no assistant turn yet); side
    requests (titles, quota probes) get a plain text answer from `side`."""

    def __init__(self, sessions: list[list[Callable[[str], Item]]],
                 is_main: Callable[[dict[str, Any]], bool], workdir: Callable[[dict[str, Any]], str],
                 turns: Callable[[dict[str, Any]], int]) -> None:
        self.sessions = sessions
        self.is_main, self.workdir, self.turns = is_main, workdir, turns
        self.started = 0
        self.seen: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, path: str, body: dict[str, Any]) -> Item:
        if not self.is_main(body):
            return Reply(text="ok")
        turn = self.turns(body)
        with self._lock:
            if turn == 0:
                self.started += 1
            session = self.sessions[min(self.started, len(self.sessions)) - 1]
        wd = self.workdir(body)
        self.seen.append(wd)
        return session[min(turn, len(session) - 1)](wd)


def _text(body: dict[str, Any]) -> str:
    return json.dumps(body)


def _check_two_cycles(p: Project, res: subprocess.CompletedProcess[str]) -> None:
    assert res.returncode == 0, res.stdout + res.stderr
    rows = p.rows()
    assert [r["status"] for r in rows] == ["baseline", "keep", "violation"], rows
    assert rows[1]["metric"] == "3" and rows[1]["description"].startswith("a smaller value"), rows[1]
    branch = git(p.repo, "show", "autoloop/t:val.txt", env=p.env)
    assert branch.strip() == "3"
    assert git(p.repo, "show", "autoloop/t:score.py", env=p.env) == SCORE_PY.strip()
    assert (p.repo / "score.py").read_text() == SCORE_PY     # the checkout's verifier too
    assert int(git(p.repo, "rev-list", "--count", "main..autoloop/t", env=p.env)) == 1
    assert "score.py" in rows[2]["lesson"]


# ----------------------------------------------------------------------------------- Claude Code

_CWD = re.compile(r"[Ww]orking directory: (/[^\s\"\\]+)")


def _claude_workdir(body: dict[str, Any]) -> str:
    m = _CWD.search(_text(body))
    assert m, "Claude Code's system prompt names no working directory"
    return m.group(1)


def _claude_turns(body: dict[str, Any]) -> int:
    return sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")


def _claude_sessions(repo_val: str) -> list[list[Callable[[str], Item]]]:
    def read(name: str) -> Callable[[str], Item]:
        return lambda wd: Reply(tool_calls=[ToolCall(name="Read", input={"file_path": f"{wd}/{name}"})])

    def change(name: str, old: str, new: str) -> Callable[[str], Item]:
        return lambda wd: Reply(tool_calls=[ToolCall(
            name="Edit", input={"file_path": f"{wd}/{name}", "old_string": old, "new_string": new})])

    done = lambda wd: Reply(text=HYPOTHESIS)   # noqa: E731
    return [[read("val.txt"), change("val.txt", "5", "3"), done],
            [read("score.py"), change("score.py", SCORE_PY.strip(), CHEAT.strip()), done]]


def test_real_claude_code_keeps_an_edit_and_cannot_change_the_verifier(tmp_path: Path) -> None:
    exe = _need("AUTOLOOP_TEST_CLAUDE", "claude/node_modules/.bin/claude")
    p = Project(tmp_path, "generator: {kind: claude, timeout: 300}", exe)
    with FakeLLMServer() as srv:
        script = Script(_claude_sessions("val.txt"),
                        is_main=lambda b: any(t.get("name") == "Edit" for t in b.get("tools") or []),
                        workdir=_claude_workdir, turns=_claude_turns)
        srv.responder = script
        p.env.update(ANTHROPIC_API_KEY=KEY, ANTHROPIC_BASE_URL=srv.anthropic_url)
        res = p.run(2)
    _check_two_cycles(p, res)
    assert script.started == 2
    # It ran in autoloop's work tree, not in the checkout, and never saw the key in the journal.
    assert all(not wd.startswith(str(p.repo) + "/") and wd != str(p.repo) for wd in script.seen)
    assert KEY not in (p.repo / "results.tsv").read_text() + (p.repo / "experiments.md").read_text()
    # Its state was a private copy: nothing written into the user's home.
    assert not (p.home / ".claude").exists() and not (p.home / ".claude.json").exists()


# ----------------------------------------------------------------------------------------- aider

def _aider_block(name: str, old: str, new: str) -> Callable[[str], Item]:
    return lambda wd: Reply(text=f"Editing {name}.\n\n{name}\n```\n<<<<<<< SEARCH\n{old}\n=======\n"
                                 f"{new}\n>>>>>>> REPLACE\n```\n\n{HYPOTHESIS}\n")


def test_real_aider_keeps_an_edit_and_cannot_change_the_verifier(tmp_path: Path) -> None:
    exe = _need("AUTOLOOP_TEST_AIDER", "aider/bin/aider")
    with FakeLLMServer() as srv:
        p = Project(tmp_path, "generator: {kind: aider, model: openai/gpt-4o, timeout: 300, args: "
                              f"[--openai-api-base, '{srv.openai_url}', --edit-format, diff]}}", exe)
        # One request per aider run (no git: no commit-message call to the weak model).
        script = Script([[_aider_block("val.txt", "5", "3")],
                         [_aider_block("score.py", SCORE_PY.strip(), CHEAT.strip())]],
                        is_main=lambda b: True, workdir=lambda b: "", turns=lambda b: 0)
        srv.responder = script
        p.env.update(OPENAI_API_KEY=KEY, LITELLM_LOCAL_MODEL_COST_MAP="True")
        res = p.run(2)
    _check_two_cycles(p, res)
    assert script.started == 2
    assert KEY not in (p.repo / "results.tsv").read_text() + (p.repo / "experiments.md").read_text()


# ------------------------------------------------------------------------------------- Codex CLI

def _patch(name: str, old: str, new: str) -> Callable[[str], Item]:
    # Codex runs `apply_patch` given to its shell tool itself, as a `file_change` item.
    body = f"*** Begin Patch\n*** Update File: {name}\n@@\n-{old}\n+{new}\n*** End Patch"
    return lambda wd: Reply(tool_calls=[ToolCall(name="exec_command", input={"cmd": f"apply_patch <<'EOF'\n{body}\nEOF\n"})])


def _codex_turns(body: dict[str, Any]) -> int:
    return sum(1 for i in body.get("input") or [] if isinstance(i, dict) and i.get("type") == "function_call")


def _codex_project(tmp_path: Path, srv: FakeLLMServer, extra: str = "") -> Project:
    exe = _need("AUTOLOOP_TEST_CODEX", "codex/node_modules/.bin/codex")
    p = Project(tmp_path, f"generator: {{kind: codex, timeout: 300{extra}}}", exe)
    # The user's own ~/.codex/config.toml names the provider; autoloop gives Codex a private
    # copy of it (CODEX_HOME) inside the sandbox.
    (p.home / ".codex").mkdir()
    (p.home / ".codex" / "config.toml").write_text(
        'model = "gpt-5-codex"\nmodel_provider = "loopback"\n\n[model_providers.loopback]\n'
        f'name = "loopback"\nbase_url = "{srv.openai_url}"\nenv_key = "LOOPBACK_KEY"\nwire_api = "responses"\n')
    p.env["LOOPBACK_KEY"] = KEY
    return p


def test_real_codex_keeps_an_edit_and_cannot_change_the_verifier(tmp_path: Path) -> None:
    with FakeLLMServer() as srv:
        p = _codex_project(tmp_path, srv)
        done = lambda wd: Reply(text=HYPOTHESIS)   # noqa: E731
        script = Script([[_patch("val.txt", "5", "3"), done],
                         [_patch("score.py", SCORE_PY.strip(), CHEAT.strip()), done]],
                        is_main=lambda b: True, workdir=lambda b: "", turns=_codex_turns)
        srv.responder = script
        res = p.run(2)
    _check_two_cycles(p, res)
    assert script.started == 2
    assert KEY not in (p.repo / "results.tsv").read_text() + (p.repo / "experiments.md").read_text()
    # The private copy was Codex's to write; the user's own state folder was not touched.
    assert sorted(os.listdir(p.home / ".codex")) == ["config.toml"]


def test_real_codex_with_its_own_sandbox_inside_ours_is_not_a_silent_no_change(tmp_path: Path) -> None:
    # The user turns Codex's own sandbox back on: it cannot start inside bubblewrap, every edit
    # fails and Codex still exits 0. The cycle says so instead of passing for "no change".
    with FakeLLMServer() as srv:
        p = _codex_project(tmp_path, srv, ", args: [--sandbox, workspace-write]")
        done = lambda wd: Reply(text=HYPOTHESIS)   # noqa: E731
        srv.responder = Script([[_patch("val.txt", "5", "3"), done]],
                               is_main=lambda b: True, workdir=lambda b: "", turns=_codex_turns)
        res = p.run(1)
    assert res.returncode == 0, res.stdout + res.stderr
    row = p.rows()[1]
    assert row["status"] == "gen_error", row
    assert "edit" in row["lesson"] and "failed" in row["lesson"], row["lesson"]
    assert git(p.repo, "show", "autoloop/t:val.txt", env=p.env).strip() == "5"


# ------------------------------------------------------------------------------ autoloop doctor

def _doctor(p: Project) -> dict[str, tuple[str, str]]:
    res = subprocess.run([PY, "-m", "autoloop", "doctor"], cwd=p.repo, env=p.env, capture_output=True,
                         text=True, timeout=300, stdin=subprocess.DEVNULL)
    lines = {}
    for line in res.stdout.splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[0] in ("ok", "warn", "FAIL"):
            lines[parts[1]] = (parts[0], parts[2])
    lines["exit"] = (str(res.returncode), res.stdout + res.stderr)
    return lines


def test_doctor_asks_real_claude_code_inside_the_sandbox(tmp_path: Path) -> None:
    exe = _need("AUTOLOOP_TEST_CLAUDE", "claude/node_modules/.bin/claude")
    p = Project(tmp_path, "generator: {kind: claude}", exe)
    with FakeLLMServer() as srv:   # the API host doctor asks through the egress proxy: loopback
        p.env["ANTHROPIC_BASE_URL"] = srv.anthropic_url
        without = _doctor(p)
        assert without["exit"][0] == "1", without["exit"][1]
        assert without["generator"][0] == "ok" and "starts inside the sandbox" in without["generator"][1]
        assert re.search(r"version \d+\.\d+\.\d+", without["generator"][1])
        assert without["auth"][0] == "FAIL" and "not logged in" in without["auth"][1]
        port = srv.anthropic_url.rsplit(":", 1)[1].split("/")[0]
        said = without["exit"][1]
        assert (f"ok    egress          the generator reaches only api.anthropic.com:443 (claude's API); "
                f"platform.claude.com:443 (claude's API); 127.0.0.1:{port} (ANTHROPIC_BASE_URL)") in said, said
        assert f"127.0.0.1:{port} (ANTHROPIC_BASE_URL) answers through the proxy" in said, said
        p.env["ANTHROPIC_API_KEY"] = KEY
        with_key = _doctor(p)
    assert with_key["exit"][0] == "0", with_key["exit"][1]
    assert with_key["auth"] == ("ok", "claude: logged in (ANTHROPIC_API_KEY)")
    assert with_key["verifier"][0] == "ok" and "score = 5" in with_key["verifier"][1]
    assert KEY not in with_key["exit"][1]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="reading config.toml needs tomllib (Python 3.11+)")
def test_doctor_asks_real_codex_which_key_its_provider_needs(tmp_path: Path) -> None:
    with FakeLLMServer() as srv:
        p = _codex_project(tmp_path, srv)
        del p.env["LOOPBACK_KEY"]
        without = _doctor(p)
        assert without["exit"][0] == "1", without["exit"][1]
        assert without["generator"][0] == "ok" and "codex-cli" in without["generator"][1]
        assert without["auth"][0] == "FAIL" and "$LOOPBACK_KEY" in without["auth"][1]
        p.env["LOOPBACK_KEY"] = KEY
        assert _doctor(p)["auth"][0] == "ok"
    assert not srv.requests      # nothing was spent finding out


def test_real_claude_code_with_a_bad_key_stops_the_run(tmp_path: Path) -> None:
    # Claude Code retries a 401 for minutes with its own defaults; the preset bounds that, and
    # the first cycle's authentication error ends the run (exit 1) instead of looping gen_error.
    exe = _need("AUTOLOOP_TEST_CLAUDE", "claude/node_modules/.bin/claude")
    p = Project(tmp_path, "generator: {kind: claude, timeout: 300}", exe)
    with FakeLLMServer() as srv:
        srv.default = Fail(401, "invalid x-api-key")
        p.env.update(ANTHROPIC_API_KEY=KEY, ANTHROPIC_BASE_URL=srv.anthropic_url)
        res = p.run(5, timeout=240)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "claude cannot authenticate (HTTP 401)" in res.stderr
    assert [r["status"] for r in p.rows()] in (["baseline"], ["baseline", "gen_error"])
    assert KEY not in res.stdout + res.stderr


def test_real_aider_with_a_bad_key_stops_the_run(tmp_path: Path) -> None:
    # aider exits 0 on an authentication error; the litellm.AuthenticationError line is the trace.
    exe = _need("AUTOLOOP_TEST_AIDER", "aider/bin/aider")
    with FakeLLMServer() as srv:
        srv.default = Fail(401, "Incorrect API key provided")
        p = Project(tmp_path, "generator: {kind: aider, model: openai/gpt-4o, timeout: 300, args: "
                              f"[--openai-api-base, '{srv.openai_url}']}}", exe)
        p.env.update(OPENAI_API_KEY=KEY, LITELLM_LOCAL_MODEL_COST_MAP="True")
        res = p.run(5, timeout=240)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "aider cannot authenticate: litellm.AuthenticationError" in res.stderr
    assert [r["status"] for r in p.rows()] in (["baseline"], ["baseline", "gen_error"])
