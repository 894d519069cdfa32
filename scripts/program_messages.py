"""program.md's error messages before and after a change to its reader, side by side.

    python scripts/program_messages.py [--base main]

Generates one-key mutations of a valid program.md (every key `known_keys()` lists, set to each
of a few dozen odd values, on a few base programs), parses each with the package as it is at
`--base` (exported from git to a temporary folder) and as it is in this tree, and prints every
input whose outcome differs: the error text (file:line and all), or whether it parsed. Exits 1
when any differs, 0 when none does.
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VALUES: list[Any] = [
    "", "x", "Strict", "paired", "ray", "bwrap", -1, 0, 1, 2, 3, 65, 0.5, 0.7, 1.5, 10**30, 10**400,
    True, None, [], {}, ["a"], ["*.py", "../x"], [1], "1%", "100%", "50 %", "-1%", "a=([0-9]+)",
    "(", "~/x", "/abs", "rel/x", ".git/x", "http://h", "two\nlines", [{"A": "0"}],
    [{"AUTOLOOP_X": 1}], [{"LD_PRELOAD": "x"}], [{"1A": "x"}], [{"A": True}],
    [{"path": "/d", "as": "src/x"}], {"input": 1, "output": 2}, {"input": -1}, "python -m pytest",
    {"command": "c", "name": "n"}, [{"command": "c", "name": "n"}, {"command": "d", "name": "n"}],
    ["a b", "a b"], "'unclosed", [{"metric": "m", "max_increase": "5%"}], [{"metric": "m"}],
    [{"pattern": "x", "metric": "m"}],
]
BASES: list[dict[str, Any]] = [
    {}, {"accept": {"rule": "paired"}}, {"parallel": {"executor": "ray", "workers": 2}},
    {"generator": {"kind": "command", "command": "c"}}, {"allowed": ["src/**"]},
]
# a list item's keys need the item's required keys beside them
ITEM = {"guards": {"command": "c"}, "limits": {"metric": "m", "max_increase": 1},
        "data": {"path": "/d", "as": "d"}}


def program(base: dict[str, Any], key: str, value: Any) -> str:
    import yaml

    doc: dict[str, Any] = {"goal": "g", "allowed": ["a.py"],
                           "verifier": {"command": "c", "metric": "m", "direction": "minimize"},
                           **{k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}}
    parts = key.replace("[]", "").split(".")
    if key.split(".")[0].endswith("[]"):
        doc[parts[0]] = [{**ITEM[parts[0]], parts[-1]: value}]
    elif len(parts) == 1:
        doc[key] = value
    else:
        section = doc.get(parts[0]) if isinstance(doc.get(parts[0]), dict) else {}
        if parts[0] == "holdout":
            section = {"command": "h", "metric": "m"}
        inner = section
        for name in parts[1:-1]:
            inner[name] = dict(inner.get(name) or {})
            inner = inner[name]
        inner[parts[-1]] = value
        doc[parts[0]] = section
    return "---\n" + yaml.safe_dump(doc, sort_keys=False, width=1000) + "---\nbody\n"


def outcomes(code: str, inputs: Path) -> list[str]:
    """Each input's outcome under the package at `code`, in a fresh interpreter."""
    script = ("import json, sys\nfrom pathlib import Path\nsys.path.insert(0, sys.argv[1])\n"
              "from autoloop.program.schema import parse_program\nout = []\n"
              "for text in json.loads(Path(sys.argv[2]).read_text()):\n"
              "    try:\n"
              "        parse_program(text, Path('/repo/program.md'), Path('/repo'))\n"
              "        out.append('parsed')\n"
              "    except Exception as exc:\n"
              "        out.append(f'{type(exc).__name__}: {exc}')\n"
              "print(json.dumps(out))\n")
    res = subprocess.run([sys.executable, "-c", script, code, str(inputs)], capture_output=True,
                         text=True, cwd=tempfile.gettempdir(), check=True)
    return list(json.loads(res.stdout))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="main", help="git ref to compare with (default main)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from autoloop.program.schema import known_keys

    texts = [program(b, k, v) for b, k, v in itertools.product(BASES, known_keys(), VALUES)]
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.base, "autoloop"],
                                 capture_output=True, check=True).stdout
        tarfile.open(fileobj=io.BytesIO(archive)).extractall(tmp)
        inputs = Path(tmp) / "inputs.json"
        inputs.write_text(json.dumps(texts))
        before, after = outcomes(tmp, inputs), outcomes(str(ROOT), inputs)
    differ = [(t, a, b) for t, a, b in zip(texts, before, after) if a != b]
    for text, old, new in differ:
        print(f"--- input\n{text}    {args.base}: {old}\n    this tree: {new}")
    errors = len(set(before) - {"parsed"})
    print(f"{len(texts)} inputs, {errors} distinct errors at {args.base}, {len(differ)} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
