"""program.md's reader: autoloop's table-driven schema against pydantic, side by side.

    python benchmarks/program_schema.py [--runs 15]

Measures, each in a fresh interpreter, the import time of `autoloop.program.schema` (the reader with
PyYAML and its schema tables) and of `pydantic` plus a model of program.md's three required
sections (what a pydantic reader would import before it could check anything); then the time
to parse examples/quickstart/program.md with autoloop's reader, and what pydantic says for a
misspelled key (the error quality: autoloop's is `program.md:LINE: unknown key 'verifer'
(did you mean 'verifier'?)`). Prints medians; the machine's load makes absolute numbers noisy,
so compare the two columns of one run.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

IMPORT_OURS = "import autoloop.program.schema"
IMPORT_PYDANTIC = """
import yaml
from typing import Literal
from pydantic import BaseModel, ConfigDict
class Verifier(BaseModel):
    model_config = ConfigDict(extra="forbid")
    command: str
    metric: str | None = None
    direction: Literal["minimize", "maximize"]
class Program(BaseModel):
    model_config = ConfigDict(extra="forbid")
    goal: str
    allowed: list[str]
    verifier: Verifier
"""


def import_ms(code: str, runs: int) -> float:
    times = []
    for _ in range(runs):
        probe = f"import time; t = time.perf_counter()\n{code}\nprint(time.perf_counter() - t)"
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
        times.append(float(out.stdout.strip()) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    runs = parser.parse_args().runs
    print(f"import, median of {runs} fresh interpreters:")
    print(f"  autoloop.program.schema (with yaml)      {import_ms(IMPORT_OURS, runs):7.1f} ms")
    print(f"  pydantic + a 3-section model     {import_ms(IMPORT_PYDANTIC, runs):7.1f} ms")

    from autoloop.program.schema import parse_program
    program = ROOT / "examples" / "quickstart" / "program.md"
    source = program.read_bytes()
    t = time.perf_counter()
    for _ in range(200):
        parse_program(source, program, ROOT)
    print(f"parse examples/quickstart/program.md: {(time.perf_counter() - t) / 200 * 1000:.2f} ms each")

    bad = "goal: g\nallowed: [a.py]\nverifer: {command: x, metric: m, direction: minimize}\n"
    namespace: dict = {}
    # (not inheriting this file's `from __future__ import annotations`: pydantic needs real types)
    exec(compile(IMPORT_PYDANTIC, "<model>", "exec", dont_inherit=True), namespace)
    import yaml
    try:
        namespace["Program"].model_validate(yaml.safe_load(bad))
    except Exception as exc:   # pydantic.ValidationError
        first = str(exc).splitlines()
        print("pydantic on a misspelled key:", " | ".join(line.strip() for line in first[:5]))
    try:
        parse_program(f"---\n{bad}---\n".encode(), program, ROOT)
    except Exception as exc:   # ConfigError
        print("autoloop on the same:        ", exc)


if __name__ == "__main__":
    main()
