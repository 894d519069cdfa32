"""`sandbox.hide`: the user's own paths no sandbox reads (autoloop.isolation.hidden hides them
with the home's credential places). Its checks: absolute paths, `~` and one-level globs, none the
sandboxes would show again over it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Sequence

import yaml

from autoloop.base.specs import DataSpec, SandboxSpec
from autoloop.program.frontmatter import At, Reader


def hide_paths(host_paths: Callable[[Reader, yaml.Node, At], tuple[str, ...]]) -> Callable[[Reader, yaml.Node, At], tuple[str, ...]]:
    """The check of `sandbox.hide`: `host_paths`' (absolute paths, `~` allowed), whose `*`, `?`
    and `[…]` are matched at each start of a sandbox; `**` would walk whole trees every time."""

    def check(p: Reader, node: yaml.Node, at: At) -> tuple[str, ...]:
        out = host_paths(p, node, at)
        for (where, _), value in zip(p.items(node, at), out):
            if "**" in value:
                p.fail(where.line, f"{where.key}: {value!r}: `**` is not supported (every sandbox would walk "
                                   "the whole tree to match it); name the folders, or use one `*` per level")
            if os.path.normpath(os.path.expanduser(value)) == "/":
                p.fail(where.line, f"{where.key}: {value!r} would hide the whole file system; name the "
                                   "folders or files to hide")
        return out

    return check


def hide_apart(p: Reader, sandbox: SandboxSpec, data: Sequence[DataSpec], repo_root: Path) -> None:
    """A `sandbox.hide` path the sandboxes would show again over it: inside the repository (every
    sandbox sees the files through its own tree) or inside a `sandbox.writable` or `data` path."""
    root = repo_root.resolve()
    shown = [(f"sandbox.writable '{w}'", Path(os.path.expanduser(w)).resolve()) for w in sandbox.writable]
    shown += [(f"data[{i}].path '{d.source}'", d.source) for i, d in enumerate(data)]
    for i, value in enumerate(sandbox.hide):
        full = Path(os.path.expanduser(value))
        full = full.parent.resolve() / full.name if full.name else full.resolve()
        line = p.lines.get(f"sandbox.hide[{i}]", p.lines.get("sandbox.hide", 1))
        if full.is_relative_to(root):
            p.fail(line, f"sandbox.hide[{i}]: {value!r} lies inside the repository, whose files every sandbox "
                         "sees through its own tree; keep it out of the repository (then hide it), or list "
                         "it in `forbidden` so the generator may not change it")
        for what, other in shown:
            if full.is_relative_to(other):
                p.fail(line, f"sandbox.hide[{i}]: {value!r} lies inside {what}, which every sandbox shows "
                             "over it; hide a path outside it, or narrow that path")
