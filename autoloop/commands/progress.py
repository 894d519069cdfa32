"""What `autoloop run` shows while it works: the loop's `report` callback, presentation only.

On a terminal: one line per finished cycle and under it a status line redrawn every second.
Elsewhere (a pipe, CI): plain lines only; with `timestamps` (CI mode) each starts with the
elapsed time and phases get lines of their own. Colour only on a terminal, never with `NO_COLOR`
(https://no-color.org) or `TERM=dumb`.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from typing import IO, Any, Callable, Mapping

from autoloop.journal.facts import in_cycle, running_bests
from autoloop.journal.ledger import CycleRecord
from autoloop.base.numbers import formatter, hms, pct, run_values, seconds, signed_pct, usd

COLORS = {"keep": "\x1b[32m", "baseline": "\x1b[34m", "discard": "\x1b[33m", "crash": "\x1b[31m",
          "guard_fail": "\x1b[31m", "violation": "\x1b[35m", "no_change": "\x1b[2m", "gen_error": "\x1b[31m"}
BOLD, RESET = "\x1b[1m", "\x1b[0m"
PLAIN_HYPOTHESIS = 70      # characters of a hypothesis on a plain (not live) line
PLAIN_LESSON = 200
LESSON_INDENT = " " * 12
# Phases that take minutes with nothing else printed: a plain log (`> run.log`, nohup) would
# stay empty through a baseline measured several times, or an end-of-run check of 40 runs
SLOW_PHASES = {"baseline": "measuring the starting commit (guards, then the verifier) …",
               "final check": "end-of-run check: re-measuring the best against the start …"}


def use_color(stream: IO[str], env: Mapping[str, str] | None = None) -> bool:
    return (os.environ if env is None else env).get("NO_COLOR", "") == "" and is_live(stream, env)


def is_live(stream: IO[str], env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return _isatty(stream) and env.get("TERM") != "dumb"


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _width() -> int:
    return shutil.get_terminal_size((100, 24)).columns


class Progress:
    def __init__(self, stream: IO[str], metric: str, *, live: bool = False, color: bool = False,
                 timestamps: bool = False, tick: float = 1.0,
                 clock: Callable[[], float] = time.monotonic, direction: str | None = None) -> None:
        self.stream, self.metric, self.live, self.color = stream, metric, live, color
        self.timestamps, self.clock = timestamps, clock
        self.t0 = self.phase_t0 = clock()
        self.cycle: int | None = None
        self.phase = "starting"
        self.baseline: float | None = None
        self.best: float | None = None
        self.direction = direction      # known: "best" never shows a regression a person kept
        self._cycles: list[Mapping[str, Any]] = []
        self.last = ""
        self.cost = 0.0
        self._values: list[float] = []
        self.fmt = formatter([])     # widened as values arrive: the run's rounding so far
        self._lock = threading.RLock()
        self._shown = 0          # width of the live line on screen (0: none)
        self._gone = False       # the reader has closed the stream
        self._paused = False
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if live:
            self._ticker = threading.Thread(target=self._tick, args=(tick,), daemon=True, name="autoloop-progress")
            self._ticker.start()

    def __call__(self, event: str, data: Mapping[str, Any]) -> None:
        with self._lock:
            if event == "phase":
                self.cycle = data.get("cycle", self.cycle)
                self.phase = str(data.get("phase", ""))
                self.phase_t0 = self.clock()
                if self.timestamps and not self.live and self.phase not in ("prepare", "scope"):
                    self._print(f"cycle {self.cycle:>4}  {self.phase}")
                elif not self.live and self.phase in SLOW_PHASES:
                    self._print(f"cycle {self.cycle:>4}  {SLOW_PHASES[self.phase]}")
            elif event == "cycle":
                self._cycle(data)
            elif event == "stop":
                self.phase = "stopped"
            elif event == "resume":
                self._print(str(data["text"]))
            elif event in ("warning", "note"):
                # calibration and statistics speak to the person: stderr, above the live line
                self._clear()
                label = "WARNING" if event == "warning" else "note"
                print(f"autoloop: {label}: {data['message']}", file=sys.stderr, flush=True)
            elif event == "final":
                self._print(f"final      {data.get('text', '')}")
            self._draw()

    def _cycle(self, data: Mapping[str, Any]) -> None:
        c = CycleRecord.of(data)
        if c.status == "baseline":
            self.baseline = c.metric
        before = self.best
        self._cycles.append(data)
        # "best" as log and the report define it (facts.running_bests): the ratchet's, never a
        # regression a person kept; without a direction, the record's
        best = running_bests(self._cycles, self.direction)[-1] if self.direction else c.best
        self.best = best if best is not None else self.best
        self.cost += c.cost_usd or 0.0
        self._values += run_values([data])
        fmt = self.fmt = formatter(self._values)
        metric = fmt(c.metric) or "-"
        self.last = f"#{c.cycle} {c.status} {metric}"
        cell = f"{c.status:<10}"
        vs, change = in_cycle(data, before)
        # what the row was judged on: the incumbent measured beside it (paired) or the best.
        # Paired, the % is the test's estimate over the pairs, not the change between the two
        # medians shown: labelled, or a reader takes it for that
        est = "" if change is None else f"est. {signed_pct(change)}"
        # a strict cycle's change is the one its lesson, log and report state
        against = (f"vs {fmt(vs):>10} {est:>13}" if c.pooled is not None else
                   f"best {fmt(self.best if self.direction else c.best):>10} {signed_pct(change, ''):>8}")
        head = (f"cycle {c.cycle:>4}  {cell} {self.metric} {metric:>10}  "
                f"{against}  {seconds(c.duration_s):>7}  ") + ("[you] " if c.by_human else "")
        room = max(20, _width() - len(head) - 1) if self.live else PLAIN_HYPOTHESIS
        hyp = " ".join(c.hypothesis.split())
        hyp = hyp if len(hyp) <= room else hyp[:room - 1] + "…"
        self._print(head.replace(cell, self._paint(c.status, cell), 1) + hyp)
        if c.status not in ("keep", "baseline", "discard") or c.by_human:
            lesson = LESSON_INDENT + " ".join(c.lesson.split())
            self._print(lesson[:max(40, _width() if self.live else PLAIN_LESSON)])
        if (c.holdout or {}).get("overfit"):
            self._print(LESSON_INDENT + "holdout did not improve: possible overfitting to the verifier")

    def _paint(self, status: str, text: str) -> str:
        return f"{COLORS.get(status, '')}{text}{RESET}" if self.color else text

    def _print(self, line: str) -> None:
        """A permanent line (above the live one)."""
        self._clear()
        if self.timestamps:
            line = f"[{hms(self.clock() - self.t0)}] {line}"
        self._write(line + "\n")

    def _write(self, text: str) -> None:
        # the reader gone (`| head`, a closed terminal): the run goes on, the journal is the record
        if self._gone:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):   # EPIPE; EIO from a terminal whose hangup was ignored
            self._gone = True

    def status_line(self) -> str:
        now = self.clock()
        parts = [f"cycle {self.cycle}"] if self.cycle is not None else []
        parts.append(f"{self.phase} {seconds(now - self.phase_t0, whole=True)}")
        if self.best is not None:
            d = pct(self.baseline, self.best)
            parts.append(f"best {self.fmt(self.best)}" + (f" ({signed_pct(d)})" if d is not None else ""))
        if self.last:
            parts.append(f"last {self.last}")
        parts.append(f"elapsed {seconds(now - self.t0, whole=True)}")
        if self.cost:
            parts.append(usd(self.cost))
        return " · ".join(parts)

    def _draw(self) -> None:
        if not self.live or self._paused:
            return
        text, width = self.status_line(), _width()
        if len(text) > width - 1:
            text = text[:max(1, width - 2)] + "…"
        pad = max(0, self._shown - len(text))
        self._write("\r" + (BOLD + text + RESET if self.color else text) + " " * pad)
        self._shown = len(text)

    def _clear(self) -> None:
        if self.live and self._shown:
            # two more than our text: a Ctrl-C echoes `^C` after it (spaces, not an erase-line
            # escape: NO_COLOR and dumb terminals get no escapes at all)
            self._write("\r" + " " * min(self._shown + 2, max(1, _width() - 1)) + "\r")
            self._shown = 0

    def _tick(self, every: float) -> None:
        while not self._stop.wait(every):
            with self._lock:
                self._draw()

    def pause(self) -> None:
        """For the reviewer: the live line out of the way while a person is asked."""
        with self._lock:
            self._clear()
            self._paused = True

    def resume(self) -> None:
        with self._lock:
            self._paused = False
            self._draw()

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=2)
        with self._lock:
            if self.live:
                self._shown = max(self._shown, 1)   # also a `^C` echoed on an empty line
            self._clear()
