"""What the measurement sandbox adds to one command: `sh -c true` run through autoloop.process.proc
as a measurement would run it, bare and inside the sandbox (autoloop.isolation.sandbox.Confinement,
built the way a run builds it: a verification tree, its scratch, the checkout alias), in
alternating batches so that both see the same machine load. Target: ≤ 15 ms per command on a
quiet machine.

    python benchmarks/sandbox_cost.py                 # 9 rounds of 20 commands each side
    python benchmarks/sandbox_cost.py --command 'python3 -c pass'
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from autoloop.process import proc  # noqa: E402
from autoloop.program.reader import SandboxSpec  # noqa: E402
from autoloop.isolation.sandbox import Bwrap, Confinement, SandboxUnavailable, git_link  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--per-round", type=int, default=20)
    ap.add_argument("--command", default="true")
    ap.add_argument("--target-ms", type=float, default=15.0)
    args = ap.parse_args()
    bwrap = Bwrap(SandboxSpec(kind="bwrap"))
    try:
        bwrap.probe()
    except SandboxUnavailable as exc:
        print(f"no sandbox here: {exc}")
        return 2
    with tempfile.TemporaryDirectory(prefix="autoloop-sbx-bench-") as tmp:
        root = Path(tmp)
        checkout, tree, scratch, logs = root / "checkout", root / "tree", root / "scratch", root / "logs"
        for d in (checkout, scratch, logs):
            d.mkdir()
        env = dict(os.environ, GIT_CONFIG_NOSYSTEM="1")
        subprocess.run(["git", "init", "-q"], cwd=checkout, check=True)
        (checkout / "f.txt").write_text("x\n")
        subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@b", "add", "-A"], cwd=checkout, check=True)
        subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "i"], cwd=checkout,
                       check=True)
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree)], cwd=checkout, check=True,
                       capture_output=True)
        common = (checkout / ".git").resolve()
        git = git_link(tree, scratch, common)
        box = Confinement(bwrap, tree=tree, checkout=checkout, writable=(scratch,), git=git,
                          protect=() if git else (".git",), path=env.get("PATH", ""))

        def batch(sandboxed: bool) -> float:
            cmd = box.argv(args.command) if sandboxed else args.command
            t0 = time.perf_counter()
            for i in range(args.per_round):
                res = proc.run(cmd, cwd=tree, env=env, timeout=60, log_stem=logs / f"c{i}")
                if not res.ok:
                    raise SystemExit(f"{'sandboxed ' if sandboxed else ''}command failed: {res.describe()}: "
                                     f"{res.stderr_tail()}")
            return (time.perf_counter() - t0) / args.per_round * 1000

        bare, boxed = [], []
        for r in range(args.rounds):
            order = (False, True) if r % 2 == 0 else (True, False)
            for s in order:
                (boxed if s else bare).append(batch(s))
            print(f"round {r + 1}: bare {bare[-1]:.1f} ms, sandboxed {boxed[-1]:.1f} ms per command", flush=True)
        diffs = [b - a for a, b in zip(bare, boxed)]
        med = statistics.median(diffs)
        print()
        print(f"command: {args.command!r}; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        print(f"bare per command:       {statistics.median(bare):.1f} ms (median of {args.rounds} rounds)")
        print(f"sandboxed per command:  {statistics.median(boxed):.1f} ms")
        print(f"sandbox cost:           {med:.1f} ms [{min(diffs):.1f} – {max(diffs):.1f}] "
              f"(target ≤ {args.target_ms:g} ms on a quiet machine)")
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=checkout, capture_output=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
