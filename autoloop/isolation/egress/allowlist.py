"""Which hosts a run's sandboxes may reach through the proxy: each agent preset's model API
hosts, the hosts of the base URLs the user set (program.md's `generator.base_url`, the usual
variables), then `sandbox.hosts` (the generator) or `verifier.hosts` (the measurements).

The presets list their model API and what signing in needs, nothing else (read from the pinned
CLIs' binaries): Claude Code's telemetry (a datadoghq.com intake), updates (downloads.claude.ai,
storage.googleapis.com), Codex's plugin and skill downloads (github.com), litellm's price list
(raw.githubusercontent.com) and aider's update check (pypi.org) are refused and counted; none
is needed to edit a tree."""

from __future__ import annotations

from typing import Mapping, Sequence

from autoloop.base.hosts import Rule, url_rule

PRESET_HOSTS: dict[str, tuple[str, ...]] = {
    # a Claude subscription's sign-in refreshes its token at platform.claude.com (v2.1's binary)
    "claude": ("api.anthropic.com", "platform.claude.com"),
    # ChatGPT sign-in sends requests to chatgpt.com and refreshes its token at auth.openai.com
    "codex": ("api.openai.com", "chatgpt.com", "auth.openai.com"),
    # aider talks to the model's provider: the ones its model names map to most often
    "aider": ("api.anthropic.com", "api.openai.com", "openrouter.ai", "api.deepseek.com",
              "generativelanguage.googleapis.com"),
}
# Where the usual clients read a moved API from (Anthropic's and OpenAI's SDKs, litellm).
URL_VARIABLES = ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "OPENAI_API_BASE")


def preset_rules(kind: str) -> list[Rule]:
    return [Rule(h, (443,), False, f"{kind}'s API") for h in PRESET_HOSTS.get(kind, ())]


def url_rules(env: Mapping[str, str], base_url: str | None = None, more: Sequence[tuple[str, str]] = ()) -> list[Rule]:
    """The host:port of each base URL set: generator.base_url, the variables, and `more`
    ((url, where it was set) pairs a preset found in the tool's own configuration)."""
    found = [(base_url, "generator.base_url")] if base_url else []
    found += [(env[v], v) for v in URL_VARIABLES if env.get(v)]
    return [r for url, why in [*found, *more] if (r := url_rule(url, why)) is not None]


def args_urls(args: Sequence[str]) -> list[tuple[str, str]]:
    """Base URLs named in generator.args (`--openai-api-base URL`, `--x-base-url=URL`): the
    model's hosts, which the agent may reach."""
    words, out = list(args), []
    for i, w in enumerate(words):
        name, eq, value = w.partition("=")
        if name.startswith("--") and name.endswith(("-api-base", "-base-url")):
            out += [(u, f"generator.args {name}") for u in ([value] if eq else words[i + 1:i + 2])]
    return out
