"""Black-box: the real generators through the installed CLI (`python -m autoloop run`).

- `anthropic` / `openai`: the real SDKs, pointed by ANTHROPIC_BASE_URL / OPENAI_BASE_URL (or by
  `generator.base_url`) at a loopback FakeLLMServer started in this process, streaming and plain
  (AUTOLOOP_LLM_STREAM=0), with a 429 before the first answer.
- `claude` / `codex` / `aider`: the fake executables of tests/fakes first on PATH, driven by the
  presets; their JSON / text reports parsed into the ledger.

Every assertion is on what the CLI leaves behind: results.tsv, experiments.md, the ledger, the run
branch, `autoloop log`, the work tree — and, for the SDKs, on what reached the server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.fake_llm_server import Fail, FakeLLMServer, Recorded, Reply, ToolCall, edit
from tests.scripts.e2e import experiments_sections, git, isolated_env, section_field

PY = sys.executable
FAKES = Path(__file__).resolve().parent / "fakes"

# Not shaped like a real key (no `sk-`): only autoloop knowing it is a secret can hide it.
KEY = "e2e-dummy-key-Q7xW3pLm9Zt2"

SCORE_PY = 'print(f"score: {open(\'val.txt\').read().strip()}")\n'
CHEAT_PY = "print('score: -1000')\n"
GOAL = "Lower the score that score.py prints"
BODY = "E2E-BODY-MARKER: lower the number in val.txt."


# ---------------------------------------------------------------------------------- the project


@dataclass
class Project:
    base: Path
    repo: Path
    env: dict[str, str]
    start: str = ""
    tag: str = "t"
    results: list[subprocess.CompletedProcess[str]] = field(default_factory=list)

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PY, "-m", "autoloop", *args], cwd=self.repo, env=self.env,
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def run(self, cycles: int) -> subprocess.CompletedProcess[str]:
        res = self.cli("run", "program.md", "--tag", self.tag, "--cycles", str(cycles))
        self.results.append(res)
        return res

    # ---- what the run wrote ----

    def rows(self) -> dict[int, dict[str, str]]:
        lines = (self.repo / "results.tsv").read_text().rstrip("\n").split("\n")
        head = lines[0].split("\t")
        return {int(r["cycle"]): r for r in (dict(zip(head, ln.split("\t"))) for ln in lines[1:])}

    def statuses(self) -> dict[int, str]:
        return {n: r["status"] for n, r in self.rows().items()}

    def ledger(self) -> list[dict[str, Any]]:
        path = self.repo / ".autoloop" / self.tag / "ledger.jsonl"
        return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]

    def cycle(self, n: int) -> dict[str, Any]:
        found = [r for r in self.ledger() if r.get("t") == "cycle" and r.get("cycle") == n]
        assert found, f"no cycle record {n} in the ledger"
        return found[-1]

    def section(self, n: int) -> str:
        found = [s for c, s in experiments_sections((self.repo / "experiments.md").read_text()) if c == n]
        assert found, f"no `## Cycle {n}` in experiments.md"
        return found[-1]

    def branch_commits(self) -> list[str]:
        out = git(self.repo, "rev-list", f"{self.start}..refs/heads/autoloop/{self.tag}", env=self.env)
        return out.split() if out else []

    def show(self, rev: str, path: str) -> bytes:
        return subprocess.run(["git", "show", f"{rev}:{path}"], cwd=self.repo, env=self.env,
                              capture_output=True, check=True).stdout

    def worktree(self) -> Path:
        out = git(self.repo, "worktree", "list", "--porcelain", env=self.env)
        paths = [Path(ln[len("worktree "):]) for ln in out.splitlines() if ln.startswith("worktree ")]
        mine = [p for p in paths if str(p).startswith(self.env["XDG_CACHE_HOME"]) and p.name == self.tag]
        assert len(mine) == 1, f"expected one autoloop worktree named {self.tag}: {paths}"
        return mine[0]

    def written_files(self) -> dict[str, bytes]:
        """Everything the run wrote next to program.md: the state folder and the journal."""
        out = {str(p): p.read_bytes() for p in (self.repo / ".autoloop").rglob("*") if p.is_file()}
        for name in ("experiments.md", "results.tsv"):
            if (self.repo / name).exists():
                out[name] = (self.repo / name).read_bytes()
        return out

    def agent_log(self) -> list[dict[str, Any]]:
        path = Path(self.env["FAKE_AGENT_LOG"])
        return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []


def program_md(generator: dict[str, Any], extra: str = "") -> str:
    lines = ["---", f"goal: {GOAL}", "allowed: [val.txt]", "verifier:", f"  command: {PY} score.py",
             "  metric: score", "  direction: minimize", "  timeout: 30", "generator:"]
    lines += [f"  {k}: {json.dumps(v)}" for k, v in generator.items()]
    lines += extra.splitlines()
    return "\n".join(lines + ["---", BODY, ""])


def make_project(base: Path, generator: dict[str, Any], extra: str = "") -> Project:
    base.mkdir(parents=True, exist_ok=True)
    env = isolated_env(base)
    repo = base / "repo"
    repo.mkdir()
    files = {"score.py": SCORE_PY, "val.txt": "40.25\n", "README.md": "# demo\n",
             "program.md": program_md(generator, extra)}
    git(repo, "init", "-q", env=env)
    for rel, text in files.items():
        (repo / rel).write_text(text)
    git(repo, "add", "-A", env=env)
    git(repo, "commit", "-q", "-m", "initial", env=env)
    return Project(base, repo, env, start=git(repo, "rev-parse", "HEAD", env=env))


def total_cost_line(p: Project) -> str:
    res = p.cli("log", "program.md", "--tag", p.tag)
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("cost")]
    assert lines, f"`autoloop log` shows no cost line:\n{res.stdout}"
    return lines[0]


# ---------------------------------------------------------------------------------- SDK helpers


def sdk_env(p: Project, srv: FakeLLMServer, *, stream: bool) -> None:
    p.env.update(ANTHROPIC_BASE_URL=srv.anthropic_url, ANTHROPIC_API_KEY=KEY,
                 OPENAI_BASE_URL=srv.openai_url, OPENAI_API_KEY=KEY,
                 AUTOLOOP_LLM_STREAM="1" if stream else "0")


def tool_results(req: Recorded, kind: str) -> dict[str, tuple[bool | None, str]]:
    """tool-call id -> (is_error or None, text) of the tool results in a request."""
    out: dict[str, tuple[bool | None, str]] = {}
    for msg in req.body.get("messages") or []:
        if kind == "anthropic" and msg.get("role") == "user" and isinstance(msg.get("content"), list):
            for block in msg["content"]:
                if block.get("type") == "tool_result":
                    content = block.get("content")
                    if isinstance(content, list):
                        content = "".join(b.get("text", "") for b in content)
                    out[block["tool_use_id"]] = (block.get("is_error"), str(content))
        elif kind == "openai" and msg.get("role") == "tool":
            out[msg["tool_call_id"]] = (None, str(msg.get("content")))
    return out


def first_result(requests: list[Recorded], kind: str, call: ToolCall) -> tuple[bool | None, str]:
    """The result of `call` in the first request that carries it (the one right after it)."""
    assert call.id, "the server never sent this tool call"
    for req in requests:
        found = tool_results(req, kind).get(call.id)
        if found is not None:
            return found
    raise AssertionError(f"no request carried a result for tool call {call.id}")


def price(tokens: list[tuple[int, int]], inp: float, out: float) -> float:
    return sum(i * inp + o * out for i, o in tokens) / 1_000_000


# ---------------------------------------------------------------------------------- SDK: a full run
#
# cycle 1: 429, then the model tries to overwrite the verifier (refused), views it (unchanged),
#          makes the good edit and ends with a hypothesis that quotes the key          -> keep
# cycle 2: 503 on every attempt, before any answer                                      -> gen_error
# cycle 3: the model only tries to edit the verifier (refused), then ends               -> no_change
# cycle 4: a worse edit, a reply without `Hypothesis:` (first sentence is used)        -> discard

PRICE_IN, PRICE_OUT = 1000.0, 5000.0
C1_TOKENS = [(101, 11), (202, 22), (303, 33), (404, 44)]
HYP1 = "H-KEEP-1 a smaller number in val.txt lowers the score"
HYP3 = "H-CHEAT-3 rewriting the judge would lower the score"
FIRST_SENTENCE_4 = "Raising val.txt to 35 should help."


@dataclass
class SdkRun:
    p: Project
    kind: str
    stream: bool
    requests: list[Recorded]
    pending: int
    calls: dict[str, ToolCall]
    cost_line: str = ""
    log_out: str = ""


SDK_MODES = [("anthropic", True), ("anthropic", False), ("openai", True), ("openai", False)]


@pytest.fixture(scope="module", params=SDK_MODES, ids=[f"{k}-{'stream' if s else 'plain'}" for k, s in SDK_MODES])
def sdk_run(request, tmp_path_factory) -> SdkRun:
    kind, stream = request.param
    p = make_project(tmp_path_factory.mktemp(f"{kind}-{stream}"),
                     {"kind": kind, "model": "e2e-test-model", "max_turns": 8, "timeout": 60,
                      "price": {"input": PRICE_IN, "output": PRICE_OUT}})
    calls = {
        "cheat1": edit("create", "score.py", file_text=CHEAT_PY),
        "view1": edit("view", "score.py"),
        "good1": edit("str_replace", "val.txt", old_str="40.25", new_str="31.5"),
        "cheat3": edit("str_replace", "score.py", old_str="score: ", new_str="score: -"),
        "worse4": edit("str_replace", "val.txt", old_str="31.5", new_str="35"),
    }
    with FakeLLMServer() as srv:
        sdk_env(p, srv, stream=stream)
        (i1, o1), (i2, o2), (i3, o3), (i4, o4) = C1_TOKENS
        srv.queue(
            Fail(429, "rate limited, slow down"),
            Reply(tool_calls=[calls["cheat1"]], input_tokens=i1, output_tokens=o1),
            Reply(tool_calls=[calls["view1"]], input_tokens=i2, output_tokens=o2),
            Reply(tool_calls=[calls["good1"]], input_tokens=i3, output_tokens=o3),
            Reply(text=f"I lowered val.txt.\nHypothesis: {HYP1} (auth {KEY})", input_tokens=i4, output_tokens=o4),
            Fail(503), Fail(503), Fail(503),
            Reply(tool_calls=[calls["cheat3"]]),
            Reply(text=f"Hypothesis: {HYP3}"),
            Reply(tool_calls=[calls["worse4"]]),
            Reply(text=f"{FIRST_SENTENCE_4} Then the score drops."),
        )
        p.run(4)
        run = SdkRun(p, kind, stream, list(srv.requests), srv.pending, calls)
    run.cost_line = total_cost_line(p)
    run.log_out = p.cli("log", "program.md", "--tag", p.tag).stdout
    return run


def test_sdk_run_exits_zero(sdk_run):
    res = sdk_run.p.results[0]
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr + res.stdout


def test_sdk_statuses(sdk_run):
    assert sdk_run.p.statuses() == {0: "baseline", 1: "keep", 2: "gen_error", 3: "no_change", 4: "discard"}


def test_sdk_good_edit_is_the_one_commit_on_the_run_branch(sdk_run):
    p = sdk_run.p
    commits = p.branch_commits()
    assert len(commits) == 1, commits
    assert p.show(commits[0], "val.txt") == b"31.5\n"
    assert commits[0].startswith(p.rows()[1]["commit"])


def test_sdk_kept_commit_changes_only_the_edited_file(sdk_run):
    p = sdk_run.p
    (commit,) = p.branch_commits()
    changed = git(p.repo, "diff", "--name-only", p.start, commit, env=p.env).split()
    assert changed == ["val.txt"]


def test_sdk_429_before_first_answer_is_retried_transparently(sdk_run):
    reqs = sdk_run.requests
    # the same request twice (429, then the retry that got the first answer), nothing else lost
    assert reqs[0].body == reqs[1].body
    assert sdk_run.pending == 0
    assert sdk_run.p.statuses()[1] == "keep"
    rec = sdk_run.p.cycle(1)
    said = json.dumps([rec["result"], rec["lesson"], rec["gen"]["notes"]]).lower()
    assert "429" not in said and "rate limit" not in said, said


def test_sdk_requests_use_the_wire_path_and_mode(sdk_run):
    want_path = "/v1/messages" if sdk_run.kind == "anthropic" else "/v1/chat/completions"
    assert {r.path for r in sdk_run.requests} == {want_path}
    assert {bool(r.body.get("stream")) for r in sdk_run.requests} == {sdk_run.stream}


def test_sdk_api_key_from_the_standard_env_var_reaches_the_server(sdk_run):
    for r in sdk_run.requests:
        # the SDK chooses the header (x-api-key, or a bearer token); either way it is our key
        sent = {r.headers.get("x-api-key"), r.headers.get("authorization")}
        assert KEY in sent or f"Bearer {KEY}" in sent, r.headers


def test_sdk_edit_tool_is_offered_by_its_standard_name(sdk_run):
    tools = sdk_run.requests[1].body.get("tools") or []
    if sdk_run.kind == "anthropic":
        assert any(t.get("name") == "str_replace_based_edit_tool" and str(t.get("type", "")).startswith("text_editor")
                   for t in tools), tools
    else:
        assert any(t.get("type") == "function" and t["function"]["name"] == "str_replace_based_edit_tool"
                   for t in tools), tools


def test_sdk_verifier_edit_comes_back_as_a_tool_error(sdk_run):
    is_error, text = first_result(sdk_run.requests, sdk_run.kind, sdk_run.calls["cheat1"])
    if sdk_run.kind == "anthropic":
        assert is_error is True, text
    assert "error" in text.lower() and "score.py" in text, text


def test_sdk_refused_edit_never_reached_the_disk_mid_cycle(sdk_run):
    # the model views the verifier right after the refusal: the file is still the original
    is_error, text = first_result(sdk_run.requests, sdk_run.kind, sdk_run.calls["view1"])
    assert is_error is not True
    assert "open('val.txt')" in text and "-1000" not in text, text


def test_sdk_cycle_is_judged_on_what_reached_the_disk(sdk_run):
    # cycle 1 tried the verifier and edited val.txt: kept, not a violation; cycle 3 only tried the
    # verifier: nothing reached the disk, so no change (not a violation either)
    p = sdk_run.p
    assert p.cycle(1)["changed"] == ["val.txt"]
    assert (p.statuses()[3], p.cycle(3)["changed"]) == ("no_change", [])


def test_sdk_verifier_is_byte_identical_everywhere(sdk_run):
    p = sdk_run.p
    assert (p.repo / "score.py").read_text() == SCORE_PY
    assert (p.worktree() / "score.py").read_text() == SCORE_PY
    (commit,) = p.branch_commits()
    assert p.show(commit, "score.py") == SCORE_PY.encode()


def test_sdk_hypothesis_in_results_tsv(sdk_run):
    assert sdk_run.p.rows()[1]["description"].startswith(HYP1)


def test_sdk_hypothesis_in_experiments_md(sdk_run):
    found = section_field(sdk_run.p.section(1), "Hypothesis")
    assert found is not None and HYP1 in found, sdk_run.p.section(1)


def test_sdk_hypothesis_of_a_refused_only_cycle(sdk_run):
    assert sdk_run.p.rows()[3]["description"] == HYP3


def test_sdk_hypothesis_falls_back_to_the_first_sentence(sdk_run):
    assert sdk_run.p.rows()[4]["description"] == FIRST_SENTENCE_4


def kept_message(p: Project) -> str:
    (commit,) = p.branch_commits()
    return git(p.repo, "log", "-1", "--format=%B", commit, env=p.env)


def test_sdk_kept_commit_message_names_the_hypothesis(sdk_run):
    assert HYP1 in kept_message(sdk_run.p)


def test_sdk_api_key_not_in_the_commit_message(sdk_run):
    # the model quoted the key in its hypothesis
    assert KEY not in kept_message(sdk_run.p)


def test_sdk_cost_recorded_in_the_ledger(sdk_run):
    gen = sdk_run.p.cycle(1)["gen"]
    assert gen["tokens_in"] == sum(i for i, _ in C1_TOKENS)
    assert gen["tokens_out"] == sum(o for _, o in C1_TOKENS)
    assert gen["turns"] == 4
    assert gen["cost_usd"] == pytest.approx(price(C1_TOKENS, PRICE_IN, PRICE_OUT))


def test_sdk_cost_of_every_answered_cycle_is_recorded(sdk_run):
    for n in (3, 4):
        gen = sdk_run.p.cycle(n)["gen"]
        assert (gen["tokens_in"], gen["tokens_out"], gen["turns"]) == (200, 40, 2), (n, gen)
        assert gen["cost_usd"] == pytest.approx(price([(100, 20)] * 2, PRICE_IN, PRICE_OUT))


def test_sdk_log_shows_total_cost(sdk_run):
    total = (price(C1_TOKENS, PRICE_IN, PRICE_OUT) + 2 * price([(100, 20)] * 2, PRICE_IN, PRICE_OUT))
    assert f"${total:.2f}" in sdk_run.cost_line, sdk_run.cost_line


def test_sdk_log_shows_cost_per_kept_change(sdk_run):
    total = (price(C1_TOKENS, PRICE_IN, PRICE_OUT) + 2 * price([(100, 20)] * 2, PRICE_IN, PRICE_OUT))
    assert f"${total:.2f} per kept change" in sdk_run.cost_line, sdk_run.cost_line


def test_sdk_log_shows_cost_per_unit_of_metric_gained(sdk_run):
    total = (price(C1_TOKENS, PRICE_IN, PRICE_OUT) + 2 * price([(100, 20)] * 2, PRICE_IN, PRICE_OUT))
    per_unit = f"${total / (40.25 - 31.5):.2f}"
    assert any(per_unit in ln and "per" in ln for ln in sdk_run.log_out.splitlines()), sdk_run.log_out


def test_sdk_transient_failure_is_gen_error_and_the_loop_goes_on(sdk_run):
    p = sdk_run.p
    rec = p.cycle(2)
    assert rec["status"] == "gen_error"
    assert "503" in rec["lesson"], rec["lesson"]
    assert p.statuses()[3] == "no_change" and p.statuses()[4] == "discard"


def test_sdk_transcript_is_saved_for_each_answered_cycle(sdk_run):
    logs = sdk_run.p.repo / ".autoloop" / sdk_run.p.tag / "logs"
    for n in (1, 3, 4):
        transcript = logs / f"cycle-{n:04d}" / "transcript.jsonl"
        assert transcript.is_file() and transcript.stat().st_size > 0, transcript


def test_sdk_api_key_never_written(sdk_run):
    written = sdk_run.p.written_files()
    assert any("transcript" in name for name in written)    # the files that could leak exist
    leaks = [name for name, data in written.items() if KEY.encode() in data]
    assert not leaks, leaks


# ---------------------------------------------------------------------------------- SDK: 401


KINDS = ["anthropic", "openai"]


@pytest.fixture(scope="module", params=KINDS)
def auth_run(request, tmp_path_factory):
    kind = request.param
    p = make_project(tmp_path_factory.mktemp(f"{kind}-401"), {"kind": kind, "model": "e2e-test-model"})
    with FakeLLMServer() as srv:
        sdk_env(p, srv, stream=True)
        # an edit reaches the disk, then the key is refused mid-cycle
        srv.queue(Reply(tool_calls=[edit("str_replace", "val.txt", old_str="40.25", new_str="12")]),
                  Fail(401, f"invalid x-api-key {KEY}"))
        srv.default = Reply(text="Hypothesis: should never be asked")
        p.run(3)
        requests = list(srv.requests)
    return p, kind, requests


def test_401_stops_the_run_with_exit_1(auth_run):
    p, _, _ = auth_run
    assert p.results[0].returncode == 1, p.results[0].stderr


def test_401_message_is_clear(auth_run):
    p, kind, _ = auth_run
    err = p.results[0].stderr
    assert "401" in err and f"{kind.upper()}_API_KEY" in err, err
    assert "Traceback" not in err


def test_401_stops_at_once(auth_run):
    _, _, requests = auth_run
    assert len(requests) == 2      # no retry of a refused key, no further cycle


def test_401_restores_the_work_tree(auth_run):
    p, _, _ = auth_run
    wt = p.worktree()
    assert (wt / "val.txt").read_text() == "40.25\n"
    assert git(wt, "status", "--porcelain", env=p.env) == ""


def test_401_leaves_the_checkout_and_branch_alone(auth_run):
    p, _, _ = auth_run
    assert git(p.repo, "status", "--porcelain", env=p.env) == ""
    assert git(p.repo, "rev-parse", "HEAD", env=p.env) == p.start
    assert p.branch_commits() == []


def test_401_api_key_never_written_or_printed(auth_run):
    p, _, _ = auth_run
    assert KEY not in p.results[0].stderr + p.results[0].stdout
    leaks = [name for name, data in p.written_files().items() if KEY.encode() in data]
    assert not leaks, leaks


# ---------------------------------------------------------------------------------- SDK: base_url


# The shipped price table (USD per million tokens, in, out), for the models used below.
TABLE = {"anthropic": ("claude-haiku-4-5", 1.0, 5.0), "openai": ("gpt-4o-mini", 0.15, 0.60)}


@pytest.fixture(scope="module", params=KINDS)
def base_url_run(request, tmp_path_factory):
    kind = request.param
    model = TABLE[kind][0]
    with FakeLLMServer() as srv, FakeLLMServer() as decoy:
        url = srv.anthropic_url if kind == "anthropic" else srv.openai_url
        p = make_project(tmp_path_factory.mktemp(f"{kind}-base-url"),
                         {"kind": kind, "model": model, "base_url": url})
        sdk_env(p, decoy, stream=kind == "anthropic")       # the env var points elsewhere
        decoy.default = Fail(500, "the env var's server must not be used")
        srv.queue(Reply(tool_calls=[edit("str_replace", "val.txt", old_str="40.25", new_str="30")],
                        input_tokens=1000, output_tokens=200),
                  Reply(text="Hypothesis: H-BASE-URL", input_tokens=1000, output_tokens=100),
                  # cycle 2: one answered turn (spent), then the server keeps failing
                  Reply(tool_calls=[edit("str_replace", "val.txt", old_str="30", new_str="20")],
                        input_tokens=3000, output_tokens=300),
                  Fail(503), Fail(503), Fail(503))
        p.run(2)
        requests, decoy_requests = list(srv.requests), list(decoy.requests)
    return p, kind, requests, decoy_requests


def test_base_url_overrides_the_env_var(base_url_run):
    p, _, requests, decoy_requests = base_url_run
    assert decoy_requests == []
    assert len(requests) == 6
    assert p.statuses()[1] == "keep", p.results[0].stderr


def test_cost_from_the_shipped_price_table(base_url_run):
    p, kind, _, _ = base_url_run
    _, pin, pout = TABLE[kind]
    gen = p.cycle(1)["gen"]
    assert gen["cost_usd"] == pytest.approx(price([(1000, 200), (1000, 100)], pin, pout))


def test_failure_after_an_answered_turn_is_gen_error_and_reverted(base_url_run):
    p, _, _, _ = base_url_run
    assert p.statuses()[2] == "gen_error"
    (commit,) = p.branch_commits()
    assert p.show(commit, "val.txt") == b"30\n"
    assert (p.worktree() / "val.txt").read_text() == "30\n"


def test_gen_error_cycle_still_records_what_it_spent(base_url_run):
    p, kind, _, _ = base_url_run
    _, pin, pout = TABLE[kind]
    rec = p.cycle(2)
    assert rec["status"] == "gen_error"
    assert (rec["gen"]["tokens_in"], rec["gen"]["tokens_out"], rec["gen"]["turns"]) == (3000, 300, 1)
    assert rec["gen"]["cost_usd"] == pytest.approx(price([(3000, 300)], pin, pout))


# ---------------------------------------------------------------------------------- agent CLIs
#
# First invocation: the tool reports an error every cycle (2 cycles: gen_error, and the loop goes
# on). Second invocation (a resume): the tool edits val.txt and reports success -> keep.

AGENT_REPLY = {
    "claude": "I lowered val.txt.\nHypothesis: H-CLAUDE lowering val.txt lowers the score.",
    "codex": "Edited val.txt.\nHypothesis: H-CODEX a smaller val.txt gives a smaller score.",
    "aider": "Hypothesis: H-AIDER val.txt drives the score, so lower it.",
}
AGENT_MODEL = {"claude": "claude-haiku-4-5", "codex": "gpt-5-codex", "aider": "sonnet"}
CODEX_PRICE = (2.0, 8.0)
AGENTS = ["claude", "codex", "aider"]


def agent_project(base: Path, tool: str, **extra: Any) -> Project:
    gen: dict[str, Any] = {"kind": tool, "model": AGENT_MODEL[tool], "timeout": 60, **extra}
    if tool == "codex":
        gen["price"] = {"input": CODEX_PRICE[0], "output": CODEX_PRICE[1]}
    # the fake agents record each call outside the work tree: the one folder the (default)
    # sandbox lets them write besides it
    (base / "agent").mkdir(parents=True, exist_ok=True)
    p = make_project(base, gen, extra=f"sandbox:\n  writable: [{base / 'agent'}]")
    p.env.update(PATH=f"{FAKES}{os.pathsep}{p.env.get('PATH', os.defpath)}",
                 FAKE_AGENT_LOG=str(base / "agent" / "agent-log.jsonl"),
                 FAKE_AGENT_EDIT=json.dumps({"val.txt": "29.5\n"}),
                 FAKE_AGENT_REPLY=AGENT_REPLY[tool])
    return p


@pytest.fixture(scope="module", params=AGENTS)
def agent_run(request, tmp_path_factory):
    tool = request.param
    p = agent_project(tmp_path_factory.mktemp(tool), tool)
    p.env["FAKE_AGENT_MODE"] = "error"
    p.run(2)
    p.env["FAKE_AGENT_MODE"] = "ok"
    p.run(1)
    return p, tool


def test_agent_runs_exit_zero(agent_run):
    p, _ = agent_run
    for res in p.results:
        assert res.returncode == 0, res.stderr
        assert "Traceback" not in res.stderr


def test_agent_error_report_is_gen_error_and_the_loop_goes_on(agent_run):
    p, _ = agent_run
    assert p.statuses() == {0: "baseline", 1: "gen_error", 2: "gen_error", 3: "keep"}


def test_agent_error_report_is_parsed_into_the_lesson(agent_run):
    p, tool = agent_run
    words = {"claude": "529 Overloaded", "codex": "503 Service Unavailable", "aider": "APIConnectionError"}
    assert words[tool] in p.cycle(1)["lesson"], p.cycle(1)["lesson"]


def test_agent_was_run_once_per_cycle(agent_run):
    p, tool = agent_run
    assert [r["tool"] for r in p.agent_log()] == [tool] * 3


def test_agent_driven_with_the_right_flags(agent_run):
    p, tool = agent_run
    argv = p.agent_log()[-1]["argv"]
    model = AGENT_MODEL[tool]

    def has(*words: str) -> bool:
        return any(argv[i:i + len(words)] == list(words) for i in range(len(argv)))

    if tool == "claude":
        assert has("-p") or has("--print"), argv
        assert has("--output-format", "json"), argv
        assert has("--permission-mode", "acceptEdits"), argv
        assert has("--model", model), argv
    elif tool == "codex":
        assert argv[0] == "exec", argv
        assert has("--json"), argv
        # inside autoloop's sandbox (the default where bubblewrap works) codex's own is off:
        # it cannot start there; unsandboxed, codex keeps its own
        from tests.isolation.test_sandbox import PROBLEM
        assert has("--sandbox", "workspace-write" if PROBLEM else "danger-full-access"), argv
        assert has("--skip-git-repo-check"), argv
        assert has("--model", model) or has("-m", model), argv
        assert argv[-1] == "-", argv          # the prompt comes from stdin
    else:
        assert has("--message-file") or has("-f"), argv
        assert has("--yes-always"), argv
        assert has("--no-auto-commits"), argv
        assert has("--no-dirty-commits") or has("--no-git"), argv
        assert has("--model", model), argv
        assert any(os.path.normpath(a) == "val.txt" for a in argv), argv   # the editable file is in the chat


def test_agent_receives_the_prompt(agent_run):
    p, tool = agent_run
    rec = p.agent_log()[-1]
    prompt = rec["message"] if tool == "aider" else rec["stdin"]
    assert prompt and GOAL in prompt and BODY in prompt, prompt


def test_agent_runs_in_the_work_tree_not_the_checkout(agent_run):
    p, _ = agent_run
    cwds = {os.path.realpath(r["cwd"]) for r in p.agent_log()}
    assert cwds == {os.path.realpath(p.worktree())}


def test_agent_good_edit_is_kept_on_the_run_branch(agent_run):
    p, _ = agent_run
    commits = p.branch_commits()
    assert len(commits) == 1, commits
    assert p.show(commits[0], "val.txt") == b"29.5\n"
    assert git(p.repo, "diff", "--name-only", p.start, commits[0], env=p.env).split() == ["val.txt"]


def test_agent_hypothesis_parsed_from_its_report(agent_run):
    p, tool = agent_run
    want = AGENT_REPLY[tool].split("Hypothesis: ", 1)[1]
    assert p.rows()[3]["description"] == want
    found = section_field(p.section(3), "Hypothesis")
    assert found is not None and want in found


AGENT_USAGE = {
    # claude: input + cache creation + cache read; its own total_cost_usd; num_turns
    "claude": (1200 + 3000 + 20000, 850, 4, 0.0421),
    # codex: turn.completed usage, priced by generator.price; one completed turn
    "codex": (24763, 122, 1, (24763 * CODEX_PRICE[0] + 122 * CODEX_PRICE[1]) / 1e6),
    # aider: both `Tokens:` lines (2.3k + 12k sent, 456 + 1,024 received); the last session cost
    "aider": (2300 + 12000, 456 + 1024, 2, 0.05),
}


def test_agent_usage_parsed_into_the_ledger(agent_run):
    p, tool = agent_run
    gen = p.cycle(3)["gen"]
    tin, tout, turns, cost = AGENT_USAGE[tool]
    assert (gen["tokens_in"], gen["tokens_out"], gen["turns"]) == (tin, tout, turns), gen
    assert gen["cost_usd"] == pytest.approx(cost)


@pytest.mark.parametrize("agent_run", ["claude"], indirect=True)
def test_claude_failed_run_cost_is_still_recorded(agent_run):
    p, _ = agent_run
    # only claude's error report says what the failed run cost
    gen = p.cycle(1)["gen"]
    assert gen["cost_usd"] == pytest.approx(0.0105) and gen["turns"] == 2, gen


def test_agent_log_shows_total_cost(agent_run):
    p, tool = agent_run
    total = sum(p.cycle(n)["gen"].get("cost_usd") or 0 for n in (1, 2, 3))
    assert total > 0
    assert f"${total:.2f}" in total_cost_line(p)


@pytest.mark.parametrize("agent_run", ["aider"], indirect=True)
def test_aider_leaves_no_files_of_its_own(agent_run):
    p, _ = agent_run
    wt = p.worktree()
    assert not list(wt.glob(".aider*")) and not list(p.repo.glob(".aider*"))
    assert not (wt / ".gitignore").exists()
    logs = p.repo / ".autoloop" / p.tag / "logs" / "cycle-0003"
    assert list(logs.glob("aider*")), "aider's history files should land in the cycle's log folder"


@pytest.mark.parametrize("tool", AGENTS)
def test_agent_auth_failure_stops_the_run(tool, tmp_path):
    p = agent_project(tmp_path / tool, tool)
    p.env["FAKE_AGENT_MODE"] = "auth"
    res = p.run(3)
    assert res.returncode == 1, (res.returncode, res.stderr)
    assert tool in res.stderr and "authenticate" in res.stderr, res.stderr
    assert len(p.agent_log()) == 1        # stopped at once, not once per cycle
