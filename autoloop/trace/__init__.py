"""Recording a project's own workload for a sealed speed benchmark (`autoloop init --trace`):
`recorder` (loaded into the traced command's Python processes) records the targets' calls,
`check` (run by the project's interpreter at init) keeps what replays, `derive` draws a
measurement's calls from the seed, `feed` is the measured command (a feeder that never imports
the code under test hands a worker one batch of calls at a time), `replay` scores a sample of
the outcomes after the run, and `build` runs the recording and the check and sizes a
measurement. All but `build` run in the project's interpreter (copied into its bench/):
standard library only, Python 3.8 and later, and they import nothing of autoloop.

May import: `git`, `process`, `base`, `errors`.
"""
