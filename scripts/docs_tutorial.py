"""Run docs/tutorial.md as a reader would, and write what each command printed under it.

The page is a sequence of fenced blocks: a block with a `title="PATH"` is a file the reader
writes; an `sh` block is commands, run in order in one bash shell from a fresh folder (its first
line `# not run by the docs test: WHY` skips it, saying why); a `text` block between
`<!-- transcript: NAME … -->` and `<!-- /transcript -->` is what the `sh` block before it printed
(stdout and stderr as a terminal shows them). Claude Code is the fake CLI of tests/fakes (a real
one needs an account); its edit is the obvious speed-up, so the one cycle the page runs has
something to keep.

    python scripts/docs_tutorial.py           # run the page, rewrite its transcripts
    python scripts/docs_tutorial.py --check   # run it, exit 1 where a transcript differs

What is compared (`comparable`) is the lines a reader checks a step by (statuses, verdicts, the
`ok` lines of doctor), up to their fourth word, numbers and commits masked: times and measured
values differ from run to run, and a busy machine adds a noise warning a quiet one does not.
tests/test_docs_tutorial.py runs the same comparison.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "tutorial.md"
FAKES = ROOT / "tests" / "fakes"
NOT_RUN = "# not run by the docs test: "
_BLOCK = re.compile(r"(<!-- transcript: ([\w-]+)[^\n]*-->\n)?^```(\w+)([^\n]*)\n(.*?)^```(\n<!-- /transcript -->)?",
                    re.M | re.S)
_TITLE = re.compile(r'title="([^"]+)"')
_MARK = "@@@ docs block {} @@@"
FASTER = '''"""Word statistics."""
import collections


def word_counts(text: str) -> dict[str, int]:
    """How often each whitespace-separated word occurs in `text`."""
    return dict(collections.Counter(text.split()))


def top_words(text: str, n: int) -> list[tuple[str, int]]:
    """The `n` most frequent words, most frequent first, ties in alphabetical order."""
    return sorted(word_counts(text).items(), key=lambda kv: (-kv[1], kv[0]))[:n]
'''


@dataclass
class Block:
    lang: str
    title: str | None       # a file the reader writes
    body: str
    transcript: str | None  # the name of a transcript block
    span: tuple[int, int]   # where its body sits in the page


def blocks(text: str) -> list[Block]:
    out = []
    for m in _BLOCK.finditer(text):
        title = _TITLE.search(m.group(4))
        out.append(Block(m.group(3), title.group(1) if title else None, m.group(5), m.group(2), m.span(5)))
    return out


def script(text: str) -> tuple[str, list[str], dict[str, int]]:
    """One bash script doing what the page says, in order; the reasons of the blocks not run;
    and which run block each transcript quotes (by the block's number)."""
    lines, skipped, quotes, last = ["set -euo pipefail", "exec 2>&1"], [], {}, None
    for n, b in enumerate(blocks(text)):
        if b.transcript:
            if last is None:
                raise ValueError(f"transcript {b.transcript} follows no command block")
            quotes[b.transcript] = last
        elif b.title:
            quoted = shlex.quote(b.title)
            lines += [f"mkdir -p \"$(dirname {quoted})\"", f"cat > {quoted} <<'DOCS_EOF_{n}'",
                      b.body.rstrip("\n"), f"DOCS_EOF_{n}"]
        elif b.lang == "sh":
            if b.body.startswith(NOT_RUN):
                skipped.append(b.body.splitlines()[0][len(NOT_RUN):])
                continue
            lines += [f"echo {n} $(date +%s.%N) >> \"$DOCS_TIMES\"", f"echo '{_MARK.format(n)}'", b.body]
            last = n
        else:
            raise ValueError(f"a block neither run, written nor quoted: {b.body[:80]!r}")
    lines.append('echo end $(date +%s.%N) >> "$DOCS_TIMES"')
    return "\n".join(lines) + "\n", skipped, quotes


def run(work: Path, text: str | None = None) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """The page's commands in a fresh folder `work`; the finished shell and each transcript's
    output, with the folders written as a reader's (`~`)."""
    text = PAGE.read_text(encoding="utf-8") if text is None else text
    body, _, quotes = script(text)
    home, bin_dir, tmp = work / "home", work / "bin", work / "tmp"
    for d in (home, bin_dir, tmp):
        d.mkdir()
    # the fake Claude Code, found by name as the real one would be
    shutil.copy(FAKES / "claude", bin_dir / "claude")
    shutil.copy(FAKES / "_fakecommon.py", bin_dir / "_fakecommon.py")
    env = {
        "PATH": os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
        "HOME": str(home), "TMPDIR": str(tmp), "LANG": "C.UTF-8", "COLUMNS": "120",
        "GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.org",
        "GIT_COMMITTER_NAME": "Ada", "GIT_COMMITTER_EMAIL": "ada@example.org",
        "FAKE_AGENT_EDIT": json.dumps({"src/textstats.py": FASTER}),
        "FAKE_AGENT_REPLY": "Counted with collections.Counter.\nHypothesis: Counter counts in C, once.",
        "ANTHROPIC_API_KEY": "sk-test", "NO_COLOR": "1", "DOCS_TIMES": str(work / "times"),
    }
    # `doctor` asks the agent's API host through the egress proxy: here a loopback stand-in named
    # by ANTHROPIC_BASE_URL, never the real api.anthropic.com (the docs' runs reach loopback only)
    with socket.create_server(("127.0.0.1", 0)) as api:
        env["ANTHROPIC_BASE_URL"] = f"http://127.0.0.1:{api.getsockname()[1]}"
        res = subprocess.run(["bash", "-c", body], cwd=work, env=env, capture_output=True, text=True, timeout=1500)
    shown = res.stdout.replace(str(home), "~").replace(str(work), "~")
    parts = re.split(r"^@@@ docs block (\d+) @@@\n", shown, flags=re.M)
    by_block = {int(parts[i]): parts[i + 1] for i in range(1, len(parts) - 1, 2)}
    return res, {name: by_block.get(n, "").rstrip("\n") + "\n" for name, n in quotes.items()}


_VARYING = [re.compile(p) for p in (
    r"(?<![.\d])\b[0-9a-f]{7,40}\b",            # commits (not the digits after a number's point)
    r"[-+]?\d+(?:[.,]\d+)*(?:e[-+]?\d+)?",      # every number: times, values, changes, counts of runs
)]
# the lines a reader checks a step by (the page names them), read up to their fourth word:
# the statuses and verdicts, not the wording around numbers that a quieter machine changes
_MATTERS = re.compile(r"(?:cycle # +(?:baseline|keep|discard|crash|guard_fail|violation|no_change|gen_error)\b"
                      r"|final |stopped: |guard |score: |seconds: |ok |warn |FAIL |doctor: |verifying |wrote "
                      r"|baseline |best |keep rate |by status |# passed|all # counts|program\.md:# |exit #|edit program"
                      r"|# +(?:baseline|keep|discard|crash|guard_fail|violation|no_change|gen_error)\b)")


def comparable(text: str) -> list[str]:
    """What two runs of the page on two machines must agree on: the lines that matter, numbers
    and commits masked, up to their fourth word; not what a loaded machine adds (the noise
    warning) nor how the reads were recorded (strace where it is installed)."""
    out = []
    for line in text.splitlines():
        for pattern in _VARYING:
            line = pattern.sub("#", line)
        line = " ".join(line.split())
        if _MATTERS.match(line) and not re.search(r"strace|audit hook", line):
            out.append(" ".join(line.split()[:4]))
    return out


def quoted(text: str) -> dict[str, str]:
    return {b.transcript: b.body for b in blocks(text) if b.transcript}


def write(text: str, outputs: dict[str, str]) -> str:
    for b in sorted((b for b in blocks(text) if b.transcript), key=lambda b: -b.span[0]):
        text = text[:b.span[0]] + outputs[b.transcript] + text[b.span[1]:]
    return text


def main(argv: list[str]) -> int:
    text = PAGE.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="autoloop-tutorial-") as work:
        res, outputs = run(Path(work), text)
    if res.returncode != 0:
        print(res.stdout[-4000:], file=sys.stderr)
        print(f"the tutorial failed (exit {res.returncode})", file=sys.stderr)
        return 1
    if "--check" in argv:
        stale = [name for name, body in quoted(text).items() if comparable(body) != comparable(outputs[name])]
        if stale:
            print("differs from a fresh run: " + ", ".join(stale), file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(write(text, outputs), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
