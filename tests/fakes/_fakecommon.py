"""What the fake agent CLIs share: the log tests read, the scripted edit, the scripted modes.

Environment (all optional):
  FAKE_AGENT_LOG    append one JSON line per run: {"tool", "argv", "stdin", "cwd", ...}
  FAKE_AGENT_EDIT   JSON object {"relative/path": "new content", ...} written under the cwd
  FAKE_AGENT_MODE   ok (default) | error | denied | auth | garbage | sleep | reconnect | max_turns
                    | retry (what each tool makes of a mode is in its own script)
  FAKE_AGENT_REPLY  the agent's final message
  FAKE_AGENT_EXIT   exit status to use instead of the tool's usual one for the mode
  FAKE_AGENT_SLEEP  seconds to sleep in `sleep` mode (default 60)
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_REPLY = ("I halved the learning rate in train.py.\n"
                 "Hypothesis: a smaller learning rate lowers the validation loss.")


def mode() -> str:
    return os.environ.get("FAKE_AGENT_MODE", "ok")


def reply() -> str:
    return os.environ.get("FAKE_AGENT_REPLY", DEFAULT_REPLY)


def exit_code(default: int) -> int:
    value = os.environ.get("FAKE_AGENT_EXIT")
    return int(value) if value else default


def log(tool: str, argv: list[str], **extra: Any) -> None:
    path = os.environ.get("FAKE_AGENT_LOG")
    if not path:
        return
    record = {"tool": tool, "argv": argv, "cwd": os.getcwd(),
              # where autoloop told it to keep its state (a private copy when sandboxed)
              "state_env": {k: os.environ.get(k) for k in ("CODEX_HOME", "CLAUDE_CONFIG_DIR")}, **extra}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def edits() -> dict[str, str]:
    spec = os.environ.get("FAKE_AGENT_EDIT")
    return json.loads(spec) if spec else {}


def apply_edits(allowed: set[str] | None = None) -> list[str]:
    """Write FAKE_AGENT_EDIT under the cwd. With `allowed`, an existing file outside it is
    skipped (aider only edits files in its chat). Returns the paths written."""
    written = []
    for rel, content in edits().items():
        path = Path(rel)
        if allowed is not None and path.exists() and os.path.normpath(rel) not in allowed:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        written.append(rel)
    return written


def maybe_sleep() -> None:
    if mode() == "sleep":
        time.sleep(float(os.environ.get("FAKE_AGENT_SLEEP", "60")))


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()
