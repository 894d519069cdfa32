"""Real bwrap, through `autoloop run`: a scripted `generator: command` with the network on finds
no credential of autoloop's own environment (a cloud key, a code host's token, a CI job's OIDC
request token) in its environment or any /proc/*/environ it can read — only the model's key."""

from __future__ import annotations

import json
import shutil

import pytest

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")

SECRETS = {"AWS_SECRET_ACCESS_KEY": "decoy-aws-4f1c", "AWS_SESSION_TOKEN": "decoy-sts-9a2b",
           "GITHUB_TOKEN": "decoy-gh-77e1", "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "decoy-oidc-1d3f",
           "HF_TOKEN": "decoy-hf-5c5c", "PGPASSWORD": "decoy-pg-0b0b"}
MODEL = {"ANTHROPIC_API_KEY": "model-key-8e8e", "OPENAI_API_KEY": "model-key-2a2a"}

PLAN = '''
import json
seen = {{k: v for k, v in os.environ.items() if v.startswith(("decoy-", "model-key-"))}}
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    try:
        raw = open(f"/proc/{{pid}}/environ", "rb").read().decode(errors="replace")
    except OSError:
        continue
    for item in raw.split("\\0"):
        k, _, v = item.partition("=")
        if v.startswith(("decoy-", "model-key-")):
            seen[k] = v
(OUT / "gen" / "env.json").write_text(json.dumps(seen))
W("val.txt", "30")
hyp("read the environment")
'''


def test_a_networked_generator_gets_the_model_key_and_no_other_credential(tmp_path):
    from tests.scripts.e2e import make_project

    gen = tmp_path / "out" / "gen"
    gen.mkdir(parents=True)
    p = make_project(tmp_path, {}, records_in=gen,
                     extra=f"sandbox: {{kind: bwrap, network: true, writable: [{gen}]}}")
    p.set_plan({1: PLAN.format()})
    p.env.update(SECRETS)
    p.env.update(MODEL)
    res = p.run("--cycles", "1")
    assert res.returncode == 0, res.stderr
    assert [r["status"] for r in p.rows()] == ["baseline", "keep"]
    seen = json.loads((gen / "env.json").read_text())
    assert seen == MODEL      # the model's keys pass (the agent needs them), nothing else


# The measured code (here the verifier itself, as a candidate's module it imports would) dumps
# what it finds; its output reaches the next prompt, and redaction cannot stop an encoded value.
DUMP_SCORE = '''\
import json, os
found = {{k: v for k, v in os.environ.items() if v.startswith(("decoy-", "model-key-"))}}
open({out!r} + "/measured-" + str(os.getpid()) + ".json", "w").write(json.dumps(found))
print("score: " + open("val.txt").read().strip())
'''


@pytest.mark.parametrize("network", [False, True])
def test_a_measurement_without_the_network_gets_no_credential(tmp_path, network):
    """No network: a credential is of no use to the measurement, only a way to the agent. With
    `verifier.network: true` (a gated download) the measurement keeps your environment."""
    from tests.scripts.e2e import git, make_project

    out = tmp_path / "out" / "meas"
    out.mkdir(parents=True)
    p = make_project(tmp_path, {1: 'W("val.txt", "30")\nhyp("x")'}, files={"score.py": DUMP_SCORE.format(out=str(out))},
                     extra=f"sandbox: {{kind: bwrap, writable: [{out}, {tmp_path / 'records'}]}}")
    if network:
        text = (p.repo / "program.md").read_text().replace("verifier:\n", "verifier:\n  network: true\n", 1)
        (p.repo / "program.md").write_text(text)
        git(p.repo, "commit", "-qam", "the verifier has the network", env=p.env)
    p.env.update(SECRETS)
    p.env.update(MODEL)
    res = p.run("--cycles", "1")
    assert res.returncode == 0, res.stderr
    dumps = [json.loads(f.read_text()) for f in out.glob("measured-*.json")]
    assert len(dumps) >= 2      # the baseline and the cycle: the test can fail
    assert all(d == ({**SECRETS, **MODEL} if network else MODEL) for d in dumps), dumps
