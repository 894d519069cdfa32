"""The tutorial runs as written: its files are written where their titles say, its `sh` blocks
run in order in one shell in a fresh folder, each block that is not run says why in its first
line. Claude Code is the fake CLI of tests/fakes (a real one needs an account); its edit is the
obvious speed-up, so the one cycle the tutorial runs has something to keep."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TUTORIAL = ROOT / "docs" / "tutorial.md"
FAKES = ROOT / "tests" / "fakes"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.M | re.S)
TITLE = re.compile(r'title="([^"]+)"')
NOT_RUN = "# not run by the docs test: "
FASTER = '''"""Word statistics."""
import collections


def word_counts(text: str) -> dict[str, int]:
    """How often each whitespace-separated word occurs in `text`."""
    return dict(collections.Counter(text.split()))


def top_words(text: str, n: int) -> list[tuple[str, int]]:
    """The `n` most frequent words, most frequent first, ties in alphabetical order."""
    return sorted(word_counts(text).items(), key=lambda kv: (-kv[1], kv[0]))[:n]
'''


def blocks(text: str) -> list[tuple[str, str | None, str]]:
    """(language, title or None, body) of every fenced block, in order."""
    out = []
    for m in FENCE.finditer(text):
        title = TITLE.search(m.group(2))
        out.append((m.group(1), title.group(1) if title else None, m.group(3)))
    return out


def script(text: str) -> tuple[str, list[str]]:
    """One bash script doing what the page says, in order; and the reasons of blocks not run."""
    lines, skipped = ["set -euo pipefail"], []
    for n, (lang, title, body) in enumerate(blocks(text)):
        if title:
            quoted = shlex.quote(title)
            lines += [f"mkdir -p \"$(dirname {quoted})\"", f"cat > {quoted} <<'DOCS_EOF_{n}'",
                      body.rstrip("\n"), f"DOCS_EOF_{n}"]
        elif lang == "sh":
            if body.startswith(NOT_RUN):
                skipped.append(body.splitlines()[0][len(NOT_RUN):])
                continue
            lines += [f"echo '>>> block {n}' >&2", body]
    return "\n".join(lines) + "\n", skipped


def test_every_block_is_run_or_says_why() -> None:
    kinds = blocks(TUTORIAL.read_text())
    assert sum(1 for lang, title, _ in kinds if lang == "sh") >= 8
    for lang, title, body in kinds:
        assert title or lang == "sh", f"a block neither run nor written: {body[:80]!r}"
        if body.lstrip().startswith("#") and "not run" in body.splitlines()[0]:
            assert body.startswith(NOT_RUN), body.splitlines()[0]
    _, skipped = script(TUTORIAL.read_text())
    assert all(reason.strip() for reason in skipped)


@pytest.mark.slow   # the tutorial's commands for real, a cycle of `autoloop run` among them
def test_the_tutorial_runs_as_written(tmp_path: Path) -> None:
    """`sh` blocks in one shell, in a fresh folder, with the project's files as shown."""
    text, skipped = script(TUTORIAL.read_text())
    home = tmp_path / "home"
    home.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # the fake Claude Code, found by name as the real one would be
    shutil.copy(FAKES / "claude", bin_dir / "claude")
    shutil.copy(FAKES / "_fakecommon.py", bin_dir / "_fakecommon.py")
    env = {
        "PATH": os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
        "HOME": str(home),
        "GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.org",
        "GIT_COMMITTER_NAME": "Ada", "GIT_COMMITTER_EMAIL": "ada@example.org",
        "FAKE_AGENT_EDIT": __import__("json").dumps({"src/textstats.py": FASTER}),
        "FAKE_AGENT_REPLY": "Counted with collections.Counter.\nHypothesis: Counter counts in C, once.",
        "ANTHROPIC_API_KEY": "sk-test", "NO_COLOR": "1", "AUTOLOOP_DEBUG": "1",
    }
    # `doctor` asks the agent's API host through the egress proxy: a loopback one, never the
    # real api.anthropic.com (tests send traffic to loopback only)
    with socket.create_server(("127.0.0.1", 0)) as api:
        env["ANTHROPIC_BASE_URL"] = f"http://127.0.0.1:{api.getsockname()[1]}"
        res = subprocess.run(["bash", "-c", text],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-4000:] + res.stdout[-2000:]
    project = tmp_path / "textstats"
    assert "all " in res.stdout and "counts right" in res.stdout          # the score by hand
    rows = (project / "results.tsv").read_text().splitlines()
    assert [r.split("\t")[3] for r in rows[1:]] == ["baseline", "keep"], rows
    assert (project / ".autoloop" / "tonight" / "report.html").is_file()
    assert len(skipped) == 4, skipped   # init --trace (the page goes on by hand), the probe, the night, the merge
