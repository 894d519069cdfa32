"""kind -> backend, imported lazily so an SDK is loaded only by the runs that use it."""

from __future__ import annotations

import importlib

from autoloop.generators.base import Generator
from autoloop.program.reader import GeneratorSpec, Program

# "module:factory"; each factory takes (GeneratorSpec, Program). The kinds program.md accepts
# (GENERATOR_KINDS) are listed there, since program.md's reader must not import the generators.
BACKENDS: dict[str, str] = {
    "command": "autoloop.generators.command:CommandGenerator",
    "claude": "autoloop.generators.agents:ClaudeGenerator",
    "codex": "autoloop.generators.agents:CodexGenerator",
    "aider": "autoloop.generators.aider:AiderGenerator",
    "anthropic": "autoloop.generators.anthropic_api:AnthropicGenerator",
    "openai": "autoloop.generators.openai_api:OpenAIGenerator",
    "tune": "autoloop.generators.tune:TuneGenerator",
}


def make_generator(spec: GeneratorSpec, program: Program) -> Generator:
    """The backend for `spec`; may raise ConfigError (e.g. bad tune markers) before anything changes."""
    module_name, _, attr = BACKENDS[spec.kind].partition(":")
    factory = getattr(importlib.import_module(module_name), attr)
    return factory(spec, program)
