"""Guards that run tests are counted: the summary pytest or unittest prints (`1,141 passed in 3.2s`,
`Ran 12 tests` + `OK`) is read from a guard's output at the baseline and in every cycle, and a
candidate whose guard passes fewer tests than the starting commit's, prints no summary where the
starting commit's did, or ran none, is a guard_fail. A guard that exits 0 proves nothing when the
candidate can skip, delete or cut short the tests it runs (a conftest that skips them all,
`os._exit(0)` in the middle of the run). The counts are read from output the tests' own code can
write to: this stops the lazy cheats, not a forged summary line (CONTRACT §10's `score` does)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from autoloop.engine.hints import plain
from autoloop.base.numbers import count

_MAX_BYTES = 64 << 20    # a guard's log beyond this is not read for summaries

# `==== 3 failed, 1,137 passed, 2 skipped in 4.21s (0:00:04) ====`, or `-q`'s bare line
_PYTEST = re.compile(
    r"^=*\s*(?P<body>(?:\d[\d,]* (?:passed|failed|skipped|deselected|xfailed|xpassed|warnings?|"
    r"errors?|rerun)(?:, )?)+|no tests ran)\s+in\s+[\d.]+\s*s(?:econds)?\b.*$")
_PYTEST_ITEM = re.compile(r"(\d[\d,]*) (\w+)")
_UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in [\d.]+s$")
_UNITTEST_END = re.compile(r"^(OK|FAILED|NO TESTS RAN)(?: \((.*)\))?$")


@dataclass(frozen=True)
class TestCount:
    __test__ = False          # not a test class, whatever pytest thinks of its name
    runner: str               # "pytest", "unittest" or "pytest+unittest"
    passed: int
    failed: int               # failed + errors
    skipped: int
    summaries: int            # how many summaries the output had (a guard may run several)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def of(cls, d: Mapping[str, Any]) -> TestCount:
        return cls(str(d.get("runner", "")), int(d.get("passed", 0)), int(d.get("failed", 0)),
                   int(d.get("skipped", 0)), int(d.get("summaries", 1)))

    def text(self) -> str:
        return f"{count(self.passed)} passed" + (f", {count(self.failed)} failed" if self.failed else "") \
            + (f", {count(self.skipped)} skipped" if self.skipped else "")


def _lines(path: Path) -> Iterable[str]:
    try:
        with open(path, "rb") as f:
            size = 0
            for raw in f:
                size += len(raw)
                if size > _MAX_BYTES:
                    return
                if b" in " in raw or raw.startswith((b"OK", b"FAILED", b"NO TESTS")):
                    yield plain(raw.decode("utf-8", "replace")).strip()
    except OSError:
        return


def parse(paths: Sequence[Path]) -> TestCount | None:
    """The test counts the summaries in these logs add up to; None when there is none."""
    runners: set[str] = set()
    passed = failed = skipped = n = 0
    ran: int | None = None
    for path in paths:
        for line in _lines(path):
            m = _PYTEST.match(line)
            if m:
                runners.add("pytest")
                n += 1
                for num, word in _PYTEST_ITEM.findall(m.group("body")):
                    k = int(num.replace(",", ""))
                    if word == "passed":
                        passed += k
                    elif word in ("failed", "error", "errors"):
                        failed += k
                    elif word == "skipped":
                        skipped += k
                continue
            m = _UNITTEST_RAN.match(line)
            if m:
                ran = int(m.group(1))
                continue
            m = _UNITTEST_END.match(line)
            if m and ran is not None:
                runners.add("unittest")
                n += 1
                parts = dict(p.strip().split("=", 1) for p in (m.group(2) or "").split(",") if "=" in p)
                got = {k.strip(): int(v) for k, v in parts.items() if v.strip().isdigit()}
                bad = got.get("failures", 0) + got.get("errors", 0)
                skip = got.get("skipped", 0)
                odd = got.get("expected failures", 0) + got.get("unexpected successes", 0)
                passed += max(0, ran - bad - skip - odd)
                failed += bad
                skipped += skip
                ran = None
    if not n:
        return None
    return TestCount("+".join(sorted(runners)), passed, failed, skipped, n)


def shortfall(base: TestCount | None, now: TestCount | None) -> str | None:
    """Why a candidate's guard counts fall short of the baseline's (None when they do not)."""
    if base is None:
        return None
    if now is None:
        return (f"no test summary in its output, baseline {count(base.passed)} passed "
                "(the run was cut short, or no test runner ran)")
    if now.passed < base.passed:
        ran = " (no tests ran)" if now.passed + now.failed + now.skipped == 0 else ""
        return (f"{now.text()}, baseline {count(base.passed)}{ran}: fewer tests "
                "pass than on the starting commit")
    return None


def baseline_counts(history: Iterable[Mapping[str, Any]]) -> dict[str, TestCount]:
    """The starting commit's counts per guard, as the ledger's baseline record keeps them."""
    base = next((c for c in history if c.get("status") == "baseline"), None)
    stored = ((base or {}).get("stats") or {}).get("guard_tests") or {}
    return {name: TestCount.of(d) for name, d in stored.items() if isinstance(d, dict)}

