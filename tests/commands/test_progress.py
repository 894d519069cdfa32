"""The progress display: a live line redrawn with \\r on a terminal, plain lines otherwise,
NO_COLOR respected."""

from __future__ import annotations

import io
import re

import pexpect

from autoloop.commands.progress import Progress, is_live, use_color
from tests.scripts.e2e import PY, make_project

CYCLE0 = {"cycle": 0, "status": "baseline", "metric": 40.0, "best": 40.0, "hypothesis": "baseline",
          "duration_s": 0.2, "gen": {}}
CYCLE1 = {"cycle": 1, "status": "keep", "metric": 30.0, "best": 30.0, "hypothesis": "lower it",
          "duration_s": 1.5, "gen": {"cost_usd": 0.25}, "lesson": "kept"}
CYCLE2 = {"cycle": 2, "status": "crash", "metric": None, "best": 30.0, "hypothesis": "boom",
          "duration_s": 0.5, "gen": {"cost_usd": 0.5}, "lesson": "crash: exit 1"}


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_without_a_terminal():
    out = io.StringIO()
    p = Progress(out, "score")
    for ev in (("phase", {"cycle": 0, "phase": "baseline"}), ("cycle", CYCLE0), ("phase", {"cycle": 1, "phase": "generate"}),
               ("cycle", CYCLE1), ("cycle", CYCLE2), ("stop", {"reason": "x"})):
        p(*ev)
    p.close()
    text = out.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    # the baseline may take minutes (measured twice or more): a log file says what is going on
    assert lines[0] == "cycle    0  measuring the starting commit (guards, then the verifier) …"
    assert lines[1].startswith("cycle    0  baseline")
    # its change, as its lesson, log and report state it
    assert re.match(r"cycle    1  keep\s+score\s+30\s+best\s+30\s+-25\.00%\s+1\.5s  lower it", lines[2]), lines[2]
    assert lines[4].strip() == "crash: exit 1"
    assert len(lines) == 5          # the quick phases (generate) get no line of their own


def test_plain_log_says_when_the_end_of_run_check_starts():
    out = io.StringIO()
    p = Progress(out, "score")
    p("cycle", CYCLE1)
    p("phase", {"cycle": 1, "phase": "final check"})
    p.close()
    assert out.getvalue().splitlines()[-1] == "cycle    1  end-of-run check: re-measuring the best against the start …"


def test_ci_timestamps_and_phase_lines():
    out = io.StringIO()
    now = [100.0]
    p = Progress(out, "score", timestamps=True, clock=lambda: now[0])
    p("phase", {"cycle": 1, "phase": "generate"})
    now[0] = 165.0
    p("phase", {"cycle": 1, "phase": "verify"})
    p("cycle", CYCLE1)
    lines = out.getvalue().splitlines()
    assert lines[0] == "[00:00:00] cycle    1  generate"
    assert lines[1] == "[00:01:05] cycle    1  verify"
    assert lines[2].startswith("[00:01:05] cycle    1  keep")


def test_live_line_is_redrawn_in_place_with_cost_and_elapsed():
    out = FakeTTY()
    now = [0.0]
    p = Progress(out, "score", live=True, color=False, clock=lambda: now[0], tick=3600)
    p("cycle", CYCLE0)
    p("phase", {"cycle": 1, "phase": "generate"})
    now[0] = 75.0
    p("cycle", CYCLE1)
    p("phase", {"cycle": 2, "phase": "verify"})
    status = p.status_line()
    assert status.startswith("cycle 2 · verify 0s")
    assert "best 30 (-25.00%)" in status and "last #1 keep 30" in status
    assert "elapsed 1m15s" in status and "$0.25" in status
    text = out.getvalue()
    assert "\rcycle 2 · verify" in text
    assert "\x1b" not in text                       # color=False: no escape codes at all
    # permanent lines are printed above the live line (it is wiped first)
    assert "\rcycle 1 · generate" in text and "cycle    1  keep" in text
    p.close()


def test_pause_clears_the_live_line():
    out = FakeTTY()
    p = Progress(out, "score", live=True, tick=3600)
    p("phase", {"cycle": 1, "phase": "generate"})
    p.pause()
    assert out.getvalue().endswith("\r")
    n = len(out.getvalue())
    p("phase", {"cycle": 1, "phase": "verify"})        # paused: nothing drawn
    assert len(out.getvalue()) == n
    p.resume()
    assert out.getvalue()[n:].startswith("\rcycle 1 · verify")
    p.close()


def test_color_rules():
    tty = FakeTTY()
    assert use_color(tty, {}) and is_live(tty, {})
    assert not use_color(tty, {"NO_COLOR": "1"}) and is_live(tty, {"NO_COLOR": "1"})
    assert use_color(tty, {"NO_COLOR": ""})           # empty means unset (no-color.org)
    assert not use_color(tty, {"TERM": "dumb"}) and not is_live(tty, {"TERM": "dumb"})
    assert not use_color(io.StringIO(), {}) and not is_live(io.StringIO(), {})


def _run_in_pty(tmp_path, env_extra: dict[str, str]) -> str:
    p = make_project(tmp_path, {"*": 'import time; time.sleep(1.3); hyp(f"try {cycle}"); W("val.txt", str(40 - cycle))'})
    env = {**p.env, "TERM": "xterm", **env_extra}
    child = pexpect.spawn(PY, ["-m", "autoloop", "run", "program.md", "--tag", p.tag, "--cycles", "2"],
                          cwd=str(p.repo), env=env, encoding="utf-8", timeout=60, dimensions=(30, 160))
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    return child.before


def test_live_line_in_a_real_terminal(tmp_path):
    text = _run_in_pty(tmp_path, {})
    assert re.search(r"\r\x1b\[1mcycle 1 · generate \ds", text)      # live, redrawn with \r, in colour
    assert "elapsed" in text and "best 40.25" in text
    assert "\x1b[32mkeep" in text                                     # coloured status
    assert "stopped: max_cycles reached" in text


def test_no_color_in_a_real_terminal(tmp_path):
    text = _run_in_pty(tmp_path, {"NO_COLOR": "1"})
    assert "\x1b" not in text
    assert re.search(r"\rcycle 1 · generate \ds", text)              # still live


def test_best_column_never_shows_a_regression_a_person_kept():
    out = io.StringIO()
    p = Progress(out, "score", direction="minimize")
    kept = {**CYCLE1, "metric": 45.0, "best": 45.0, "decided_by": "human", "recommendation": "discard"}
    later = {**CYCLE2, "cycle": 2, "status": "discard", "metric": 50.0, "best": 45.0}
    better = {**CYCLE1, "cycle": 3, "metric": 35.0, "best": 35.0}
    for rec in (CYCLE0, kept, later, better):
        p("cycle", rec)
    p.close()
    lines = [line for line in out.getvalue().splitlines() if line.startswith("cycle")]
    assert [re.search(r"best\s+(\S+)", line).group(1) for line in lines] == ["40", "40", "40", "35"]
    assert "[you]" in lines[1]
