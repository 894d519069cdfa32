"""Keep secrets out of everything autoloop writes (journal, prompts, logs, transcripts): values
of secret-looking environment variables and API-key-shaped strings become `[REDACTED]`."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

from autoloop.process.envs import CREDENTIAL_NAME   # one idea of a secret's name: the generator's env too

REDACTED = "[REDACTED]"
_SECRET_SHAPE = re.compile(r"\b(?:sk-(?:ant-)?[A-Za-z0-9_\-]{6,}|gh[pousr]_[A-Za-z0-9]{6,})")
_MIN_LEN = 6          # shorter values ("1", "true") would shred the text, not protect anything
_LINE = 1 << 20       # longest piece of a log line redacted at once


class Redactor:
    def __init__(self, *envs: Mapping[str, str], extra: Iterable[str | None] = ()) -> None:
        values: set[str] = set()
        for env in envs or (os.environ,):
            for name, value in env.items():
                if value and len(value) >= _MIN_LEN and CREDENTIAL_NAME.search(name):
                    values.add(value)
        values.update(v for v in extra if v and len(v) >= _MIN_LEN)
        # longest first, so a secret that contains another is replaced whole
        self._values = sorted(values, key=len, reverse=True)

    def text(self, s: str) -> str:
        for value in self._values:
            if value in s:
                s = s.replace(value, REDACTED)
        return _SECRET_SHAPE.sub(REDACTED, s)

    __call__ = text

    def obj(self, o: Any) -> Any:
        """Redact every string inside a JSON-like structure (keys included)."""
        if isinstance(o, str):
            return self.text(o)
        if isinstance(o, Mapping):
            return {self.text(str(k)): self.obj(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [self.obj(v) for v in o]
        return o

    def file(self, path: Path) -> None:
        """Redact a log file in place (atomically), a line at a time so a log of hundreds of MB
        costs no memory; the file is rewritten only if something was redacted."""
        tmp = path.with_name(path.name + ".redacting")
        changed = False
        try:
            with open(path, "rb") as src, open(tmp, "wb") as dst:
                while line := src.readline(_LINE):
                    text = line.decode("utf-8", "surrogateescape")
                    clean = self.text(text)
                    changed = changed or clean != text
                    dst.write(clean.encode("utf-8", "surrogateescape"))
        except OSError:
            tmp.unlink(missing_ok=True)
            return
        if changed:
            os.replace(tmp, path)
        else:
            tmp.unlink()
