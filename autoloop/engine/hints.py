"""What to do next, for the mistakes a newcomer makes: a metric line that almost matches, a path
that only works from program.md's folder, an `allowed` entry that can match nothing, a template
left as `autoloop init` wrote it. Pure functions of the program and of text; the callers decide
whether a finding is a warning, part of a crash lesson or a refusal.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from importlib import resources
from itertools import takewhile
from pathlib import Path
from typing import Callable

from autoloop.errors import ConfigError
from autoloop.process.executables import all_words, command_heads
from autoloop.program.frontmatter import closest
from autoloop.isolation.measured_files import measured_commands
from autoloop.base.walk import under
from autoloop.program.reader import Program, parse_program

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_MISSING = re.compile(r"can't open file|No such file or directory|: not found|command not found"
                      r"|cannot find the path|ModuleNotFoundError")
# CSI (colours, cursor moves) and OSC (titles, links) sequences: test runners that force colour
# (pytest's `addopts = --color=yes`) put them in the line a lesson or `doctor` quotes
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_NO_MODULE = re.compile(r"No module named '([A-Za-z_][\w.]*)'")
# `/bin/sh: 1: .venv/bin/python: not found`, `bash: ./run.sh: No such file or directory`
_SHELL_MISSING = re.compile(r"^\S*sh: (?:line )?\d*:? ?([^\s:/][^\s:]*): "
                            r"(?:not found|No such file or directory)$", re.MULTILINE)
# `[Errno 2] No such file or directory: '/dev/shm/x'`, `cat: /tmp/x: No such file or directory`,
# `can't open file '/tmp/x/bench.py'`: an absolute path a command could not find
_ABS_MISSING = re.compile(r"(?:No such file or directory: |can't open file )'(/[^'\n]+)'"
                          r"|(?:^|[\s'\"])(/[^\s:'\"]+): (?:No such file or directory|cannot open)", re.MULTILINE)
# what a measurement sandbox replaces with its own, empty folders
_SANDBOX_EMPTY = ("/tmp", "/var/tmp", "/dev/shm", "/run")
# what `autoloop init` writes and a person must replace (see autoloop/commands/templates/*.md)
_PLACEHOLDER_BODY = re.compile(r"^EDIT:", re.MULTILINE)
_TEMPLATE_SCRIPTS = {"measure.sh", "prepare.py", "bench/run.py", "bench/produce.py"}
_NEAR_METRIC = re.compile(r"^\s*(?:METRIC\s+)?([A-Za-z0-9_./-]+)\s*[:=]\s*(.*?)\s*$")


def blocked_lesson(blocked: dict[str, int], key: str) -> str:
    """The sentence a cycle's lesson gains when the egress proxy refused hosts ("" if none)."""
    if not blocked:
        return ""
    words = {1: "once", 2: "twice", 3: "three times"}
    shown = ", ".join(f"{t} {words.get(n, f'{n} times')}" for t, n in list(blocked.items())[:3])
    more = f" (+{len(blocked) - 3} more)" if len(blocked) > 3 else ""
    who = "the verifier" if key == "verifier.hosts" else "the agent"
    return f"Blocked {shown}{more}: add it to {key} if {who} needs it."


def with_sentences(lesson: str, *more: str) -> str:
    """`lesson` followed by the sentences `more` that are not empty."""
    text = lesson.rstrip()
    for sentence in filter(None, more):
        text = f"{text}{'' if not text or text.endswith(('.', '!', '?')) else '.'} {sentence}".strip()
    return text


