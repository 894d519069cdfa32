"""What a cycle's texts say about its change, one function per fact over the fields a cycle's
ledger record keeps (`delta_pct`, `stats.pooled`, `stats.step_pct`, `status`). The lesson the
generator reads next, the result, the progress line, `log`, the report and a kept commit's
message all quote these, so no two of them can state a different change, noise or verdict.

Pure and import-light (numbers and ratchet only): the decide step builds its lessons with it,
the readers of the ledger their rows.
"""

from __future__ import annotations

from typing import Any, Mapping

from autoloop.base.numbers import plain_pct, signed_pct
from autoloop.decide.ratchet import orientation


def plural(n: int, word: str) -> str:
    """`1 pair`, `3 pairs`."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _stats(rec: Mapping[str, Any]) -> Mapping[str, Any]:
    s = rec.get("stats")
    return s if isinstance(s, dict) else {}


def pooled(rec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The paired comparison a cycle was judged on (None: judged on one median)."""
    p = _stats(rec).get("pooled")
    return p if isinstance(p, dict) else None


def stated_pct(rec: Mapping[str, Any]) -> float | None:
    """The signed change in % the verdict states: a paired cycle's estimate over its pairs
    (against the incumbent measured beside it), else the change from the best before it."""
    p = pooled(rec)
    if p is not None:
        return p.get("change_pct")
    return None if rec.get("status") == "baseline" else rec.get("delta_pct")


def noise_pct(rec: Mapping[str, Any]) -> float | None:
    """The noise of that change in % (the paired estimate's, `stats.step_pct`); None unknown."""
    n = _stats(rec).get("step_pct")
    return float(n) if isinstance(n, (int, float)) and n > 0 else None


def noise_text(noise: float | None, pairs: int | None) -> str:
    """`noise ±1.20% over 6 pairs`: the noise of an estimate, with what it is over (a warning's
    "per run" figure is another quantity, about √pairs larger)."""
    if noise is None:
        return ""
    return f"noise ±{plain_pct(noise)}" + (f" over {plural(pairs, 'pair')}" if pairs else "")


def direction_word(change: float | None, direction: str, status: str | None = None) -> str:
    """`better`, `worse`, `within the noise` or `no change` for a signed change. A keep was judged
    better by its rule: never called anything else."""
    if status == "keep":
        return "better"
    if change is None:
        return "change unknown"
    if change == 0:
        return "no change"
    return "better" if orientation(direction) * change > 0 else "worse"


def change_words(change: float | None, noise: float | None, pairs: int | None,
                 direction: str, status: str | None = None) -> str:
    """What a change did, in the one wording every text uses: `-5.02%, better (noise ±1.00%
    over 6 pairs)`. The signed % is the one the result, `log` and the report show."""
    word = direction_word(change, direction, status)
    if change is None:
        return word
    noise_part = noise_text(noise, pairs)
    within = (noise is not None and abs(change) <= noise and status != "keep")
    if within and change != 0:
        word = f"{word} by less than the noise"
    return f"{signed_pct(change)}, {word}" + (f" ({noise_part})" if noise_part else "")


def record_words(rec: Mapping[str, Any], direction: str) -> str:
    """change_words of a ledger record, by its fields."""
    p = pooled(rec)
    n = p.get("n") if p is not None else None
    # a person's decision is theirs: the words describe the measurement as the ratchet judged it
    status = rec.get("recommendation") if rec.get("decided_by") == "human" else rec.get("status")
    return change_words(stated_pct(rec), noise_pct(rec), n if isinstance(n, int) else None,
                        direction, str(status or "") or None)


def decided(status: str, decided_by: str | None, recommendation: str | None) -> str:
    """Whose verdict a status is: `kept by the ratchet`, `kept by the person (the ratchet said
    discard)`: a person's overruling is shown as theirs."""
    verb = {"keep": "kept", "baseline": "measured"}.get(status, status)
    if decided_by != "human":
        return f"{verb} by the ratchet"
    return f"{verb} by the person" + ("" if recommendation in (None, status) else
                                      f" (the ratchet said {recommendation})")


def pool_words(stats: Mapping[str, Any]) -> str:
    """What a paired cycle ranked its runs among, from its stats: `; ranked with 12 earlier runs
    of the incumbent (cycles 0, 3)`, or the drift that set them aside: `; drift: the incumbent's
    fresh runs sat 4.2 standard errors better than its 12 earlier runs after pair 2: those set
    aside, judged within the test from pair 3`. Empty when nothing was pooled."""
    pool = stats.get("pool")
    if not isinstance(pool, dict) or not pool.get("runs"):
        return ""
    n = plural(int(pool["runs"]), "earlier run")
    for b in stats.get("batches") or []:
        d = b.get("drift") if isinstance(b, dict) else None
        if isinstance(d, dict):
            confirm = "the confirmation's " if b.get("name") == "confirm" else ""
            side = "better" if d["z"] > 0 else "worse"
            return (f"; drift: the incumbent's fresh runs sat {abs(d['z']):.2g} standard errors {side} "
                    f"than its {n} after {confirm}pair {d['pair']}: those set aside, judged within "
                    f"the test from pair {d['pair'] + 1}")
    cycles = ", ".join(str(c) for c in pool.get("cycles") or [])
    return f"; ranked with {n} of the incumbent" + (f" (cycles {cycles})" if cycles else "")
