"""`autoloop doctor --probe`: the reward hacks a candidate could try, tried against the user's own
verifier before a night of cycles. `target` finds where a generator's change would run (the
module the verifier imports that `allowed` covers), `run_hacks` and `answer_hacks` write the
plants (`snippet`: what they share), `judge` measures a planted tree against unmodified ones and
gives the verdict, `findings` holds what is said, and `classes` lists the classes in order and
runs them (`classes.probe`). Nothing here prints: `autoloop.commands.probe` does.

May import: `trace`, `engine` and everything below them. Never `commands`.
"""
