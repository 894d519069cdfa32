"""CI mode (`autoloop run --ci`, automatic when `CI=true`) and what a run hands to scripts: the
wall-clock budget, the Markdown for `$GITHUB_STEP_SUMMARY`, the `--json` object. Nothing here
prints: the CLI hands streams and paths in."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from autoloop.base.numbers import seconds
from autoloop.decide.wording import plural
from autoloop.journal.facts import Facts, facts, markdown
from autoloop.journal.ledger import Journal

EXIT_MEANING = {0: "stopped", 1: "failed", 2: "refused", 130: "interrupted"}
RECENT_CYCLES = 3     # the budget keeps room for the slowest of these


def ci_env(env: Mapping[str, str] | None = None) -> bool:
    """Is this a CI job? (`CI` set to true/1/yes, as GitHub Actions, GitLab and most others do.)"""
    env = os.environ if env is None else env
    return env.get("CI", "").strip().lower() in ("true", "1", "yes")


class Budget:
    """`--max-minutes M`, a wall-clock budget: no cycle starts when the slowest recent one would
    not fit; at the deadline a running cycle is stopped as SIGTERM stops it, and the run ends on
    the budget (exit 0). Disarm before the loop's signal handlers go (its on_finish hook does)."""

    def __init__(self, minutes: float, *, clock: Callable[[], float] = time.monotonic,
                 kill: Callable[[], None] | None = None) -> None:
        self.minutes = minutes
        self.seconds = minutes * 60.0
        self.clock = clock
        self.t0 = clock()
        self.durations: list[float] = []
        self.fired = False
        self._armed = True
        self._lock = threading.Lock()
        self._kill = kill or (lambda: os.kill(os.getpid(), signal.SIGTERM))
        self._timer = threading.Timer(self.seconds, self._deadline)
        self._timer.daemon = True
        self._timer.start()

    def observe(self, event: str, data: Mapping[str, Any]) -> None:
        if event == "cycle" and data.get("duration_s") is not None:
            self.durations.append(float(data["duration_s"]))

    def stop_reason(self) -> str:
        left = self.time_left()
        if left <= 0:
            return f"--max-minutes budget reached ({self.minutes:g} min)"
        slowest = max(self.durations[-RECENT_CYCLES:], default=0.0)
        if slowest > left:
            return (f"--max-minutes budget: {seconds(left)} left, too little for another cycle "
                    f"(recent ones took up to {seconds(slowest)})")
        return ""

    def time_left(self) -> float:
        return max(0.0, self.seconds - (self.clock() - self.t0))

    def _deadline(self) -> None:
        with self._lock:
            if not self._armed:
                return
            self.fired = True
        self._kill()

    def disarm(self) -> None:
        with self._lock:
            self._armed = False
        self._timer.cancel()


@dataclass
class Outcome:
    """What one `run` invocation ended with, for --json and the step summary."""
    ci: bool
    program: str = ""
    tag: str = ""
    exit_code: int = 0
    stop_reason: str = ""
    error: str = ""
    cycles_run: int = 0
    # this invocation's cycles by status (None: it never attached to a ledger)
    this_run: dict[str, int] | None = None
    incumbent: str = ""
    journal_commit: str | None = None
    started: float = field(default_factory=time.monotonic)
    facts: Facts | None = None
    paths: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "exit_code": self.exit_code, "status": EXIT_MEANING.get(self.exit_code, "failed"),
            "stop_reason": self.stop_reason or None, "error": self.error or None, "ci": self.ci,
            "program": self.program, "tag": self.tag, "branch": f"autoloop/{self.tag}" if self.tag else None,
            "incumbent": self.incumbent or None, "journal_commit": self.journal_commit,
            "cycles_run": self.cycles_run, "elapsed_s": round(time.monotonic() - self.started, 3),
        }
        if self.facts is not None:
            d.update((k, v) for k, v in self.facts.as_dict().items() if k not in ("tag", "branch"))
            d["kept_this_run"] = (self.this_run or {}).get("keep", 0)
            d["by_status_this_run"] = dict(self.this_run or {})
        d["journal"] = self.paths or None
        return d

    def step_summary(self) -> str:
        extra = [("stopped", self.stop_reason or self.error or EXIT_MEANING.get(self.exit_code, "")),
                 ("exit code", str(self.exit_code))]
        if self.incumbent:
            extra.append(("branch", f"`autoloop/{self.tag}` at `{self.incumbent[:12]}`"
                          + (f" + journal commit `{self.journal_commit[:12]}`" if self.journal_commit else "")))
        if self.facts is None:
            return (f"### autoloop run `{self.tag}`\n\n" + "| | |\n| --- | --- |\n"
                    + "".join(f"| {k} | {v} |\n" for k, v in extra))
        took = seconds(time.monotonic() - self.started)
        extra.insert(0, ("this job", f"{plural(self.cycles_run, 'cycle')} in {took}"))
        return markdown(self.facts, extra_rows=extra)


def facts_of(program: Any, tag: str, records: Sequence[Mapping[str, Any]]) -> Facts:
    """What log, report, --json and the ending line all show of a run's ledger records."""
    v = program.verifier
    return facts(records, tag=tag, goal=program.goal, metric=v.label, direction=v.direction)


def load_facts(program: Any, tag: str) -> Facts | None:
    """Facts of the run `tag` of `program`, or None when it has no readable ledger."""
    j = Journal(program.state_dir, tag)
    if not j.exists():
        return None
    try:
        j.load()
    except Exception:
        return None
    return facts_of(program, tag, j.records)


def journal_paths(program: Any, tag: str) -> dict[str, str]:
    j = Journal(Path(program.state_dir), tag)
    return {"experiments": str(j.experiments), "results": str(j.results), "ledger": str(j.ledger)}


def step_summary(text: str) -> None:
    path = os.environ.get("GITHUB_STEP_SUMMARY", "").strip()
    if path:
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(text.rstrip("\n") + "\n\n")
        except OSError as exc:
            print(f"autoloop: warning: cannot write the step summary to {path}: {exc}",
                  file=sys.stderr)
