"""Keep secrets out of everything autoloop writes: values of secret-looking environment
variables and API-key-shaped strings become `[REDACTED]`."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Mapping

_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
_KEY_SHAPES = re.compile(rb"\b(sk-ant-[A-Za-z0-9_\-]{8,}|sk-[A-Za-z0-9_\-]{16,}|gh[pousr]_[A-Za-z0-9]{20,})")
_MAX_FILE = 64 << 20   # bigger logs are left alone rather than read whole
MARK = b"[REDACTED]"


class Redactor:
    def __init__(self, secrets: list[str]) -> None:
        # longest first, so a secret that contains another is replaced whole
        self.secrets = sorted({s.encode() for s in secrets if len(s) >= 8}, key=len, reverse=True)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "Redactor":
        return cls([v for k, v in env.items() if _SECRET_NAME.search(k)])

    def bytes(self, data: bytes) -> bytes:
        for s in self.secrets:
            data = data.replace(s, MARK)
        return _KEY_SHAPES.sub(MARK, data)

    def __call__(self, text: str) -> str:
        return self.bytes(text.encode("utf-8", "surrogateescape")).decode("utf-8", "surrogateescape")

    def file(self, path: Path) -> None:
        try:
            if path.stat().st_size > _MAX_FILE:
                return
            data = path.read_bytes()
        except OSError:
            return
        clean = self.bytes(data)
        if clean != data:
            tmp = path.with_name(path.name + ".redacting")
            tmp.write_bytes(clean)
            os.replace(tmp, path)
