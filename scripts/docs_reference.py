"""Write the generated parts of the reference pages, so they cannot drift from the code:

- docs/reference/commands.md: every command's usage and options, from the argument parser
  (autoloop.cli.build_parser);
- docs/reference/program.md: every program.md key, from the schema
  (autoloop.program.reader.known_keys): its type, description, what leaving it out means and an
  example from autoloop.program.keydocs, its default from the specs it is read into. A key
  without an entry in keydocs (or an entry for a key the schema does not have) stops the script
  with an error naming it: a new key is described before the page can be written.

Each part sits between `<!-- generated: NAME -->` and `<!-- /generated -->`; the rest of the
page is written by hand. `python scripts/docs_reference.py` rewrites them; `--check` exits 1
when a page differs from what it would write (tests/test_docs.py runs the same comparison).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autoloop.cli import build_parser  # noqa: E402
from autoloop.program.reader import known_keys  # noqa: E402

COMMANDS_PAGE = ROOT / "docs" / "reference" / "commands.md"
KEYS_PAGE = ROOT / "docs" / "reference" / "program.md"
EXAMPLE = ROOT / "program.md.example"
BLOCK = re.compile(r"(<!-- generated: (\w+) -->\n)(.*?)(<!-- /generated -->)", re.S)


def _cell(text: str) -> str:
    # a `|` inside a table cell ends the cell, even in code: the entity keeps it a character
    return text.replace("|", "&#124;").replace("\n", " ")


def _code(text: str) -> str:
    return f"<code>{_cell(text.replace('&', '&amp;').replace('<', '&lt;'))}</code>"


def commands_markdown() -> str:
    # argparse keeps its subcommands and arguments in underscore attributes only; they have been
    # stable for a decade, and a change would fail this script loudly, not silently
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help for c in sub._choices_actions}
    out = []
    for name, cmd in sub.choices.items():
        usage = " ".join(cmd.format_usage().split())
        usage = usage.removeprefix("usage: ")
        out += [f"### `autoloop {name}`", "", helps.get(name, "") + ".", "", "```text", usage, "```", ""]
        rows = []
        for action in cmd._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            if action.option_strings:
                flags = ", ".join(action.option_strings)
                if action.nargs != 0:
                    meta = action.metavar or (("{" + ",".join(action.choices) + "}") if action.choices
                                              else action.dest.upper())
                    flags += f" {meta}"
            else:
                flags = action.metavar or action.dest.upper()
            text = (action.help or "").replace("%%", "%")
            if action.required:
                text += " (required)"
            rows.append(f"| {_code(flags)} | {_cell(text)} |")
        if rows:
            out += ["| argument | meaning |", "| --- | --- |", *rows, ""]
    return "\n".join(out)


def _defaults() -> dict[str, str]:
    """The default of every key that has one, read from the frozen specs program.md becomes."""
    import dataclasses

    from autoloop.base import specs

    sections = {"verifier": specs.VerifierSpec, "guards[]": specs.GuardSpec, "generator": specs.GeneratorSpec,
                "stop": specs.StopSpec, "accept": specs.AcceptSpec, "limits[]": specs.LimitSpec,
                "holdout": specs.HoldoutSpec, "sandbox": specs.SandboxSpec, "resources": specs.ResourcesSpec,
                "parallel": specs.ParallelSpec, "": specs.Program}
    out = {}
    for prefix, cls in sections.items():
        for f in dataclasses.fields(cls):
            if f.default is dataclasses.MISSING:
                continue
            value = f.default
            if isinstance(value, specs.Amount):
                value = f"{value.value:g}%" if value.relative else f"{value.value:g}"
            elif isinstance(value, float) and value.is_integer():
                value = int(value)
            elif isinstance(value, bool):
                value = str(value).lower()
            if value in (None, (), "", {}):
                continue
            out[f"{prefix}.{f.name}" if prefix else f.name] = str(value)
    out["sandbox"] = out.pop("sandbox.kind", "auto")
    return out


# defaults the paired rule puts in place of the dataclass's (autoloop.program.schema._build_accept)
_PAIRED = {"accept.min_effect": "0; 1% with rule: paired", "accept.alpha": "0.05; 0.005 with rule: paired",
           "accept.pairs": "8; 16 with rule: paired",
           # the generator's sandbox keeps the network for the agent CLIs (autoloop.program.schema)
           "sandbox.network": "false; true for claude, codex and aider, which need their API"}


def _example_line(key: str, lines: list[str]) -> int | None:
    """The line of program.md.example that shows `key` (commented out or not), within its section."""
    top, _, rest = key.replace("[]", "").partition(".")
    pattern = re.compile(r"\s*(#\s*)?(- )?(\{)?" + re.escape(rest.split(".")[-1] if rest else top) + ":")
    start = next((n for n, text in enumerate(lines) if re.match(rf"(#\s*)?{re.escape(top)}:", text)), None)
    if start is None:
        return None
    if not rest:
        return start + 1
    for n in range(start + 1, len(lines)):
        if re.match(r"(#\s*)?[a-z_]+:", lines[n]):      # the next top-level key
            return None
        if pattern.match(lines[n]):
            return n + 1
    return None


class UndescribedKey(Exception):
    """A schema key without a description in autoloop.program.keydocs, or the reverse."""


def _inline(text: str) -> str:
    """Markdown's `code` spans, in a cell whose code is written as HTML."""
    return re.sub(r"`([^`]+)`", lambda m: _code(m.group(1)), _cell(text))