def near_miss(output: str, name: str, stderr: str = "", key: str = "verifier.metric",
              where: str = "") -> str:
    """When no `NAME: NUMBER` line was found: the last line that nearly is one, quoted, with
    what to change (`; it printed 'Score: 5' (line 3): ...`); that it printed nothing (and how
    its stderr ends); or a line whose name is close (`did you mean KEY: seconds?`); else ""."""
    if not plain(output).strip():
        err = [ln.strip() for ln in plain(stderr).splitlines() if ln.strip()]
        said = f"; its stderr ends with {err[-1][:160]!r}" if err else " (nor anything on stderr)"
        return f"; it printed nothing on stdout{said}"
    numbered: dict[str, str] = {}
    for line in output.splitlines():
        m = _NEAR_METRIC.match(plain(line))
        if m and re.fullmatch(_NUMBER, m.group(2)):
            numbered[m.group(1)] = line.strip()[:120]
    near = closest(name, [n for n in numbered if n.lower() != name.lower()])
    for line in reversed(output.splitlines()):
        m = _NEAR_METRIC.match(line)
        if not m or m.group(1).lower() != name.lower():
            continue
        key, value = m.group(1), m.group(2)
        where = f"; it printed {line.strip()[:120]!r}"
        expected = f"a line of the form '{name}: NUMBER'"
        if key != name:
            return (f"{where}: the name differs in case from verifier.metric '{name}' (names are "
                    f"case-sensitive): print {expected}, or set verifier.metric: {key}")
        lead = re.match(_NUMBER, value)
        if lead and value[lead.end():].strip():
            rest = value[lead.end():].strip()
            return (f"{where}: '{rest}' after the number is not allowed: print {expected} with "
                    f"the number alone (put a unit in the name, e.g. {name}_{_unit(rest)}), or "
                    f"set verifier.pattern to a regular expression whose group is the number")
        return f"{where}: {value!r} is not a number; print {expected}"
    if near is not None:
        return f"; it printed {numbered[near]!r} — did you mean {key}: {near}{f' ({where})' if where else ''}?"
    return ""


def _unit(text: str) -> str:
    word = re.sub(r"[^A-Za-z0-9]+", "", text.split()[0]) if text.split() else ""
    return {"": "value", "%": "pct"}.get(text.strip(), word or "pct")


def plain(text: str) -> str:
    """`text` without terminal escape sequences and the other control characters (bell,
    backspace, carriage return...; newlines and tabs stay): text from outside (a verifier's
    output, Ray's errors) as a lesson, the ledger or the next prompt may quote it."""
    return _CONTROLS.sub("", _ESCAPES.sub("", text))


def uncommitted_module_hint(program: Program, output: str) -> str:
    """`No module named 'pkg.mod'` for a file of the checkout git does not have (a generated
    `_version.py`): measurements see only committed files; say which and how (else "")."""
    from autoloop.git.gitrun import head_has

    root = program.repo_root
    for name in dict.fromkeys(reversed(_NO_MODULE.findall(output))):
        rel = name.replace(".", "/")
        for base in ("", "src/"):
            for cand in (f"{base}{rel}.py", f"{base}{rel}/__init__.py"):
                if not (root / cand).is_file():
                    continue
                if head_has(root, cand):
                    # committed, so not a missing file: the Python that ran cannot see the root
                    # (`python bench/run.py` puts bench/ on sys.path, not the repository root)
                    return (f" ({cand} is committed, but the command's Python does not look for "
                            f"modules at the repository root: install the project into the Python "
                            f"the verifier uses (`pip install -e .`), or run it with the root on "
                            f"its path (`PYTHONPATH=. python …`))")
                return (f" ({cand} is in your checkout, but measurements see only the committed "
                        f"files: commit it (`git add -f {cand}` if git ignores it), or have the "
                        "command generate it)")
    return ""


def missing_path_hint(program: Program, output: str, sandboxed: bool = False) -> str:
    """The shell could not find a relative path the checkout has (an ignored `.venv/`), or, in
    a sandbox, an absolute path that exists outside it: say which, and the fixes (else "")."""
    if sandboxed:
        hidden = _hidden_path(program, output)
        if hidden:
            return hidden
    for rel in dict.fromkeys(reversed(_SHELL_MISSING.findall(output))):
        path = program.repo_root / rel
        if rel.startswith(("../", "~")) or not path.exists():
            continue
        return (f" ({rel} is in your checkout, but measurements run in a tree of the committed "
                f"files, which does not have it: commit it, or name it by its absolute path "
                f"{shlex.quote(str(path))})")
    return ""


def _hidden_path(program: Program, output: str) -> str:
    """An absolute path the sandboxed command could not find but that exists here: the sandbox
    hides it. `data:` is how a measurement reads something outside the repository."""
    for m in reversed(list(_ABS_MISSING.finditer(output))):
        path = m.group(1) or m.group(2)
        if not os.path.exists(path) or under(path, str(program.repo_root)):
            continue
        empty = next((d for d in _SANDBOX_EMPTY if under(path, d)), None)
        why = (f"the measurement sandbox has its own, empty {empty}" if empty else
               "the measurement sandbox does not show it (a `private:` path is readable only by "
               "`score` and `holdout`)")
        folder = os.path.dirname(path) or path
        return (f" ({path} exists outside the sandbox, but {why}: list its folder under `data:` "
                f"(`- {{path: {folder}, as: data/{os.path.basename(folder) or 'input'}}}`) and read it "
                "from there, or add it to `sandbox.writable` if the command must write there)")
    return ""


