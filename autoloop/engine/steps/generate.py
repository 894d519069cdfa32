"""Step 2: each worker's generator edits its own tree, all at once."""

from __future__ import annotations

from autoloop.process import envs
from autoloop.process import leftovers
from autoloop.engine.cycle import Cycle, Round, RunState
from autoloop.errors import GeneratorError, Interrupted
from autoloop.generators.base import GenContext, Proposal
from autoloop.journal.ledger import escape_controls
from autoloop.generators.prompt import build_prompt


def generate(state: RunState, rnd: Round) -> None:
    state.phase(rnd, "generate")
    for c in rnd.cycles:
        if c.worker not in state.generators:
            state.generators[c.worker] = state.generator_factory(state.program.generator, state.program)
    k = len(rnd.cycles)
    note = "" if k == 1 else (
        f"Parallel round: {k} workers propose changes to this same code at once (cycles {rnd.n0}-"
        f"{rnd.n0 + k - 1}; you are worker {{w}} of {k}); the best of them is kept, so try something "
        "the others are unlikely to try.")
    state.each(rnd.cycles, lambda c: _propose(state, c, note.replace("{w}", str(c.worker + 1))))
    state.check_signal()


def _propose(state: RunState, c: Cycle, note: str) -> None:
    history = state.journal.cycles()
    prompt = build_prompt(state.program, cycle=c.n, best=state.best, baseline=state.baseline,
                          history=history, workdir_note=note)
    prompt_file = c.log_dir / "prompt.md"
    prompt_file.write_text(state.redact(prompt), errors="surrogateescape")
    hyp_file = c.log_dir / "hypothesis.txt"
    hyp_file.unlink(missing_ok=True)
    ctx = GenContext(program=state.program, cycle=c.n, workdir=c.tree.path, prompt=prompt,
                     prompt_file=prompt_file, hypothesis_file=hyp_file, log_dir=c.log_dir,
                     best=state.best, baseline=state.baseline, history=history,
                     is_allowed=state.rules.allows, env=envs.generator_env(c.env),
                     timeout=state.program.generator.timeout, run_marker=c.marker,
                     wrap=state.guard.wrap(c.log_dir, workdir=c.tree.path), limits=state.guard.limits)
    state.in_python = True
    try:
        if state.signal is not None:
            raise Interrupted("interrupted")
        c.proposal = state.generators[c.worker].propose(ctx)
    except GeneratorError as exc:
        # a failed agent run may still report what it cost (AgentReportError.proposal)
        c.proposal = getattr(exc, "proposal", None) or Proposal()
        c.gen_error = str(exc) or type(exc).__name__
    finally:
        state.in_python = False
        # anything the generator left running (even detached) dies before we look at the disk
        leftovers.kill_marked(c.marker)
        c.blocked = state.guard.blocked(c.log_dir)
    # the hypothesis goes into the journal and a commit message: no secrets in it
    c.proposal.hypothesis = escape_controls(state.redact(c.proposal.hypothesis))