def keys_markdown() -> str:
    from autoloop.program.keydocs import KEYS

    keys = known_keys()
    missing = [k for k in keys if k not in KEYS or not KEYS[k].text.strip()]
    stale = [k for k in KEYS if k not in keys]
    if missing or stale:
        raise UndescribedKey("; ".join(
            ([f"no description for {', '.join(missing)}: add it to autoloop/program/keydocs.py"] if missing else [])
            + ([f"described but not in the schema: {', '.join(stale)}"] if stale else [])))
    defaults = {**_defaults(), **_PAIRED}
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    out: list[str] = []
    for key in keys:
        doc = KEYS[key]
        top = key.split(".")[0].removesuffix("[]")
        if key == top.removesuffix("[]") or key == top + "[]":
            out += [f"### `{top}`", ""]
        if key in defaults:
            default = "default " + (_code(defaults[key]) if ";" not in defaults[key] else _cell(defaults[key]))
        elif doc.unset:
            default = _inline(doc.unset) if doc.unset.startswith("required") else f"if left out: {_inline(doc.unset)}"
        else:
            raise UndescribedKey(f"{key} has no default: say in keydocs what leaving it out means")
        line = _example_line(key, lines)
        where = f" ([program.md.example](example.md) line {line})" if line else ""
        text = f"{_inline(doc.type)}; {default}.  \n  {_inline(doc.text)} Example: {_code(doc.example)}{where}."
        leaf = not any(k.startswith((key + ".", key + "[].")) for k in keys)
        if leaf and "." not in key:   # a top-level key with nothing under it: its heading names it
            out += [f"<code>{key}</code>: " + text.replace("  \n  ", "<br>\n", 1), ""]
        else:
            out += [f"- **{_code(key)}** — " + text, ""]
    return "\n".join(out)


def render(page: Path) -> str:
    parts = {"commands": commands_markdown, "keys": keys_markdown}
    text = page.read_text(encoding="utf-8")
    return BLOCK.sub(lambda m: m.group(1) + parts[m.group(2)]() + m.group(4), text)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for page in (COMMANDS_PAGE, KEYS_PAGE):
        try:
            new = render(page)
        except UndescribedKey as exc:
            print(f"docs_reference: {exc}", file=sys.stderr)
            return 1
        if new != page.read_text(encoding="utf-8"):
            stale.append(page.relative_to(ROOT))
            if not check:
                page.write_text(new, encoding="utf-8")
    if check and stale:
        print("stale: " + ", ".join(map(str, stale)) + "; run python scripts/docs_reference.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
