"""Approve mode (`autoloop run --approve`): a person decides each cycle.

The loop calls a `Reviewer` at two points of a cycle whose candidate really changed something:

- ``before`` the verifier runs (``--approve=before`` / ``both``): *verify* it, *skip* it (it is
  discarded unmeasured), or *quit*;
- ``after`` it was measured (``--approve`` = ``after``, or ``both``): *keep* or *discard* it,
  whatever the ratchet recommends, or *quit*.

Either way the person may add a note, which becomes the cycle's lesson. The decision is what
happens, and the ledger says so: ``decided_by: "human"`` and the ratchet's ``recommendation``.

`TerminalReviewer` is the interactive one. Like the progress line it is presentation: the CLI
builds it with the terminal's streams; the loop only sees the `Reviewer` protocol.
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

from autoloop.journal import pct
from autoloop.numbers import num as fmt, signed_pct
from autoloop.verify import GuardResult

Action = Literal["keep", "discard", "verify", "skip", "quit"]
WHEN = ("after", "before", "both")


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
    best: float | None             # the incumbent's metric
    metric: float | None           # the candidate's (after only; None when it crashed)
    guards: tuple[GuardResult, ...]
    recommendation: str | None     # the ratchet's status (after only): keep, discard, crash, guard_fail
    verdict: str                   # the ratchet's result line (with its statistics when it has any)

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
    """--approve value → the points where a person is asked."""
    if mode not in WHEN:
        raise ValueError(f"--approve must be one of {', '.join(WHEN)}, got {mode!r}")
    return frozenset(("before", "after")) if mode == "both" else frozenset((mode,))


def human_outcome(review: Review, decision: Decision, ratchet_lesson: str | None) -> tuple[str, str, str]:
    """The (status, lesson, result) recorded for a person's decision. Pure.

    Statuses stay within the contract's set: a skipped or quit candidate is a `discard`; a
    discarded crash stays a `crash`; only a measured candidate that passed its guards can be kept.
    """
    note = " ".join(decision.note.split())
    name = review.metric_name
    measured = "" if review.metric is None else \
        f": {name} {fmt(review.best)} → {fmt(review.metric)}{_pct(review.best, review.metric)}"
    rec = review.recommendation
    if review.when == "before" or decision.action in ("skip", "verify"):
        if decision.action == "quit":
            why = "not verified: the person quit the run before verifying it"
        else:
            why = "skipped by the person before verification"
        return "discard", note or why, f"discard (the person's decision): {why}"
    if decision.action == "keep" and review.keepable:
        agreed = rec == "keep"
        lesson = note or (f"kept by the person{measured}" + ("" if agreed else f" (the ratchet said {rec})"))
        return "keep", lesson, f"keep (the person's decision; the ratchet said {rec}){measured}"
    # discard, quit, or a keep that cannot be honoured
    status = rec if rec in ("crash", "guard_fail") else "discard"
    if decision.action == "quit":
        why = "not kept: the person quit the run at this cycle"
    elif rec == "keep":
        why = "discarded by the person although the ratchet would have kept it"
    else:
        why = ratchet_lesson or "discarded by the person"
    return status, note or (why + measured if rec == "keep" else why), \
        f"{status} (the person's decision; the ratchet said {rec}){measured or ': ' + review.verdict}"


def _pct(old: float | None, new: float | None) -> str:
    d = pct(old, new)
    return f" ({signed_pct(d)})" if d is not None else ""


# ---- the terminal ---------------------------------------------------------------------------


class NoTerminal(Exception):
    pass


_GREEN, _RED, _YELLOW, _BOLD, _DIM, _CYAN, _RESET = ("\x1b[32m", "\x1b[31m", "\x1b[33m", "\x1b[1m",
                                                     "\x1b[2m", "\x1b[36m", "\x1b[0m")


class TerminalReviewer:
    """Asks on the terminal: one key per choice (no Enter needed), a line for the note.

    Keys after verification: k keep, d discard, v view the full diff, n note, q quit, ? help.
    Keys before verification: y verify, s skip, v, n, q, ?.
    """

    def __init__(self, mode: str, *, stdin: IO[str] | None = None, out: IO[str] | None = None,
                 color: bool = True, pause: Callable[[], None] = lambda: None,
                 resume: Callable[[], None] = lambda: None) -> None:
        self.when = stages(mode)
        self.stdin = stdin or sys.stdin
        self.out = out or sys.stdout
        self.color = color
        self._pause, self._resume = pause, resume
        self.quit_requested = False

    # the loop's stop_check: after a quit, the run ends on a stop condition (exit 0)
    def stop_reason(self) -> str:
        return "quit by the person (approve mode)" if self.quit_requested else ""

    @staticmethod
    def check_terminal(stdin: IO[str] | None = None) -> None:
        stdin = stdin or sys.stdin
        try:
            ok = stdin.isatty()
        except (AttributeError, ValueError):
            ok = False
        if not ok:
            raise NoTerminal("--approve needs a terminal to ask you on (standard input is not one); "
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
        before = r.when == "before"
        keys = {"y": "verify", "s": "skip"} if before else \
            ({"k": "keep", "d": "discard"} if r.keepable else {"d": "discard"})
        while True:
            self._prompt(r, keys, note)
            key = self._key()
            if key in keys:
                action = keys[key]
                self._line(f"→ {action}" + (f" (note: {note})" if note else ""))
                return Decision(action, note)  # type: ignore[arg-type]
            if key == "q":
                self.quit_requested = True
                self._line("→ quit: this candidate is not kept; the run stops after recording it")
                return Decision("quit", note)
            if key == "v":
                self.page(r.diff or "(empty diff)\n")
            elif key == "n":
                note = self._read_line("note (becomes the lesson; empty keeps the old one): ") or note
            elif key in ("?", "h", "\n"):
                self._help(before, r.keepable)
            elif key == "":  # end of input: nobody is there any more
                self.quit_requested = True
                return Decision("quit", note)
            else:
                self._line(f"unknown key {key!r}; press ? for help")

    # ---- display ----------------------------------------------------------------------------

    def _c(self, code: str, text: str) -> str:
        return f"{code}{text}{_RESET}" if self.color else text

    def _line(self, text: str = "") -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def _show(self, r: Review) -> None:
        width, height = shutil.get_terminal_size((100, 30))
        rule = "─" * max(10, min(width, 100) - 1)
        title = f" cycle {r.cycle} · review {'before verification' if r.when == 'before' else 'after verification'} "
        self._line(self._c(_BOLD, title.center(len(rule), "─")))
        self._line(self._c(_BOLD, "Hypothesis: ") + " ".join(r.hypothesis.split()))
        self._line(f"Changed: {', '.join(r.files[:8])}{' …' if len(r.files) > 8 else ''}"
                   + (f"  ({r.diffstat})" if r.diffstat else ""))
        lines = r.diff.splitlines()
        room = max(5, height - 14)
        for ln in lines[:room]:
            self._line(self._diff_line(ln[:width - 1] if width > 20 else ln))
        if len(lines) > room:
            self._line(self._c(_DIM, f"… {len(lines) - room} more diff lines: press v to view the full diff"))
        if r.when == "after":
            for g in r.guards:
                mark = self._c(_GREEN, "pass") if g.ok else self._c(_RED, "FAIL")
                self._line(f"Guard {g.name}: {mark} ({g.detail})")
            if r.metric is None:
                self._line(f"{r.metric_name}: {self._c(_RED, 'no metric')}  (incumbent {fmt(r.best)})")
            else:
                good = r.recommendation == "keep"
                self._line(f"{r.metric_name}: {self._c(_GREEN if good else _YELLOW, fmt(r.metric))} vs incumbent "
                           f"{fmt(r.best)}{_pct(r.best, r.metric)}  ({r.direction})")
            rec = r.recommendation or "?"
            self._line(self._c(_BOLD, "Ratchet recommends: ") + self._c(_GREEN if rec == "keep" else _YELLOW, rec)
                       + f"  — {r.verdict}")
        else:
            self._line(f"Incumbent {r.metric_name}: {fmt(r.best)} ({r.direction}); not measured yet")

    def _diff_line(self, ln: str) -> str:
        if ln.startswith("+") and not ln.startswith("+++"):
            return self._c(_GREEN, ln)
        if ln.startswith("-") and not ln.startswith("---"):
            return self._c(_RED, ln)
        if ln.startswith("@@"):
            return self._c(_CYAN, ln)
        return ln

    def _prompt(self, r: Review, keys: dict[str, str], note: str) -> None:
        labels = {"keep": "[k]eep", "discard": "[d]iscard", "verify": "[y] verify", "skip": "[s]kip"}
        opts = [labels[a] for a in keys.values()] + ["[v]iew diff", "[n]ote", "[q]uit", "[?]"]
        noted = f" note: {note!r}" if note else ""
        self.out.write(self._c(_BOLD, f"cycle {r.cycle}: ") + "  ".join(opts) + noted + " > ")
        self.out.flush()

    def _help(self, before: bool, keepable: bool) -> None:
        if before:
            self._line("y  verify: run the guards and the verifier on this candidate")
            self._line("s  skip: discard it without measuring")
        else:
            if keepable:
                self._line("k  keep: commit it on the run branch (whatever the ratchet says)")
            else:
                self._line("   (it has no metric or failed a guard, so it cannot be kept)")
            self._line("d  discard: restore the incumbent exactly")
        self._line("v  view the full diff (through $PAGER when set)")
        self._line("n  write a note; it becomes the cycle's lesson (what the generator learns)")
        self._line("q  quit: this candidate is not kept, the journal is closed, the run ends (exit 0)")

    # ---- input ------------------------------------------------------------------------------

    def _key(self) -> str:
        """One key press, without Enter, echoed; Ctrl-C still interrupts (ISIG stays on)."""
        fd = self.stdin.fileno()
        old = termios.tcgetattr(fd)
        try:
            tty.setcbreak(fd)
            ch = os.read(fd, 1).decode(errors="replace")
        finally:
            termios.tcsetattr(fd, termios.TCSADRAIN, old)
        self._line(ch if ch.isprintable() else "")
        return "\n" if ch == "\r" else ch.lower()

    def _read_line(self, prompt: str) -> str:
        """A line in the terminal's own (cooked) mode: one read returns one line."""
        self.out.write(prompt)
        self.out.flush()
        data = os.read(self.stdin.fileno(), 4096).decode(errors="replace")
        return data.rstrip("\r\n")

    # ---- paging -----------------------------------------------------------------------------

    def page(self, text: str) -> None:
        """$PAGER when set (run by a shell, text on its stdin); else a small built-in pager."""
        pager = os.environ.get("PAGER", "").strip()
        if pager:
            try:
                subprocess.run(pager, shell=True, input=text.encode(errors="replace"), check=False)
                return
            except OSError:
                pass
        self._builtin_pager(text.splitlines())

    def _builtin_pager(self, lines: Sequence[str]) -> None:
        _, height = shutil.get_terminal_size((100, 30))
        step = max(5, height - 2)
        i = 0
        while i < len(lines):
            for ln in lines[i:i + step]:
                self._line(self._diff_line(ln))
            i += step
            if i >= len(lines):
                break
            self.out.write(self._c(_DIM, f"-- {i}/{len(lines)} lines: space/enter more, q stop -- "))
            self.out.flush()
            key = self._key()
            if key in ("q", ""):
                break
        self._line(self._c(_DIM, "(end of diff)"))
