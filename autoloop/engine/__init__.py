"""The loop: `loop` (a run from lock to last line), `round` (one round of cycles), `cycle` (the
values the steps share), `steps/` (the six steps), and the measurements the rules ask for
(`measure`, `executors`, `rayexec`, `ray_task`, `rayfetch`, `verify`, `metric`), approve mode's
review, autoloop's own process (`trust`).

May import: `generators`, `isolation`, `journal`, `program`, `decide`, `git`, `disk`, `process`,
`base`, `errors`.
"""
