"""Recording a project's own workload for a sealed speed benchmark (`autoloop init --trace`):
`recorder` (loaded into the traced command's Python processes) records the targets' calls,
`replay` (copied into the project's bench/) checks them at HEAD, replays seeded samples of
recorded and derived calls and scores every outcome, and `build` runs the two and sizes a
measurement. `recorder` and `replay` run in the project's interpreter: standard library only,
Python 3.8 and later, and they import nothing of autoloop.

May import: `git`, `process`, `base`, `errors`.
"""
