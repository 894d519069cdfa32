"""`autoloop init`: write a program.md from a template shipped with the package.

The templates (autoloop/commands/templates/*.md) are valid program.md files as written: their placeholder
values parse, so `autoloop verify` points at the first thing to edit (the verifier command)
instead of at a syntax error.
"""

from __future__ import annotations

import argparse
import shlex
from importlib import resources
from pathlib import Path

from autoloop.errors import UsageError
from autoloop.program.frontmatter import closest

# name -> one line for `autoloop init --list`, in the order listed
TEMPLATES: dict[str, str] = {
    "generic": "any project: one command prints `NAME: NUMBER`, one folder is editable",
    "ml": "ML training run, autoresearch-shaped: fixed time budget, one val_loss line",
    "speed": "make code faster: autoloop times a benchmark from outside, a score checks its results",
    "testpass": "raise the number of passing tests without touching the tests",
}

# why the template measures the way it does, printed by `autoloop init` (two lines each)
CHOICE: dict[str, tuple[str, str]] = {
    "speed": ("measure: wall — autoloop times the benchmark from outside, so nothing the candidate's code "
              "prints, patches or exits with is the number;",
              "score re-checks every result for inputs drawn from $AUTOLOOP_SEED, so a fast wrong answer is never "
              "kept and one memorised for earlier inputs misses, if the inputs rarely repeat. "
              "`autoloop doctor --probe` tries the known hacks."),
    "ml": ("score — the metric comes from a separate process of the start commit reading the predictions, "
           "so the training run cannot print or patch it;",
           "private keeps the held-out labels from the generator and the training run. "
           "`autoloop doctor --probe` tries the known hacks."),
}


def template_text(name: str) -> str:
    """The template's text; UsageError (with a did-you-mean) for an unknown name."""
    if name not in TEMPLATES:
        close = closest(name, list(TEMPLATES))
        hint = f"did you mean '{close}'? " if close else ""
        raise UsageError(f"unknown template '{name}'; {hint}choose one of: {', '.join(TEMPLATES)}")
    return resources.files("autoloop.commands").joinpath("templates", f"{name}.md").read_text(encoding="utf-8")


def init_program(path: Path, template: str = "generic") -> list[str]:
    """Write `path` (or `path`/program.md when it is a directory) from `template`, never over an
    existing file. Returns the three commands a user runs next, the path spelled as given so
    they can be pasted as they are."""
    text = template_text(template)
    target = path / "program.md" if path.is_dir() else path
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # "x": checking and creating in one step, so a file appearing in between is not clobbered
        with open(target, "x", encoding="utf-8") as f:
            f.write(text)
    except FileExistsError:
        raise UsageError(f"{target} already exists; not overwriting it "
                         f"(move it away or give another path)") from None
    except OSError as exc:
        raise UsageError(f"cannot write {target}: {exc.strerror or exc}") from None
    shown = shlex.quote(str(target))
    return [
        f"autoloop verify {shown}",
        f"autoloop run {shown} --tag first --cycles 3",
        f"autoloop log {shown}",
    ]


def main(args: argparse.Namespace) -> int:
    from autoloop.commands.init import CHOICE, TEMPLATES, init_program

    if getattr(args, "trace", None) is not None:
        from autoloop.commands.init_trace import main as traced

        return traced(args)
    if args.target:
        raise UsageError("--target names what --trace records; give --trace COMMAND too")
    if args.list:
        for name, desc in TEMPLATES.items():
            print(f"{name:<10} {desc}")
        return 0
    target = Path(args.path)
    steps = init_program(target, args.template)
    print(f"wrote {target / 'program.md' if target.is_dir() else target}.")
    for line in CHOICE.get(args.template, ()):
        print(f"  {line}")
    print("Next:")
    for s in steps:
        print(f"  {s}")
    return 0
