"""What the generator preflight costs a run (once, before the baseline): the agent CLI's
`--version`, run as the cycles run it — inside the bubblewrap sandbox with its binds and private
state — next to the same command run directly, interleaved so both sides see the same load.

    python benchmarks/agent_preflight.py /tmp/clis/claude/node_modules/.bin/claude \\
        /tmp/clis/codex/node_modules/.bin/codex /tmp/clis/aider/bin/aider

Each argument is an installed CLI (its kind is its file name). Prints, per CLI, the median and
spread of `--version` direct and via autoloop's preflight (which adds the sandbox start, the
binds of what the executable resolves to, and the copy of its state on first use).
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

from autoloop.process import envs
from autoloop.process import proc  # noqa: E402
from autoloop.generators.base import preflight_context  # noqa: E402
from autoloop.generators.registry import make_generator  # noqa: E402
from autoloop.program.reader import GeneratorSpec, Program, SandboxSpec, VerifierSpec  # noqa: E402
from autoloop.isolation.sandbox import Bwrap  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("clis", nargs="+", type=Path)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="autoloop-bench-") as tmp:
        root = Path(tmp)
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        for exe in args.clis:
            kind = exe.name
            program = Program(path=root / "program.md", repo_root=root, goal="g", allowed=("x",),
                              verifier=VerifierSpec(command="true", direction="minimize", metric="m"),
                              generator=GeneratorSpec(kind=kind, command=str(exe)),
                              sandbox=SandboxSpec(kind="bwrap"))
            sandbox = Bwrap(program.sandbox)
            generator = make_generator(program.generator, program)
            direct, sandboxed = [], []
            for _ in range(args.rounds):
                t = time.perf_counter()
                subprocess.run([str(exe), "--version"], capture_output=True, check=True)
                direct.append(time.perf_counter() - t)
                scratch = root / "scratch"
                scratch.mkdir()

                def wrap(command, *, readable=(), writable=(), network=None):  # type: ignore[no-untyped-def]
                    return sandbox.argv(command, workdir=scratch, writable=[scratch, *writable],
                                        readable=readable, network=network)

                ctx = preflight_context(program, scratch, env=envs.generator_env(os.environ),
                                        run_marker=proc.new_marker(), wrap=wrap)
                t = time.perf_counter()
                version = generator.preflight(ctx)
                sandboxed.append(time.perf_counter() - t)
                subprocess.run(["rm", "-rf", str(scratch)], check=True)
            print(f"{kind:<7} {version!s:<28} direct {_ms(direct)}   preflight in sandbox {_ms(sandboxed)}")
    return 0


def _ms(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1000:7.0f} ms (min {min(xs) * 1000:.0f}, max {max(xs) * 1000:.0f})"


if __name__ == "__main__":
    sys.exit(main())
