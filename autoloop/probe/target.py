"""Where the probe plants its hacks: the first module the verifier's Python code imports that a
generator may change (followed breadth-first from the scripts `verifier.command` names, through
`sys.path` entries and modules loaded by file name), and the test helpers the guards import that
`allowed` covers."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Iterator

from autoloop.engine.reads import looks_like_test
from autoloop.git.gitrun import git
from autoloop.isolation.measured_files import command_files, protected_paths
from autoloop.program.reader import Program
from autoloop.program.scope_rules import ScopeRules

MAX_MODULES = 2000       # files followed from the verifier's script before giving up


def _rules(program: Program) -> ScopeRules:
    return ScopeRules(program.allowed, program.forbidden, protected_paths(program))


def _tracked(program: Program, head: str) -> set[str]:
    return set(git(program.repo_root, "ls-tree", "-r", "--name-only", "-z", head).split("\0")) - {""}


def _import_names(tree: ast.AST, package: str) -> Iterator[str]:
    """Absolute module names an AST imports (each `from a import b` as both a and a.b)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                yield from (".".join(parts[:i]) for i in range(1, len(parts) + 1))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".") if package else []
                up = up[:len(up) - node.level + 1] if node.level > 1 else up
                base = ".".join([*up, base] if base else up)
            if base:
                parts = base.split(".")
                yield from (".".join(parts[:i]) for i in range(1, len(parts) + 1))
            yield from (f"{base}.{a.name}" if base else a.name for a in node.names if a.name != "*")


def _path_entries(tree: ast.AST) -> Iterator[str]:
    """Folders a script puts on sys.path (`sys.path.insert(0, "src")`)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("insert", "append") and node.args:
            arg = node.args[-1]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                yield arg.value


def verifier_modules(program: Program, tracked: set[str]) -> list[str]:
    """Repository files the verifier's Python code imports, nearest first (breadth-first from the
    scripts its command names), as repository-relative paths."""
    root = program.repo_root
    todo = [rel for key, rel in command_files(program) if key == "verifier.command" and rel.endswith(".py")]
    roots = ["", "src"]
    seen: list[str] = []
    while todo and len(seen) < MAX_MODULES:
        rel = todo.pop(0)
        if rel in seen:
            continue
        seen.append(rel)
        try:
            tree = ast.parse((root / rel).read_bytes())
        except (OSError, SyntaxError, ValueError):
            continue
        here = str(Path(rel).parent).replace("\\", "/")
        here = "" if here == "." else here
        roots += [e.strip("./") for e in _path_entries(tree) if not e.startswith("/")] + [here]
        package = here.replace("/", ".") if Path(rel).name == "__init__.py" else \
            ".".join(part for part in here.split("/") if part)
        # a module loaded by its file name (`exec(compile(Path("x.py").read_bytes()...))`)
        for lit in (n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)):
            if lit.endswith(".py") and not lit.startswith("/"):
                todo += [c for c in ("/".join(p for p in (here, lit) if p), lit) if c in tracked]
        for name in _import_names(tree, package):
            for base in dict.fromkeys(roots):
                stem = "/".join(p for p in [base, name.replace(".", "/")] if p)
                found = next((c for c in (f"{stem}.py", f"{stem}/__init__.py") if c in tracked), None)
                if found:
                    todo.append(found)
                    break
    return seen


def trace_plans(program: Program) -> list[tuple[str, str]]:
    """(script, the trace.json beside it) for each Python script the verifier's command runs:
    where a benchmark `init --trace` wrote keeps its plan (repository-relative; it may not exist)."""
    return [(rel, str(Path(rel).parent / "trace.json").removeprefix("./"))
            for key, rel in command_files(program) if key == "verifier.command" and rel.endswith(".py")]


def traced_modules(program: Program, tracked: set[str]) -> list[str]:
    """The files of the modules a traced benchmark's targets live in (`MODULE:NAME` in the
    trace.json beside a script the verifier's command runs), found the way that script's
    `sys.path` finds them."""
    out: list[str] = []
    for rel, plan in trace_plans(program):
        if plan not in tracked:
            continue
        try:
            names = [t["name"] for t in json.loads((program.repo_root / plan).read_text())["targets"]]
            script = ast.parse((program.repo_root / rel).read_bytes())
        except (OSError, ValueError, SyntaxError, KeyError, TypeError):
            continue
        here = str(Path(rel).parent).replace("\\", "/")
        roots = [e.strip("./") for e in _path_entries(script) if not e.startswith("/")] + ["", "src", here]
        for module in dict.fromkeys(str(n).split(":")[0] for n in names):
            for base in dict.fromkeys(roots):
                stem = "/".join(p for p in [base, module.replace(".", "/")] if p and p != ".")
                found = next((c for c in (f"{stem}.py", f"{stem}/__init__.py") if c in tracked), None)
                if found:
                    out.append(found)
                    break
    return list(dict.fromkeys(out))


def plant_target(program: Program, head: str) -> tuple[str | None, tuple[str, ...]]:
    """(the module the verifier imports that a generator may change, the test helpers a
    generator may change)."""
    rules, tracked = _rules(program), _tracked(program, head)
    editable = [rel for rel in verifier_modules(program, tracked)
                if rules.why_not(rel) is None and not looks_like_test(rel)]
    # a traced benchmark names the functions it calls (MODULE:NAME): their own modules first, or
    # a plant in a module the targets never call tries nothing. Otherwise a package's __init__
    # that only re-exports has nothing to memoise or break: the first module defining functions
    traced = [rel for rel in traced_modules(program, tracked) if rules.why_not(rel) is None and not looks_like_test(rel)]
    target = traced[0] if traced else next((rel for rel in editable if _defines_functions(program.repo_root / rel)),
                                           editable[0] if editable else None)
    helpers = [rel for rel in sorted(tracked)
               if rel.endswith(".py") and looks_like_test(rel) and rules.why_not(rel) is None]
    named = _guard_paths(program, tracked)
    if named:   # the helpers of the tests the guards run, when their commands name them
        helpers = [rel for rel in helpers if any(rel == n or rel.startswith(n + "/") for n in named)] or helpers
    if not helpers and "conftest.py" in rules.literal and rules.why_not("conftest.py") is None:
        helpers = ["conftest.py"]   # allowed by name: a generator may create it
    return target, tuple(helpers)


def _defines_functions(path: Path) -> bool:
    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return False
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and not n.name.startswith("_")
               for n in tree.body)


def _guard_paths(program: Program, tracked: set[str]) -> list[str]:
    """Files and folders of the tree the guards' commands name (`pytest tests/unit`)."""
    folders = {str(Path(rel).parent) for rel in tracked}
    out = []
    for g in program.guards:
        for word in g.command.split():
            word = word.strip("'\"").rstrip("/")
            if word.startswith("./"):
                word = word[2:]
            if word in tracked or word in folders:
                out.append(word)
    return out
