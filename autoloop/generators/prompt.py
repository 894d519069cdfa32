"""The generator's prompt: goal, rules, the human's instructions, where the run stands, and a
bounded memory of what was tried."""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping, Sequence

from autoloop.base.numbers import exact as fmt, signed_pct
from autoloop.decide.end import coarse_value
from autoloop.generators.memory import foreclosed
from autoloop.program.reader import Program

RECENT = 12          # cycles shown in full
MAX_TEXT = 300       # characters kept of one hypothesis or lesson
MAX_KEPT = 15        # older kept changes listed one by one
MAX_FORECLOSED = 20  # distinct failed ideas listed


def _clip(text: str, n: int = MAX_TEXT) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def build_prompt(program: Program, *, cycle: int, best: float | None, baseline: float | None,
                 history: Sequence[Mapping[str, Any]], workdir_note: str = "") -> str:
    v = program.verifier
    name = v.label
    # with a noisy verifier (paired rule) the generator sees numbers rounded to the noise, and
    # kept/discarded with a coarse effect, never raw samples: it cannot chase noise
    paired = program.accept.rule == "paired"

    def shown(x: float | None) -> str:
        return coarse_value(x, history) if paired else fmt(x)

    lines = [
        f"# autoloop cycle {cycle}",
        "",
        f"Goal: {program.goal}",
        "",
        "## Rules (enforced by autoloop, not by trust)",
        "- Make ONE focused change to the files in this work tree, then stop.",
        "- You may create, modify or delete only these paths: " + ", ".join(program.allowed),
    ]
    if program.forbidden:
        lines.append("- Never touch: " + ", ".join(program.forbidden))
    lines += [
        "- Any change outside them (the verifier, tests, program.md, .git, git hooks or config) "
        "voids the cycle. Do not run git commands; autoloop commits or reverts for you.",
        f"- The verifier `{v.command}` measures `{name}` ({v.direction}). "
        "You do not need to run it; autoloop does, on its own.",
        "- Start your final reply with one line `Hypothesis: <what you changed and why it should help>`.",
        "",
        "## Where the run stands",
        f"- Baseline {name}: {shown(baseline) or 'unknown'}",
        f"- Best so far (the code you see): {shown(best) or 'unknown'}",
    ]
    if workdir_note:
        lines.append(f"- {workdir_note}")
    done = [h for h in history if h.get("cycle", 0) > 0]
    if done:
        lines.extend(_memory(done, name))
    lines += ["", "## Instructions from the human", "", program.body.strip() or "(none)"]
    return "\n".join(lines) + "\n"


def _memory(done: Sequence[Mapping[str, Any]], name: str) -> list[str]:
    """Recent cycles in full; older ones condensed into counts, the path of kept changes and the
    deduplicated foreclosed avenues — bounded however long the run."""
    counts = Counter(h["status"] for h in done)
    out = ["- Cycles so far: " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))]
    recent, older = done[-RECENT:], done[:-RECENT]
    kept = [h for h in older if h["status"] == "keep"]
    if kept:
        out += ["", "## Path of kept changes (older than the recent cycles)"]
        if len(kept) > MAX_KEPT:
            out.append(f"- ... {len(kept) - MAX_KEPT} earlier kept changes")
        for h in kept[-MAX_KEPT:]:
            gain = h.get("delta_pct")
            g = f" ({signed_pct(gain)})" if isinstance(gain, (int, float)) else ""
            shown = f"{name} {fmt(h.get('metric'))}{g}" if "feedback" not in h else h["feedback"]
            out.append(f"- cycle {h['cycle']}: {_clip(h.get('hypothesis', ''), 160)} → {shown}")
    avenues = foreclosed(older, limit=MAX_FORECLOSED)
    if avenues:
        out += ["", "## Foreclosed avenues (tried before and not kept; do not repeat without a new reason)"]
        for a in avenues:
            times = f", tried {a.times}x" if a.times > 1 else ""
            out.append(f"- [{a.status}{times}, last cycle {a.cycle}] {_clip(a.hypothesis, 160)} — {_clip(a.lesson, 120)}")
    out += ["", "## Recent cycles (newest last)"]
    for h in recent:
        # a judged cycle's lesson already carries its (coarse) effect
        measured = f" {name}={fmt(h.get('metric')) or '-'}" if "feedback" not in h else ""
        out.append(f"- cycle {h['cycle']} [{h['status']}]{measured}: "
                   f"{_clip(h.get('hypothesis', ''))} — lesson: {_clip(h.get('lesson', ''))}")
    return out