def root_hint(program: Program, output: str) -> str:
    """When a command failed on a missing file and program.md is not at the repository root:
    commands run from the root, say so with the fix (else "")."""
    if not _MISSING.search(output):
        return ""
    sub = program.state_dir.relative_to(program.repo_root).as_posix()
    if sub in ("", "."):
        return ""
    return (f" (commands run from the repository root {program.repo_root}, not from {sub}/ where "
            f"{program.path.name} is: write paths from the root, e.g. '{sub}/…', or start the "
            f"command with 'cd {shlex.quote(sub)} && ')")


def unmatched_allowed(program: Program) -> list[str]:
    """`allowed` entries that look like mistakes, one message each with its line: a folder that
    does not exist, or a name beside a program.md kept in a subfolder (paths are relative to the
    root). Only the named folders are listed, never the whole checkout."""
    from autoloop.program.globs import compile_pattern

    root = program.repo_root
    sub = program.state_dir.relative_to(root).as_posix()
    out = []
    for i, entry in enumerate(program.allowed):
        head = f"{program.path.name}:{program.line(f'allowed[{i}]')}: allowed entry '{entry}'"
        tail = ("changes to the files you mean would be refused as violations; paths are relative "
                "to the repository root")
        folder = _literal_folder(entry)
        if folder:
            if (root / folder).is_dir():
                continue
            if sub not in ("", ".") and (program.state_dir / folder).is_dir():
                out.append(f"{head}: there is no folder '{folder}' at the repository root, only "
                           f"'{sub}/{folder}': {tail}, did you mean '{sub}/{entry}'?")
            else:
                out.append(f"{head}: its folder '{folder}' does not exist: {tail}")
            continue
        if "**" in entry:
            continue
        rx = compile_pattern(entry)
        if any(rx.fullmatch(name) for name in _names(root)):
            continue
        if sub not in ("", ".") and any(rx.fullmatch(name) for name in _names(program.state_dir)):
            out.append(f"{head} matches no file at the repository root, only in {sub}/: {tail}, "
                       f"did you mean '{sub}/{entry}'?")
    return out


