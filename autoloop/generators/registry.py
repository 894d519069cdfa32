"""kind -> backend. Imported lazily so an SDK is loaded only by the runs that use it."""

from __future__ import annotations

import importlib

from autoloop.generators.base import Generator
from autoloop.program import GeneratorSpec, Program

# "module:factory" — each factory takes (GeneratorSpec, Program) and returns a Generator.
_BACKENDS: dict[str, str] = {
    "command": "autoloop.generators.command:CommandGenerator",
    "claude": "autoloop.generators.agents:claude",
    "codex": "autoloop.generators.agents:codex",
    "aider": "autoloop.generators.agents:aider",
    "anthropic": "autoloop.generators.anthropic_api:AnthropicGenerator",
    "openai": "autoloop.generators.openai_api:OpenAIGenerator",
    "tune": "autoloop.generators.tune:TuneGenerator",
}

KINDS: tuple[str, ...] = tuple(_BACKENDS)


def make_generator(spec: GeneratorSpec, program: Program) -> Generator:
    """Build the backend for `spec`. May raise ConfigError (e.g. bad tune markers) before anything changes."""
    module_name, _, attr = _BACKENDS[spec.kind].partition(":")
    factory = getattr(importlib.import_module(module_name), attr)
    return factory(spec, program)
