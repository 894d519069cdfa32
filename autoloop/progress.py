"""What `autoloop run` shows while it works. Presentation only: the CLI builds one of these with
its output stream and hands it to the loop as the `report` callback (events "phase", "cycle",
"stop").

- On a terminal: one permanent line per finished cycle, and under it a live status line redrawn
  in place with a carriage return — cycle, phase, best (and its gain), last result, elapsed time,
  cost — ticking every second while a generator or verifier works.
- Not a terminal (a pipe, a log file, CI): plain lines only, one per cycle; with `timestamps`
  (CI mode) each line starts with the elapsed time and phases get a line of their own, so a
  long cycle shows what it is doing in a CI log.
- Colour only on a terminal, and never when `NO_COLOR` is set (https://no-color.org) or
  `TERM=dumb`.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from typing import IO, Any, Callable, Mapping

from autoloop.facts import in_cycle
from autoloop.journal import pct
from autoloop.numbers import formatter, run_values, seconds, signed_pct, usd
from autoloop.ratchet import better
from autoloop.summary import overruled_keep

COLORS = {"keep": "\x1b[32m", "baseline": "\x1b[34m", "discard": "\x1b[33m", "crash": "\x1b[31m",
          "guard_fail": "\x1b[31m", "violation": "\x1b[35m", "no_change": "\x1b[2m", "gen_error": "\x1b[31m"}
RESET = "\x1b[0m"


def use_color(stream: IO[str], env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    if env.get("NO_COLOR", "") != "" or env.get("TERM") == "dumb":
        return False
    return _isatty(stream)


def is_live(stream: IO[str], env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return _isatty(stream) and env.get("TERM") != "dumb"


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    def __init__(self, stream: IO[str], metric: str, *, live: bool = False, color: bool = False,
                 timestamps: bool = False, tick: float = 1.0,
                 clock: Callable[[], float] = time.monotonic, direction: str | None = None) -> None:
        self.stream = stream
        self.metric = metric
        self.live = live
        self.color = color
        self.timestamps = timestamps
        self.clock = clock
        self.t0 = clock()
        self.cycle: int | None = None
        self.phase = "starting"
        self.phase_t0 = self.t0
        self.baseline: float | None = None
        self.best: float | None = None
        self.direction = direction      # known: "best" never shows a regression a person kept
        self._overruled = False
        self.last = ""
        self.cost = 0.0
        self.done = 0
        self._values: list[float] = []
        self.fmt = formatter([])     # widened as values arrive: the run's rounding so far
        self._lock = threading.RLock()
        self._shown = 0          # width of the live line on screen (0: none)
        self._gone = False       # the reader has closed the stream
        self._paused = False
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if live:
            self._ticker = threading.Thread(target=self._tick, args=(tick,), daemon=True,
                                            name="autoloop-progress")
            self._ticker.start()

    # ---- the loop's callback -------------------------------------------------------------------

    def __call__(self, event: str, data: Mapping[str, Any]) -> None:
        with self._lock:
            if event == "phase":
                self.cycle = data.get("cycle", self.cycle)
                self.phase = str(data.get("phase", ""))
                self.phase_t0 = self.clock()
                if self.timestamps and not self.live and self.phase not in ("prepare", "scope"):
                    self._print(f"cycle {self.cycle:>4}  {self.phase}")
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
        status = str(data.get("status", ""))
        if status == "baseline":
            self.baseline = data.get("metric")
        if overruled_keep(data):
            self._overruled = True
        best = data.get("best")
        if best is not None:
            # the record's best is the incumbent's metric; once a person kept a regression, the
            # column keeps showing the best measured and moves only when a cycle beats it
            if not (self._overruled and self.direction and self.best is not None
                    and not better(self.direction, best, self.best)):
                self.best = best
        self.cost += (data.get("gen") or {}).get("cost_usd") or 0.0
        if data.get("cycle", 0):
            self.done += 1
        best_before = self.best if status != "baseline" else None
        self._values += run_values([data])
        self.fmt = formatter(self._values)
        fmt = self.fmt
        metric = fmt(data.get("metric")) or "-"
        self.last = f"#{data.get('cycle')} {status} {metric}"
        hyp = " ".join(str(data.get("hypothesis", "")).split())
        width = self._width()
        cell = f"{status:<10}"
        vs, change = in_cycle(data, best_before if best_before is not None else self.best)
        # what the row was judged on: the incumbent measured beside it (paired) or the best
        paired = isinstance((data.get("stats") or {}).get("pooled"), dict)
        against = (f"vs {fmt(vs):>10} {signed_pct(change, ''):>8}" if paired else
                   f"best {fmt(self.best if self.direction else data.get('best')):>10}")
        head = (f"cycle {data['cycle']:>4}  {cell} {self.metric} {metric:>10}  "
                f"{against}  {data.get('duration_s', 0):6.1f}s  ")
        if data.get("decided_by") == "human":
            head += "[you] "
        room = max(20, width - len(head) - 1) if self.live else 70
        if len(hyp) > room:
            hyp = hyp[:room - 1] + "…"
        line = head.replace(cell, self._paint(status, cell), 1)
        self._print(line + hyp)
        if status not in ("keep", "baseline", "discard") or data.get("decided_by") == "human":
            lesson = " ".join(str(data.get("lesson", "")).split())
            self._print(f"            {lesson}"[:max(40, width if self.live else 200)])
        hold = (data.get("stats") or {}).get("holdout")
        if isinstance(hold, dict) and hold.get("overfit"):
            self._print("            holdout did not improve: possible overfitting to the verifier")

    # ---- output ----------------------------------------------------------------------------------

    def _paint(self, status: str, text: str) -> str:
        if not self.color:
            return text
        return f"{COLORS.get(status, '')}{text}{RESET}"

    def _width(self) -> int:
        return shutil.get_terminal_size((100, 24)).columns

    def _print(self, line: str) -> None:
        """A permanent line (above the live one)."""
        self._clear()
        if self.timestamps:
            t = int(self.clock() - self.t0)
            line = f"[{t // 3600:02d}:{t % 3600 // 60:02d}:{t % 60:02d}] {line}"
        self._write(line + "\n")

    def _write(self, text: str) -> None:
        """Progress is for the person watching: when the reader is gone (`| head`, a closed
        terminal) the run goes on quietly, the journal is the record."""
        if self._gone:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except (BrokenPipeError, ValueError):
            self._gone = True

    def status_line(self) -> str:
        now = self.clock()
        parts = []
        if self.cycle is not None:
            parts.append(f"cycle {self.cycle}")
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
        text = self.status_line()
        width = self._width()
        if len(text) > width - 1:
            text = text[:max(1, width - 2)] + "…"
        pad = max(0, self._shown - len(text))
        shown = ("\x1b[1m" + text + RESET) if self.color else text
        self._write("\r" + shown + " " * pad)
        self._shown = len(text)

    def _clear(self) -> None:
        if self.live and self._shown:
            # two more than our text: a Ctrl-C echoes `^C` after it (spaces, not an erase-line
            # escape: NO_COLOR and dumb terminals get no escapes at all)
            pad = min(self._shown + 2, max(1, self._width() - 1))
            self._write("\r" + " " * pad + "\r")
            self._shown = 0

    def _tick(self, every: float) -> None:
        while not self._stop.wait(every):
            with self._lock:
                self._draw()

    # ---- for the reviewer and the end --------------------------------------------------------

    def pause(self) -> None:
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