def _names(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _literal_folder(pattern: str) -> str:
    """`src/model/**/*.py` -> `src/model`; `model/` -> `model`; `train.py` -> ``."""
    parts = pattern.split("/")
    lit = takewhile(lambda part: not any(ch in part for ch in "*?["),
                    parts if pattern.endswith("/") else parts[:-1])
    return "/".join(part for part in lit if part)


def placeholders(program: Program) -> list[str]:
    """Template placeholders still in place, each `program.md:LINE: what to edit`."""
    out = []
    name = program.path.name
    text = program.source.decode("utf-8", "replace")
    m = _PLACEHOLDER_BODY.search(program.body)
    if m:
        body_start = text.find(program.body) if program.body else -1
        line = text.count("\n", 0, body_start + m.start()) + 1 if body_start >= 0 else 1
        first = program.body[m.start():].splitlines()[0][:70]
        out.append(f"{name}:{line}: the instructions still hold the template's placeholder "
                   f"'{first}…': write what the generator should know about the project")
    cmd = program.verifier.command
    script = next((rel for rel in _scripts(cmd) if rel in _TEMPLATE_SCRIPTS), "")
    line = program.lines.get("verifier.command", 1)
    # the template's line still carries its EDIT note: else the command is the user's own
    if script and "EDIT" in text.split("\n")[line - 1] and not (program.repo_root / script).exists():
        does = f"prints '{program.verifier.label}: NUMBER'" if program.verifier.measure == "output" \
            and program.verifier.score is None else "runs your code (see the comment beside it)"
        out.append(f"{name}:{line}: verifier.command is still the template's placeholder "
                   f"'{cmd}' ({script} does not exist): put the command that {does}")
    if not out:   # a program whose placeholders are gone: the values it kept are the user's choice
        return out
    # refused anyway: every other place the template marks EDIT and that still holds its value is
    # named too, so one round of edits is enough (it may be right as it is: then keep it)
    said = {ln.split(":", 2)[1] for ln in out}
    out += [f"{name}:{ln}: {key} is still the template's '{shown}' (marked EDIT: {why}); keep it only if "
            "it is right for your project" for key, ln, shown, why in unchanged_edits(program) if str(ln) not in said]
    return sorted(out, key=lambda ln: int(ln.split(":", 2)[1]))


_TEMPLATE = re.compile(r"written by `autoloop init` \(template: ([a-z]+)\)")


def unchanged_edits(program: Program) -> list[tuple[str, int, str, str]]:
    """(key, line, value, what it is for) of every key the `autoloop init` template marks EDIT
    whose value is still the template's: its value compared, not its line, so an edited value
    keeps its EDIT comment without being named. Empty for a program not written by `init`."""
    m = _TEMPLATE.search(program.source.decode("utf-8", "replace"))
    if m is None:
        return []
    try:   # package data, read by name (the templates are `init`'s, which sits above this layer)
        text = (resources.files("autoloop") / "commands" / "templates" / f"{m.group(1)}.md").read_text()
        template = parse_program(text, program.path, program.repo_root)
    except Exception:   # a template this version does not have, or one that does not parse here
        return []
    marked, own = text.split("\n"), program.source.decode("utf-8", "replace").split("\n")
    out = []
    for key, ln in template.lines.items():
        if ln > len(marked) or "# EDIT" not in marked[ln - 1]:
            continue
        note = marked[ln - 1].partition("# EDIT")[2]
        mine, theirs = _value(program, key), _value(template, key)
        if mine is not None and mine == theirs and key in program.lines:
            ln = program.lines[key]
            written = own[ln - 1].split(":", 1)[-1].split("#", 1)[0].strip().strip("'\"") if ln <= len(own) else ""
            shown = written or (", ".join(map(str, mine)) if isinstance(mine, tuple) else str(mine))
            why = re.split(r"\s*[;(]", note.lstrip(": ").strip(), maxsplit=1)[0].rstrip(" .,")
            out.append((key, ln, shown, why or "put your own value"))
    return out


def _value(program: Program, key: str) -> object:
    """The value at a program.md key (`verifier.command`, `guards[0].command`), or None."""
    obj: object = program
    for part in key.split("."):
        name, _, index = part.partition("[")
        obj = getattr(obj, name, None)
        if index:
            try:
                obj = obj[int(index.rstrip("]"))]   # type: ignore[index]
            except (TypeError, IndexError, ValueError):
                return None
    if hasattr(obj, "value") and not isinstance(obj, (str, int, float, tuple)):
        return getattr(obj, "value")   # an Amount (min_effect: 2%)
    return obj


def refuse_placeholders(program: Program) -> None:
    """ConfigError (exit 2, nothing run) when `autoloop init`'s placeholders are still there."""
    found = placeholders(program)
    if found:
        raise ConfigError("\n".join(found + [f"edit {program.path.name} (every line marked EDIT), "
                                              "then check it with `autoloop verify`"]))


_OPERATOR = frozenset(";|&()<>")
_INTERPRETERS = re.compile(r"(?:python[0-9.]*|sh|bash|dash|zsh)")
_PYTHON = re.compile(r"python[0-9.]*")
_SHELL_SYNTAX = frozenset("$*?[{~`")


def missing_scripts(program: Program, committed: Callable[[str], bool | None]) -> list[str]:
    """`program.md:LINE: ...` for each script a measurement command runs (`python bench/run.py`,
    `./measure.sh`, `bash eval.sh`) that neither the checkout nor HEAD has: every measurement
    would fail on it, after the guards have run, so it is refused before anything runs.
    `committed(rel)` says whether HEAD has the file (None: no HEAD to ask)."""
    linked = [str(d.target).rstrip("/") for d in program.data]   # only in the measured tree
    out = []
    for key, cmd in measured_commands(program):
        for rel in _scripts(cmd):
            if os.path.lexists(program.repo_root / rel):   # a dangling link is there too
                continue
            if committed(rel) is not False or any(under(rel, t) for t in linked):
                continue
            out.append(f"{program.path.name}:{program.line(key)}: {key} runs {rel}, which is neither in your "
                       f"checkout nor in HEAD{_did_you_mean(program, rel)}; commands run from the "
                       f"repository root")
    return out


def refuse_missing_scripts(program: Program) -> None:
    """ConfigError (exit 2, nothing run) when a measurement command runs a file that is not there,
    or a module (`python -m pytest`) the Python it starts does not have."""
    from autoloop.git.gitrun import head_has

    found = missing_scripts(program, lambda rel: head_has(program.repo_root, rel)) + missing_modules(program)
    if found:
        raise ConfigError("\n".join(found))


_FIND_SPEC = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec(sys.argv[1]) else 3)"


