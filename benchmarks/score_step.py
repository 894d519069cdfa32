"""The cost of `verifier.score`: the extra process a measurement runs, side by side with the
same command run as a plain sandboxed measurement step.

A fresh repository; the score is `python -c pass` (an interpreter start, nothing more). Reported,
as medians over --runs: `step` — `python -c pass` run as a measurement's command in its sandbox
(the cost any step has); `score` — the same command run as the score step (fresh scrubbed
environment and temp folders, the start commit's tree read-only, $AUTOLOOP_OUTPUT and `private`
bound); `first` — the first score call, which also makes the start commit's tree once
(a run does this before its baseline). The score step adds `score` to every measurement.

    python benchmarks/score_step.py [--runs 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autoloop.process import envs
from autoloop.process import proc
from autoloop.program.reader import parse_program
from autoloop.isolation.sandbox import probed, tree_box
from autoloop.engine.score import Scorer
from autoloop.git.workspace import Worktree

PROGRAM = ("---\ngoal: g\nallowed: [model.py]\nverifier:\n  command: {py} -c pass\n"
           "  score: {py} -c pass\n  metric: acc\n  direction: maximize\nprivate: [{private}]\n---\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        repo, private = tmp / "repo", tmp / "private"
        repo.mkdir()
        private.mkdir()
        text = PROGRAM.format(py=sys.executable, private=private)
        (repo / "program.md").write_text(text)
        (repo / "model.py").write_text("x = 1\n")
        genv = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
                "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@b", "GIT_COMMITTER_NAME": "b",
                "GIT_COMMITTER_EMAIL": "b@b"}
        for a in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "start"]):
            subprocess.run(["git", *a], cwd=repo, env=genv, check=True)
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                              check=True).stdout.strip()
        program = parse_program(text, repo / "program.md", repo)
        bwrap, why = probed(program)
        if bwrap is None:
            raise SystemExit(f"no sandbox here: {why}")
        measured = Worktree(repo, repo / ".git", tmp / "measured")
        measured.open(head)
        scorer = Scorer(program, Worktree(repo, repo / ".git", tmp / "score"), head, bwrap, tmp / "score-scratch")
        step, score = [], []
        first = None
        for i in range(args.runs):
            with envs.measurement_env(os.environ, parent=tmp / "scratch") as env:
                out = Path(env["TMPDIR"]).parent / "output"
                out.mkdir()
                box = tree_box(bwrap, program, measured.path, repo / ".git", Path(env["TMPDIR"]).parent)
                t0 = time.perf_counter()
                res = proc.run(box.argv(f"{sys.executable} -c pass"), cwd=measured.path, env=env, timeout=60,
                               log_stem=tmp / "logs" / f"step-{i}")
                step.append(time.perf_counter() - t0)
                assert res.ok, res.describe()
                t0 = time.perf_counter()
                res = scorer({**env, "AUTOLOOP_OUTPUT": str(out)}, out, tmp / "logs" / f"score-{i}", proc.new_marker())
                took = time.perf_counter() - t0
                assert res.ok, res.describe()
                if first is None:
                    first = took
                else:
                    score.append(took)
        print(f"step  {statistics.median(step) * 1000:7.1f} ms  (python -c pass as a measurement step, median of {len(step)})")
        print(f"score {statistics.median(score) * 1000:7.1f} ms  (the same as the score step, median of {len(score)})")
        print(f"first {first * 1000:7.1f} ms  (the first score call, making the start commit's tree)")


if __name__ == "__main__":
    main()
