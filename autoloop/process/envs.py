"""The environments commands run in. A measurement gets autoloop's own minus what makes an
interpreter, a shell or the loader run code from outside the verification tree, minus PATH
entries that are relative or in the work tree, plus PYTHONNOUSERSITE=1, a fresh
PYTHONPYCACHEPREFIX (no planted `.pyc` is read) and TMPDIR; the rest (HOME, CUDA_VISIBLE_DEVICES,
HF_HOME, VIRTUAL_ENV, ...) passes: the verifier is the user's and needs the user's setup."""

from __future__ import annotations

import os
import re
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from autoloop.base.walk import inside, remove_tree

# PYTHON* variables that only change how output looks or how errors are reported; every other
# one (PYTHONPATH, PYTHONSTARTUP, PYTHONHOME, PYTHONUSERBASE, ...) is dropped. So is
# PYTHONDONTWRITEBYTECODE (set in many container images): a measurement writes its bytecode into
# its own prefix, removed after it, and that is how autoloop's cache learns what to compile;
# without it every Python a measurement starts compiles its imports anew (0.2 s a start measured
# on a traced benchmark of titlecase).
_PYTHON_KEEP = frozenset({
    "PYTHONUNBUFFERED", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONHASHSEED", "PYTHONFAULTHANDLER",
    "PYTHONWARNINGS", "PYTHONLEGACYWINDOWSSTDIO", "PYTHONCOERCECLOCALE",
    "PYTHONDEVMODE", "PYTHONNODEBUGRANGES", "PYTHONINTMAXSTRDIGITS", "PYTHONTRACEMALLOC",
})
# test runners' and shells' start-up hooks, other runtimes' code-injection switches
_DROP_EXACT = frozenset({
    "PYTEST_ADDOPTS", "PYTEST_PLUGINS", "COVERAGE_PROCESS_START",
    "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "CDPATH", "GLOBIGNORE",
    "NODE_OPTIONS", "NODE_PATH", "RUBYOPT", "RUBYLIB", "PERL5OPT", "PERL5LIB", "PERLLIB",
    "PERL5DB", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "R_PROFILE",
    "R_PROFILE_USER", "R_ENVIRON", "R_ENVIRON_USER", "JULIA_LOAD_PATH", "OPENSSL_CONF",
    "OPENSSL_ENGINES", "GCONV_PATH", "TMPDIR", "TMP", "TEMP", "TEMPDIR",
})
# the loader's LD_*/DYLD_*, exported bash functions, git's GIT_* (a verifier that runs git must
# see the verification tree's repository)
_DROP_PREFIX = ("LD_", "DYLD_", "BASH_FUNC_", "GIT_", "LUA_INIT", "AUTOLOOP_")
# Kept although their prefix is dropped: what a child may learn about the run, and git's choice
# of config files (they name no repository).
_OWN = frozenset({"AUTOLOOP_CYCLE", "AUTOLOOP_TAG", "AUTOLOOP_WORKER", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM"})

# Handles on daemons that start processes on request (a terminal multiplexer, the session bus,
# a terminal's remote control): what they start is their child, not ours, and outlives every
# process check. Neither the generator nor a measurement gets them.
_DAEMONS = frozenset({
    "TMUX", "TMUX_PANE", "TMUX_TMPDIR", "STY", "SCREENDIR", "ZELLIJ", "ZELLIJ_SESSION_NAME",
    "ZELLIJ_PANE_ID", "DBUS_SESSION_BUS_ADDRESS", "DBUS_STARTER_ADDRESS", "DBUS_STARTER_BUS_TYPE",
    "KITTY_LISTEN_ON", "KITTY_WINDOW_ID", "WEZTERM_UNIX_SOCKET", "WEZTERM_PANE", "NVIM",
    "NVIM_LISTEN_ADDRESS", "VSCODE_IPC_HOOK_CLI", "VSCODE_GIT_IPC_HANDLE", "SWAYSOCK", "I3SOCK",
    "HYPRLAND_INSTANCE_SIGNATURE",
})

# The variables that point git at another repository than the one in the working directory:
# every git command autoloop or a generator runs goes without them.
GIT_LOCATION = frozenset({"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR",
                          "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES"})


def git_scrubbed(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in GIT_LOCATION}


def unsafe(name: str) -> bool:
    """Would this variable let something outside the measured tree run code in a measurement?"""
    if name.startswith("PYTHON"):
        return name not in _PYTHON_KEEP
    return name in _DROP_EXACT or name in _DAEMONS or name.startswith(_DROP_PREFIX)


def scrubbed(base: Mapping[str, str], *, scratch: Path, untrusted: Sequence[Path] = (),
             credentials: bool = True) -> dict[str, str]:
    """The environment for one measurement; `scratch` is an empty folder of its own.
    `credentials`: keep the variables `credential` names (see measurement_env)."""
    env = {k: v for k, v in base.items() if (not unsafe(k) or k in _OWN) and (credentials or not credential(k))}
    # PATH without relative or empty entries, or entries in a work tree
    path = [e for e in base.get("PATH", os.defpath).split(os.pathsep)
            if os.path.isabs(e) and not any(inside(e, r) for r in untrusted)]
    env["PATH"] = os.pathsep.join(dict.fromkeys(path)) or os.defpath
    tmp, pycache = scratch / "tmp", scratch / "pycache"
    tmp.mkdir(parents=True, exist_ok=True)
    pycache.mkdir(parents=True, exist_ok=True)
    env.update(PYTHONNOUSERSITE="1", PYTHONPYCACHEPREFIX=str(pycache),
               TMPDIR=str(tmp), TMP=str(tmp), TEMP=str(tmp), TEMPDIR=str(tmp))
    return env


@contextmanager
def measurement_env(base: Mapping[str, str], *, parent: Path, untrusted: Sequence[Path] = (),
                    credentials: bool = True) -> Iterator[dict[str, str]]:
    """A scrubbed environment with fresh scratch folders under `parent`, removed afterwards, so
    nothing a measurement does reaches the next. `credentials=False` for a sandboxed measurement
    without the network: a key is of no use to it, and what it prints (encoded past any
    redaction) reaches the next prompt."""
    parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="measure-", dir=parent))
    try:
        yield scrubbed(base, scratch=scratch, untrusted=untrusted, credentials=credentials)
    finally:
        # out of the way at once, deleted in the background: after a big import a scratch
        # holds thousands of files, and nobody needs to wait for them
        trash = scratch.with_name(f".trash-{scratch.name}")
        try:
            os.rename(scratch, trash)
        except OSError:
            trash = scratch
        threading.Thread(target=remove_tree, args=(trash,), kwargs={"quiet": True}, daemon=True).start()


