"""Keeping the generator out: the bubblewrap boxes (`sandbox`), the guardrails around the steps
(`hardening`), installs pointing into the checkout (`editable`), what the measurement commands
name (`measured_files`), the warmed bytecode cache (`pycache`).

May import: `journal`, `program`, `decide`, `git`, `disk`, `process`, `base`, `errors`.
"""
