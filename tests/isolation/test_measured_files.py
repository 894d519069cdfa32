"""What the measurement commands name (autoloop.isolation.measured_files): the programs they start are
found inside `sh -c '…'` too, so the guardrails watch and cache the Pythons really started."""

from __future__ import annotations

import os
import sys

import pytest

from autoloop.isolation.measured_files import command_heads, commands_by_name, interpreters, named_interpreters
from autoloop.program.reader import load_program


@pytest.mark.parametrize("command, heads", [
    ("python3 score.py", ["python3"]),
    ("FOO=1 env BAR=2 python3 -m x", ["env", "python3"]),
    ("uv run pytest -q", ["uv", "run", "pytest"]),
    ("sh -c 'cd sub && python3.11 eval.py | tee log'", ["sh", "cd", "python3.11", "tee"]),
    ("bash -lc \"exec .venv/bin/python -m bench\"", ["bash", "exec", ".venv/bin/python"]),
    ("python -c 'import os; os.system(\"ls\")'", ["python"]),
    ("make test; ./run.sh", ["make", "./run.sh"]),
])
def test_command_heads(command, heads):
    assert command_heads(command) == heads


def _program(make_repo, verifier: str, guard: str):
    repo = make_repo({"score.py": "print('score: 1')\n", "val.txt": "1\n", "program.md": (
        "---\ngoal: g\nallowed: [val.txt]\nverifier:\n"
        f"  command: {verifier}\n  metric: score\n  direction: minimize\n"
        f"guards:\n  - {{name: g, command: {guard!r}}}\n---\nbody\n")})
    return load_program(repo / "program.md")


def test_pythons_inside_a_shell_string_are_found(make_repo):
    # command_words saw only `sh` here: the interpreter was neither watched nor cached
    p = _program(make_repo, "sh -c 'python3 score.py'", "bash -c 'cd . && python3.99 -m pytest'")
    assert named_interpreters(p) == ["python3", "python3.99"]
    assert {"python3", "python3.99", "cd", "sh", "bash"} <= commands_by_name(p)


def test_a_console_script_inside_a_shell_string_leads_to_its_python(make_repo, tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "mytool"
    script.write_text(f"#!{sys.executable}\nprint('score: 1')\n")
    os.chmod(script, 0o755)
    p = _program(make_repo, "sh -c 'mytool --eval'", "echo ok")
    env = {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    assert sys.executable in interpreters(p, env, shebangs=True)
    assert sys.executable not in interpreters(p, env)