def missing_modules(program: Program) -> list[str]:
    """`program.md:LINE: ...` for each `python -m MODULE` (the first command of a line) whose
    Python, found as a measurement finds it (PATH, or a path from the repository root), has no
    MODULE: autoloop's own Python runs a bare `python` when it is first on PATH, and the
    project's test runner is then missing, every measurement failing with `No module named`."""
    from autoloop.process.running import run_captured

    out = []
    # as a measurement's PATH: without relative entries (envs.scrubbed)
    path = os.pathsep.join(e for e in os.environ.get("PATH", os.defpath).split(os.pathsep) if os.path.isabs(e))
    for key, cmd in measured_commands(program):
        words = list(takewhile(lambda w: not set(w) <= _OPERATOR, all_words(cmd)))
        if len(words) < 3 or not _PYTHON.fullmatch(os.path.basename(words[0])) or words[1] != "-m" \
                or not re.fullmatch(r"[A-Za-z_][\w.]*", words[2]):
            continue
        exe = str(program.repo_root / words[0]) if "/" in words[0] else shutil.which(words[0], path=path)
        if exe is None or not os.path.isfile(exe):
            continue   # not found at all: the command's own error says so
        try:
            res = run_captured([exe, "-c", _FIND_SPEC, words[2].split(".")[0]], cwd=program.repo_root, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if res.returncode != 3:
            continue
        venv = next((f"{d}/bin/python" for d in (".venv", "venv", "env")
                     if (program.repo_root / d / "bin" / "python").exists()), None)
        mod = words[2].split(".")[0]
        fix = (f"install {mod} into it (`{words[0]} -m pip install {mod}`), or check the module's name"
               if "/" in words[0] else
               f"point at your project's Python: `{venv} -m {' '.join(words[2:3])}`" if venv else
               f"point at the Python that has it (`.venv/bin/python -m {words[2]}`, a path from the repository "
               f"root), or install {words[2].split('.')[0]} into {exe}")
        out.append(f"{program.path.name}:{program.line(key)}: {key}: `{words[0]} -m {words[2]}` runs {exe}, "
                   f"which has no module {words[2].split('.')[0]}; {fix}")
    return out


def _scripts(command: str) -> list[str]:
    """Relative script paths the first command of a line starts: a head with a `/` (`./run.sh`),
    or the first argument of an interpreter head (`python bench/run.py`, not `python -m x`)."""
    # only the first command of the line: a later one may run what an earlier one makes
    # (`make && ./build/bench`, `python gen.py > b.py && python b.py`)
    words = list(takewhile(lambda w: not set(w) <= _OPERATOR, all_words(command)))
    heads = [h for h in command_heads(command) if h in words]
    if "cd" in heads or "pushd" in heads:
        return []   # the script is relative to another folder: not ours to resolve
    out = [h for h in heads if "/" in h]
    for prev, w in zip(words, words[1:]):
        if prev in heads and _INTERPRETERS.fullmatch(os.path.basename(prev)) \
                and w.endswith((".py", ".sh")) and not w.startswith("-"):
            out.append(w)
    return [s.removeprefix("./") for s in dict.fromkeys(out)
            if not os.path.isabs(s) and not _SHELL_SYNTAX & set(s)]


def _did_you_mean(program: Program, rel: str) -> str:
    root = program.repo_root
    sub = program.state_dir.relative_to(root).as_posix()
    if sub not in ("", ".") and (program.state_dir / rel).exists():
        # program.md in a subfolder, the path written from there
        return f" (did you mean {sub}/{rel}? paths are not relative to {sub}/ where {program.path.name} is)"
    folder, _, name = rel.rpartition("/")
    near = closest(name, _names(root / folder))
    return f" (did you mean {(folder + '/' if folder else '') + near}?)" if near else ""
