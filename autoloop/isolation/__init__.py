"""Keeping the generator out: the bubblewrap boxes (`sandbox`), what no box reads (`hidden`: the
home's credential places, `sandbox.hide`), the generator box's seccomp filter against the host's
unix sockets (`seccomp`), the guardrails around the steps (`hardening`), installs pointing into
the checkout (`editable`), what the measurement commands name (`measured_files`), the warmed
bytecode cache (`pycache`), what a sandboxed run's failure says (`failures`).

May import: `journal`, `program`, `decide`, `git`, `disk`, `process`, `base`, `errors`.
"""
