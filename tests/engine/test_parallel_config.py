"""`parallel:` in program.md: bad values are refused before anything changes (exit 2, one line
`program.md:LINE: ...` naming the key); the parts of parallel rounds that are plain functions."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from autoloop.journal.ledger import Journal
from autoloop.program.reader import parse_program
from autoloop.git.workspace import Workspace
from tests.scripts.e2e import PY, error_lines, git, make_project, repo_state

HEAD = """\
---
goal: Lower the score
allowed: [val.txt]
verifier:
  command: {py} score.py
  metric: score
  direction: minimize
generator:
  kind: command
  command: "true"
"""

# (id, the parallel block (starts on line 11), expected line, words the message must contain)
BAD = [
    ("workers-zero", "parallel: {workers: 0}", 11, ["parallel.workers", "1 to 64"]),
    ("workers-too-many", "parallel:\n  workers: 65", 12, ["parallel.workers", "65"]),
    ("workers-text", "parallel:\n  workers: four", 12, ["parallel.workers", "'four'"]),
    ("workers-bool", "parallel:\n  workers: yes", 12, ["parallel.workers", "true"]),
    ("verify-zero", "parallel:\n  workers: 2\n  verify: 0", 13, ["parallel.verify"]),
    ("verify-above-workers", "parallel:\n  workers: 2\n  verify: 3", 13, ["parallel.verify", "more than"]),
    ("executor-typo", "parallel:\n  executor: rey", 12, ["parallel.executor", "did you mean 'ray'"]),
    ("address-without-ray", "parallel:\n  workers: 2\n  address: auto", 13, ["parallel.address", "executor: ray"]),
    ("gpus-without-ray", "parallel:\n  num_gpus: 1", 12, ["parallel.num_gpus", "executor: ray"]),
    ("gpus-negative", "parallel:\n  executor: ray\n  num_gpus: -1", 13, ["parallel.num_gpus"]),
    ("accelerator-without-ray", "parallel:\n  accelerator_type: A100", 12,
     ["parallel.accelerator_type", "executor: ray"]),
    ("resources-not-mapping", "parallel:\n  executor: ray\n  resources: bench", 13, ["parallel.resources", "mapping"]),
    ("resources-builtin", "parallel:\n  executor: ray\n  resources: {CPU: 2}", 13,
     ["parallel.resources.CPU", "num_cpus"]),
    ("resources-zero", "parallel:\n  executor: ray\n  resources:\n    bench: 0", 14, ["parallel.resources.bench", "> 0"]),
    ("unknown-key", "parallel:\n  wrokers: 2", 12, ["parallel.wrokers", "did you mean 'parallel.workers'"]),
    ("not-a-mapping", "parallel: 4", 11, ["parallel", "mapping"]),
    ("env-not-a-list", "parallel:\n  env: {CUDA_VISIBLE_DEVICES: 0}", 12, ["parallel.env", "list"]),
    ("env-empty", "parallel:\n  env: []", 12, ["parallel.env"]),
    ("env-item-not-mapping", "parallel:\n  env:\n    - CUDA_VISIBLE_DEVICES=0", 13, ["parallel.env[0]"]),
    ("env-bad-name", "parallel:\n  env:\n    - {CUDA-DEVICES: 0}", 13, ["parallel.env[0].CUDA-DEVICES"]),
    ("env-reserved-name", "parallel:\n  env:\n    - {A: 1}\n    - {AUTOLOOP_CYCLE: 1}", 14,
     ["parallel.env[1].AUTOLOOP_CYCLE", "set by autoloop"]),
    ("env-scrubbed-name", "parallel:\n  env:\n    - {LD_PRELOAD: /x.so}", 13,
     ["parallel.env[0].LD_PRELOAD", "removed from every verification"]),
    ("env-bad-value", "parallel:\n  env:\n    - {A: [1, 2]}", 13, ["parallel.env[0].A", "string or a number"]),
    ("env-more-than-workers", "parallel:\n  workers: 2\n  env: [{A: 1}, {A: 2}, {A: 3}]", 13,
     ["parallel.env", "3 entries for 2 workers"]),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_parallel_is_refused(tmp_path, case):
    _, block, line, words = case
    text = HEAD.format(py=PY) + block + "\n---\nBody.\n"
    p = make_project(tmp_path, {}, files={"program.md": text})
    before = repo_state(p.repo, p.env)
    res = p.run("--cycles", "1")
    assert res.returncode == 2, res.stderr
    lines = error_lines(res.stderr)
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith(f"program.md:{line}: "), lines[0]
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert repo_state(p.repo, p.env) == before


def test_ray_not_installed_is_refused(tmp_path):
    """With `executor: ray` and no usable ray, the run stops before anything changes."""
    shadow = tmp_path / "shadow"
    (shadow / "ray").mkdir(parents=True)
    (shadow / "ray" / "__init__.py").write_text("raise ImportError('No module named ray (test shadow)')\n")
    text = HEAD.format(py=PY) + "parallel:\n  workers: 2\n  executor: ray\n---\nBody.\n"
    p = make_project(tmp_path / "p", {}, files={"program.md": text})
    p.env["PYTHONPATH"] = f"{shadow}:{p.env['PYTHONPATH']}"
    before = repo_state(p.repo, p.env)
    res = p.run("--cycles", "1")
    assert res.returncode == 2, res.stderr
    lines = error_lines(res.stderr)
    assert len(lines) == 1 and lines[0].startswith("program.md:13: parallel.executor: ray is not installed"), lines
    assert "autoloop-ratchet[ray]" in lines[0]
    assert repo_state(p.repo, p.env) == before


def test_valid_parallel_values() -> None:
    text = HEAD.format(py=PY) + ("parallel:\n  workers: 3\n  verify: 2\n  env:\n    - {CUDA_VISIBLE_DEVICES: 0}\n"
                                 "    - {CUDA_VISIBLE_DEVICES: \"1\", OMP_NUM_THREADS: 4}\n---\n")
    par = parse_program(text, Path("/r/program.md"), Path("/r")).parallel
    assert (par.workers, par.verify, par.executor) == (3, 2, "local")
    assert [dict(par.worker_env(i)) for i in range(3)] == [
        {"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "1", "OMP_NUM_THREADS": "4"},
        {"CUDA_VISIBLE_DEVICES": "0"}]
    assert par.verify_slots(3) == 2 and par.verify_slots(1) == 1


def test_default_is_one_worker() -> None:
    par = parse_program(HEAD.format(py=PY) + "---\n", Path("/r/program.md"), Path("/r")).parallel
    assert (par.workers, par.verify, par.executor, par.env) == (1, None, "local", ())
    assert par.verify_slots(4) == 4


# ---- the ledger: several unfinished cycles ---------------------------------------------------


def _journal(tmp_path: Path, records: list[dict]) -> Journal:
    j = Journal(tmp_path, "t")
    j.dir.mkdir(parents=True)
    j.ledger.write_text("".join(json.dumps(r) + "\n" for r in records))
    j.load()
    return j


def test_unfinished_lists_every_open_cycle_intent_first(tmp_path):
    j = _journal(tmp_path, [
        {"t": "begin", "cycle": 5}, {"t": "begin", "cycle": 6}, {"t": "begin", "cycle": 7},
        {"t": "begin", "cycle": 8}, {"t": "cycle", "cycle": 5}, {"t": "intent", "cycle": 7, "commit": "c"},
    ])
    assert [b["cycle"] for b in j.unfinished()] == [7, 6, 8]


def test_unfinished_single_worker_is_the_pending_cycle(tmp_path):
    j = _journal(tmp_path, [{"t": "begin", "cycle": 1}, {"t": "cycle", "cycle": 1},
                            {"t": "begin", "cycle": 2}, {"t": "abort", "cycle": 2},
                            {"t": "begin", "cycle": 2}])
    assert [b["cycle"] for b in j.unfinished()] == [2]


# ---- the candidate as shipped to a remote verifier ----------------------------------------------


def test_archive_is_the_commit_exactly(make_repo, tmp_path):
    repo = make_repo({"a.txt": "A\n", "sub/b.bin": "", ".gitattributes": "a.txt export-ignore\n"
                      "run.sh export-subst\n", "run.sh": "echo $Format:%H$\n"})
    (repo / "sub" / "b.bin").write_bytes(bytes(range(256)) * 3)
    (repo / "run.sh").chmod(0o755)
    (repo / "link").symlink_to("a.txt")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "more"], cwd=repo, check=True)
    head = git(repo, "rev-parse", "HEAD")
    data = Workspace(repo, "t").archive(head)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert set(members) == {"a.txt", "sub/b.bin", ".gitattributes", "run.sh", "link"}
        assert tar.extractfile("a.txt").read() == b"A\n"              # export-ignore does not apply
        assert tar.extractfile("run.sh").read() == b"echo $Format:%H$\n"  # nor export-subst
        assert tar.extractfile("sub/b.bin").read() == bytes(range(256)) * 3
        assert members["run.sh"].mode == 0o755 and members["a.txt"].mode == 0o644
        assert members["link"].issym() and members["link"].linkname == "a.txt"
