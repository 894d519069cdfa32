"""Approve mode (`autoloop run --approve`): a person decides each cycle that changed something.

``before`` the verifier runs (``--approve=before`` / ``both``): *verify*, *skip* (discarded
unmeasured) or *quit*; ``after`` it was measured (``after``, the default, or ``both``): *keep* or
*discard* whatever the ratchet recommends, or *quit*. A note becomes the cycle's lesson; the
ledger says ``decided_by: "human"`` and keeps the ratchet's ``recommendation``.
`TerminalReviewer` is presentation, built by the CLI; the loop sees only `Reviewer`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import termios
import tty
from dataclasses import dataclass
from typing import IO, Callable, Literal, Protocol, Sequence

from autoloop.errors import UsageError
from autoloop.base.numbers import num as fmt, pct, signed_pct
from autoloop.engine.verify import GuardResult

Action = Literal["keep", "discard", "verify", "skip", "quit"]
FILES_SHOWN = 8
SCREEN_LINES_KEPT = 14     # lines of a review around its diff: the diff gets the rest of the screen
MIN_DIFF_LINES = 5
MAX_RULE = 100


@dataclass(frozen=True)
class Review:
    """What a person sees about one candidate."""

    when: str                      # "before" (not measured yet) | "after"
    cycle: int
    hypothesis: str
    incumbent: str                 # commit
    candidate: str                 # commit (the exact tree that is or would be measured)
    files: tuple[str, ...]
    diffstat: str
    diff: str
    metric_name: str
    direction: str
    best: float | None             # the incumbent's metric (paired: its runs beside the candidate)
    metric: float | None           # the candidate's (after only; None when it crashed)
    guards: tuple[GuardResult, ...]
    recommendation: str | None     # the ratchet's status (after only): keep, discard, crash, guard_fail
    verdict: str                   # the ratchet's result line (with its statistics when it has any)
    change: str | None = None      # paired: the change the verdict states (the estimate over the pairs)

    @property
    def keepable(self) -> bool:
        return self.when == "after" and self.metric is not None and all(g.ok for g in self.guards)


@dataclass(frozen=True)
class Decision:
    action: Action
    note: str = ""


class Reviewer(Protocol):
    when: frozenset[str]           # subset of {"before", "after"}

    def decide(self, review: Review) -> Decision: ...


def stages(mode: str) -> frozenset[str]:
    """--approve value (after, before or both: argparse's choices) → where a person is asked."""
    return frozenset(("before", "after")) if mode == "both" else frozenset((mode,))


def human_outcome(review: Review, decision: Decision, ratchet_lesson: str | None,
                  feedback: str | None = None) -> tuple[str, str, str]:
    """The (status, lesson, result) recorded for a person's decision. Statuses stay within the
    contract's set: a skipped or quit candidate is a `discard`, a discarded crash stays a
    `crash`, and only a measured candidate that passed its guards can be kept. `feedback`: a
    paired cycle's coarse change, what its lesson tells the generator instead of the numbers."""
    note = " ".join(decision.note.split())
    if review.metric is None:
        measured = ""
    elif review.change is not None:
        # the change the ratchet's verdict states, not the one between the two medians
        measured = f": {review.change} against the incumbent measured beside it"
    else:
        measured = f": {review.metric_name} {fmt(review.best)} → {fmt(review.metric)}{_pct(review.best, review.metric)}"
    told = f": {feedback}" if feedback and measured else measured
    rec = review.recommendation
    if review.when == "before" or decision.action in ("skip", "verify"):
        why = ("not verified: the person quit the run before verifying it" if decision.action == "quit"
               else "skipped by the person before verification")
        return "discard", note or why, f"discard (the person's decision): {why}"
    if decision.action == "keep" and review.keepable:
        lesson = f"kept by the person{told}" + ("" if rec == "keep" else f" (the ratchet said {rec})")
        return "keep", note or lesson, f"keep (the person's decision; the ratchet said {rec}){measured}"
    # discard, quit, or a keep that cannot be honoured
    status = rec if rec in ("crash", "guard_fail") else "discard"
    if decision.action == "quit":
        why = "not kept: the person quit the run at this cycle"
    elif rec == "keep":
        why = "discarded by the person although the ratchet would have kept it"
    else:
        why = ratchet_lesson or "discarded by the person"
    return status, note or (why + told if rec == "keep" else why), \
        f"{status} (the person's decision; the ratchet said {rec}){measured or ': ' + review.verdict}"


def _pct(old: float | None, new: float | None) -> str:
    d = pct(old, new)
    return f" ({signed_pct(d)})" if d is not None else ""


_GREEN, _RED, _YELLOW, _BOLD, _DIM, _CYAN, _RESET = ("\x1b[32m", "\x1b[31m", "\x1b[33m", "\x1b[1m",
                                                     "\x1b[2m", "\x1b[36m", "\x1b[0m")
_LABELS = {"keep": "[k]eep", "discard": "[d]iscard", "verify": "[y] verify", "skip": "[s]kip"}
_HELP_COMMON = ("v  view the full diff (through $PAGER when set; q leaves it)",
                "n  write a note; it becomes the cycle's lesson (what the generator learns)",
                "q  quit: this candidate is not kept, the journal is closed, the run ends (exit 0)")


class TerminalReviewer:
    """Asks on the terminal: one key per choice (no Enter needed), a line for the note."""

    def __init__(self, mode: str, *, out: IO[str], color: bool, pause: Callable[[], None],
                 resume: Callable[[], None]) -> None:
        self.when = stages(mode)
        self.stdin = sys.stdin
        self.out = out
        self.color = color
        self._pause, self._resume = pause, resume
        self.quit_requested = False

    def stop_reason(self) -> str:
        """The loop's stop_check: after a quit, the run ends on a stop condition (exit 0)."""
        return "quit by the person (approve mode)" if self.quit_requested else ""

    @staticmethod
    def check_terminal() -> None:
        try:
            ok = sys.stdin.isatty()
        except (AttributeError, ValueError):
            ok = False
        if not ok:
            raise UsageError("--approve needs a terminal to ask you on (standard input is not one); "
                             "run it in a terminal, or drop --approve to let the ratchet decide")

    def decide(self, review: Review) -> Decision:
        self._pause()
        try:
            return self._decide(review)
        finally:
            self._resume()

    def _decide(self, r: Review) -> Decision:
        self._show(r)
        note = ""
        keys = {"y": "verify", "s": "skip"} if r.when == "before" else \
            ({"k": "keep", "d": "discard"} if r.keepable else {"d": "discard"})
        while True:
            opts = [_LABELS[a] for a in keys.values()] + ["[v]iew diff", "[n]ote", "[q]uit", "[?]"]
            self.out.write(self._c(_BOLD, f"cycle {r.cycle}: ") + "  ".join(opts)
                           + (f" note: {note!r}" if note else "") + " > ")
            self.out.flush()
            key = self._key()
            if key in keys:
                self._line(f"→ {keys[key]}" + (f" (note: {note})" if note else ""))
                return Decision(keys[key], note)  # type: ignore[arg-type]
            if key in ("q", ""):      # "": end of input, nobody is there any more
                self.quit_requested = True
                if key:
                    self._line("→ quit: this candidate is not kept; the run stops after recording it")
                return Decision("quit", note)
            if key == "v":
                self.page(r.diff or "(empty diff)\n")
            elif key == "n":
                note = self._read_line("note (becomes the lesson; empty keeps the old one): ") or note
            elif key in ("?", "h", "\n"):
                self._help(r)
            else:
                self._line(f"unknown key {key!r}; press ? for help")

    def _c(self, code: str, text: str) -> str:
        return f"{code}{text}{_RESET}" if self.color else text

    def _line(self, text: str = "") -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def _show(self, r: Review) -> None:
        width, height = shutil.get_terminal_size((100, 30))
        rule = "─" * max(10, min(width, MAX_RULE) - 1)
        stage = "before verification" if r.when == "before" else "after verification"
        self._line(self._c(_BOLD, f" cycle {r.cycle} · review {stage} ".center(len(rule), "─")))
        self._line(self._c(_BOLD, "Hypothesis: ") + " ".join(r.hypothesis.split()))
        self._line(f"Changed: {', '.join(r.files[:FILES_SHOWN])}{' …' if len(r.files) > FILES_SHOWN else ''}"
                   + (f"  ({r.diffstat})" if r.diffstat else ""))
        lines = r.diff.splitlines()
        room = max(MIN_DIFF_LINES, height - SCREEN_LINES_KEPT)
        for ln in lines[:room]:
            self._line(self._diff_line(ln[:width - 1] if width > 20 else ln))
        if len(lines) > room:
            self._line(self._c(_DIM, f"… {len(lines) - room} more diff lines: press v to view the full diff"))
        if r.when == "before":
            self._line(f"Incumbent {r.metric_name}: {fmt(r.best)} ({r.direction}); not measured yet")
            return
        for g in r.guards:
            self._line(f"Guard {g.name}: {self._c(_GREEN, 'pass') if g.ok else self._c(_RED, 'FAIL')} ({g.detail})")
        if r.metric is None:
            self._line(f"{r.metric_name}: {self._c(_RED, 'no metric')}  (incumbent {fmt(r.best)})")
        else:
            shade = _GREEN if r.recommendation == "keep" else _YELLOW
            # paired, the two are medians and the change is the verdict's estimate under them:
            # a % between the medians here would be a second, different change
            how = " (medians of this cycle's pairs)" if r.change is not None else _pct(r.best, r.metric)
            self._line(f"{r.metric_name}: {self._c(shade, fmt(r.metric))} vs incumbent "
                       f"{fmt(r.best)}{how}  ({r.direction})")
        rec = r.recommendation or "?"
        self._line(self._c(_BOLD, "Ratchet recommends: ") + self._c(_GREEN if rec == "keep" else _YELLOW, rec)
                   + f"  — {r.verdict}")

    def _diff_line(self, ln: str) -> str:
        if ln.startswith("@@"):
            return self._c(_CYAN, ln)
        if ln[:1] in ("+", "-") and ln[:3] not in ("+++", "---"):
            return self._c(_GREEN if ln[0] == "+" else _RED, ln)
        return ln

    def _help(self, r: Review) -> None:
        if r.when == "before":
            lines = ["y  verify: run the guards and the verifier on this candidate",
                     "s  skip: discard it without measuring"]
        else:
            lines = ["k  keep: commit it on the run branch (whatever the ratchet says)" if r.keepable else
                     "   (it has no metric or failed a guard, so it cannot be kept)",
                     "d  discard: restore the incumbent exactly"]
        for line in [*lines, *_HELP_COMMON]:
            self._line(line)

    def _key(self) -> str:
        """One key press, without Enter, echoed; Ctrl-C still interrupts (ISIG stays on). "" when
        the terminal is gone (its hangup ignored, as under `trap '' HUP`: reads fail with EIO)."""
        try:
            fd = self.stdin.fileno()
            old = termios.tcgetattr(fd)
            try:
                tty.setcbreak(fd)
                ch = os.read(fd, 1).decode(errors="replace")
            finally:
                termios.tcsetattr(fd, termios.TCSADRAIN, old)
        except (OSError, termios.error):
            return ""
        self._line(ch if ch.isprintable() else "")
        return "\n" if ch == "\r" else ch.lower()

    def _read_line(self, prompt: str) -> str:
        """A line in the terminal's own (cooked) mode: one read returns one line ("" when the
        terminal is gone)."""
        try:
            self.out.write(prompt)
            self.out.flush()
            return os.read(self.stdin.fileno(), 4096).decode(errors="replace").rstrip("\r\n")
        except OSError:
            return ""

    def page(self, text: str) -> None:
        """$PAGER when set (run by a shell, text on its stdin); else a small built-in pager."""
        pager = os.environ.get("PAGER", "").strip()
        if pager:
            try:
                # the person's own pager at their terminal: an interactive child, not a
                # measured command (proc's bounded capture would hide it)
                subprocess.run(pager, shell=True, input=text.encode(errors="replace"), check=False)
                return
            except OSError:
                pass
        self._builtin_pager(text.splitlines())

    def _builtin_pager(self, lines: Sequence[str]) -> None:
        step = max(MIN_DIFF_LINES, shutil.get_terminal_size((100, 30)).lines - 2)
        for i in range(0, len(lines), step):
            for ln in lines[i:i + step]:
                self._line(self._diff_line(ln))
            if i + step >= len(lines):
                break
            self.out.write(self._c(_DIM, f"-- {i + step}/{len(lines)} lines: space/enter more, q back "
                                         "to the choices -- "))
            self.out.flush()
            if self._key() in ("q", ""):
                return
        # a key ends the view, so the `q` that leaves a pager is not read as "quit the run"
        self.out.write(self._c(_DIM, "(end of diff) -- any key goes back to the choices -- "))
        self.out.flush()
        self._key()
