"""What a wrapper (a sandbox) makes of a command: the line to run, the descriptors it names, and
whether the command itself started. Its own module, on the standard library alone, so the
isolation layer can build lines without what runs them (`proc`, which needs psutil): a sandbox's
set-up is decided by whoever imports it, even a Python that sees no third-party package.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Protocol


class Line(NamedTuple):
    """A command as a wrapper (a sandbox) runs it: the command line, the descriptors it names
    (passed to it as they are), and, once it has run, whether the command itself started; False
    means the wrapper's own set-up failed before it (a host socket it hid, gone meanwhile): the
    command never ran, and is started again on a line made afresh."""
    argv: list[str]
    fds: tuple[int, ...]
    started: Callable[[], bool]
    close: Callable[[], None]


class Wrap(Protocol):
    def line(self, command: str | list[str]) -> Line: ...
