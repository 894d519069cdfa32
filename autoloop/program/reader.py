"""program.md -> a frozen, validated Program (contract §2).

The values are autoloop.base.specs, the schema autoloop.program.schema; every error is one line
`program.md:LINE: message` naming the dotted key (`verifier.timeout`, `guards[1].name`).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from autoloop.errors import ConfigError, RepoStateError, UsageError
from autoloop.git.gitrun import git, run as run_git
from autoloop.program.schema import known_keys, parse_program
from autoloop.base.specs import (GENERATOR_KINDS, MAX_WORKERS, AcceptSpec, Amount, DataSpec, Direction,
                            GeneratorSpec, GuardSpec, HoldoutSpec, LimitSpec, ParallelSpec,
                            PriceSpec, Program, ResourcesSpec, Rule, SandboxSpec, StopSpec,
                            VerifierSpec, guard_name)

__all__ = ["GENERATOR_KINDS", "MAX_WORKERS", "AcceptSpec", "Amount", "DataSpec", "Direction",
           "GeneratorSpec", "GuardSpec", "HoldoutSpec", "LimitSpec", "ParallelSpec", "PriceSpec",
           "Program", "ResourcesSpec", "Rule", "SandboxSpec", "StopSpec", "VerifierSpec",
           "check_data", "data_problem", "guard_name", "known_keys", "load_program", "parse_program"]


def load_program(path: Path | str) -> Program:
    """Read and validate the program file at `path`, in the git repository that holds it."""
    path = Path(path).expanduser().absolute()
    try:
        # a FIFO or a device would block the read (or never end): only regular files
        if path.exists() and not path.is_dir() and not path.is_file():
            raise UsageError(f"cannot read program file {path}: not a regular file")
        source = path.read_bytes()
    except OSError as exc:
        why = {errno.ENOENT: "no such file", errno.EISDIR: "it is a directory"}.get(exc.errno)
        raise UsageError(f"cannot read program file {path}: {why or exc.strerror or exc}") from None
    # git reports the top level with symlinks resolved; resolve ours so one is under the other.
    path = path.resolve()
    return parse_program(source, path, _git_toplevel(path))


def data_problem(program: Program, i: int, head: str | None) -> str | None:
    """What stops data[i] from appearing read-only in a tree of `head` (None: nothing), as one
    `program.md:LINE: key: ...` line; `head` None (no commit yet) skips the collision check."""
    d = program.data[i]
    where = f"{program.path.name}:{program.line(f'data[{i}].path')}: data[{i}].path"
    if not d.source.exists():
        return f"{where}: {str(d.source)!r} does not exist; fix the path or create it"
    if not os.access(d.source, os.R_OK):
        return f"{where}: {str(d.source)!r} is not readable by you; fix its permissions or the path"
    if head and git(program.repo_root, "ls-tree", "--name-only", head, "--", d.target, check=False).strip():
        return (f"{program.path.name}:{program.line(f'data[{i}].as')}: data[{i}].as: {d.target!r} is a path of the repository at "
                f"{head[:12]}; choose a place the repository does not use")
    return None


def check_data(program: Program, head: str | None) -> None:
    """ConfigError naming the first data entry `data_problem` refuses."""
    problem = next(filter(None, (data_problem(program, i, head) for i in range(len(program.data)))), None)
    if problem:
        raise ConfigError(problem)


def _git_toplevel(path: Path) -> Path:
    try:
        out = run_git(path.parent, "rev-parse", "--show-toplevel")
    except OSError as exc:
        raise RepoStateError(f"cannot run git to find the repository of {path}: "
                             f"{exc.strerror or exc}") from None
    top = os.fsdecode(out.stdout).rstrip("\n")
    if out.returncode != 0 and "dubious ownership" in os.fsdecode(out.stderr):
        raise RepoStateError(_not_yours(path, os.fsdecode(out.stderr)))
    if out.returncode != 0 or not top:
        why = os.fsdecode(out.stderr).strip().splitlines()
        detail = f" ({why[-1]})" if why else ""
        raise RepoStateError(f"{path} is not inside a git work tree{detail}; autoloop keeps each "
                             f"improvement as a commit, so start one in your project folder: "
                             f"git init && git add -A && git commit -m start")
    return Path(top).resolve()


def _not_yours(path: Path, stderr: str) -> str:
    """git's safe.directory refusal (a repository owned by another user, e.g. a tarball unpacked
    as root) said as what it is: the repository exists, and `git init` would not help."""
    # git names the exact directory to trust on its own line; reuse it rather than guess
    fix = next((line.strip() for line in stderr.splitlines() if "safe.directory" in line), "")
    fix = fix or "git config --global --add safe.directory <the repository folder>"
    return (f"git refuses the repository holding {path}: it is owned by another user "
            f"(git's 'dubious ownership' check); if you trust it, run: {fix} "
            f"(or chown it to your user), then run autoloop again")
