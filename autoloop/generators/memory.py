"""What the generator remembers of a long run, in bounded space: the *foreclosed avenues* —
hypotheses that were discarded, crashed, failed a guard or violated the rules — deduplicated,
so an agent does not repeat a failed experiment without a reason."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

FORECLOSED = ("discard", "crash", "guard_fail", "violation")
_WORD = re.compile(r"[a-z0-9_.]+")
_STOP = frozenset("a an the to of in on for and or by with from at is be it this that as".split())
SIMILAR = 0.8          # token overlap above which two hypotheses are "the same idea"


@dataclass(frozen=True)
class Avenue:
    cycle: int           # the most recent cycle that tried it
    status: str
    hypothesis: str
    lesson: str
    times: int           # how many cycles tried (nearly) the same thing


@functools.lru_cache(maxsize=4096)
def tokens(text: str) -> frozenset[str]:
    # every cycle compares its hypothesis with the run's earlier ones: each is split once
    return frozenset(w for w in _WORD.findall(text.lower()) if w not in _STOP)


def similarity(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard overlap of the content words; 0 when either is empty."""
    return len(a & b) / len(a | b) if a and b else 0.0


def foreclosed(history: Sequence[Mapping[str, Any]], limit: int = 25) -> list[Avenue]:
    """The most recent `limit` distinct failed ideas, newest last; repeats are folded into one
    entry that counts them."""
    seen: list[frozenset[str]] = []
    found: list[Avenue] = []
    for h in reversed(history):
        hyp = str(h.get("hypothesis", "")).strip()
        if h.get("status") not in FORECLOSED or not hyp or hyp == "(none given)":
            continue
        toks = tokens(hyp)
        i = next((i for i, s in enumerate(seen)
                  if toks == s or similarity(toks, s) >= SIMILAR), None)
        if i is not None:
            found[i] = replace(found[i], times=found[i].times + 1)
        elif len(found) < limit:
            seen.append(toks)
            found.append(Avenue(h["cycle"], h["status"], hyp, str(h.get("lesson", "")), 1))
    return found[::-1]


def near_duplicate(hypothesis: str, history: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The latest foreclosed cycle whose hypothesis says (nearly) the same, if any."""
    toks = tokens(hypothesis)
    if not toks or hypothesis.strip() == "(none given)":
        return None
    return next((h for h in reversed(history) if h.get("status") in FORECLOSED
                 and similarity(toks, tokens(str(h.get("hypothesis", "")))) >= SIMILAR), None)