# A credential by its name (the journal's redactor's shape, and PGPASSWORD's kind): a cloud's key, a code
# host's token, a CI job's OIDC request token, a database password.
CREDENTIAL_NAME = re.compile(r"(^|_)(API_?KEY|KEY|TOKEN|SECRET|CREDENTIALS?)($|_)|PASSW(OR)?D", re.IGNORECASE)
# ... but for the model's own: the agent must reach its model, and whatever it sends goes there
# anyway. Anthropic's and OpenAI's clients, Claude Code's sign-in, Codex, aider and litellm's
# providers (their `*_API_KEY`, `*_API_BASE`).
_MODEL_PREFIXES = ("ANTHROPIC_", "CLAUDE_CODE_", "OPENAI_", "AZURE_OPENAI_", "CODEX_", "AIDER_", "LITELLM_",
                   "OPENROUTER_", "DEEPSEEK_", "GEMINI_", "GOOGLE_API_KEY", "MISTRAL_", "GROQ_", "XAI_",
                   "COHERE_", "TOGETHERAI_", "TOGETHER_", "FIREWORKS_", "PERPLEXITYAI_", "CEREBRAS_", "OLLAMA_")


def credential(name: str) -> bool:
    """A variable the generator does not get: a credential that is not its model's."""
    return bool(CREDENTIAL_NAME.search(name)) and not name.upper().startswith(_MODEL_PREFIXES)


def generator_env(base: Mapping[str, str]) -> dict[str, str]:
    """The generator's environment: the caller's without GIT_LOCATION, the daemon handles and
    every credential but the model's (an agent with the network could send a cloud key or a code
    host's token anywhere its allowlist reaches; the home's files of that kind are hidden from it
    too), and no bytecode written into the tree it edits (it is never kept)."""
    env = {k: v for k, v in git_scrubbed(base).items() if k not in _DAEMONS and not credential(k)}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env
