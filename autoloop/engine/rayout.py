"""Ray's own output kept out of the terminal (executor: ray): its C++ log lines (written straight
to file descriptor 2 while it connects and shuts down), the error messages its driver thread
prints to sys.stdout (a dead raylet's last 20 log lines) and its Python loggers all go to one
file, .autoloop/<tag>/ray.log; autoloop's own lines keep the terminal. And a refusal in one line: Ray's reason, and what to set for it."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any, Iterator, Mapping, TextIO

from autoloop.engine.hints import plain

_lock = threading.Lock()
_saved: dict[str, Any] = {}      # what restore() puts back

AUTH_HINT = ("the cluster uses token authentication: set RAY_AUTH_MODE=token and give autoloop the "
             "cluster's token (RAY_AUTH_TOKEN, or its file in RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)")
_AUTH_SIGNS = ("InvalidAuthToken", "AuthenticationError", "UNAUTHENTICATED", "token authentication")
CONNECT_RETRIES = 5   # a second apart


def init(ray: Any, kw: Mapping[str, Any], log_path: Path) -> None:
    """ray.init(**kw), its output into `log_path`; Ray's loggers and its driver's printed errors
    go there too until restore()."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    _loggers(log_path)
    # Ray asks a running cluster's GCS that refuses it (a missing token) 20 times, a second
    # apart, before it says so: fewer, unless the person chose (RAY_NUM_REDIS_GET_RETRIES); a
    # running GCS that answers at all answers the first time. (A private instance's GCS is
    # still starting: it keeps Ray's patience.)
    from ray._private import ray_constants

    retries = getattr(ray_constants, "NUM_REDIS_GET_RETRIES", None) if kw.get("address") else None
    if retries is not None and "RAY_NUM_REDIS_GET_RETRIES" not in os.environ:
        ray_constants.NUM_REDIS_GET_RETRIES = min(retries, CONNECT_RETRIES)
    try:
        with quiet(log_path):
            ray.init(**kw)
    except BaseException:
        restore()
        raise
    finally:
        if retries is not None:
            ray_constants.NUM_REDIS_GET_RETRIES = retries
    _quiet_driver_thread(log_path)


@contextlib.contextmanager
def quiet(log_path: Path | None) -> Iterator[None]:
    """File descriptor 2 into `log_path` meanwhile: Ray's C++ side writes its log lines there
    (a refused connection, every second, for as long as it retries). Only around Ray's own
    calls: anything holding sys.stderr (a progress line) keeps the terminal."""
    if log_path is None:
        yield
        return
    sys.stderr.flush()
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    terminal = os.dup(2)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    try:
        yield
    finally:
        os.dup2(terminal, 2)
        os.close(terminal)


def _loggers(log_path: Path) -> None:
    with _lock:
        if _saved:
            return
        for name in ("ray", "ray.data", "ray.tune"):
            logger = logging.getLogger(name)
            _saved.setdefault("loggers", []).append((logger, list(logger.handlers), logger.propagate))
            logger.handlers = [logging.StreamHandler(_Appender(log_path))]
            logger.propagate = False


class _Appender(io.TextIOBase):
    """A text sink that appends each write to the log file (opened per write: cheap at Ray's rate)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, s: str) -> int:
        try:
            with open(self.path, "a", encoding="utf-8", errors="backslashreplace") as f:
                f.write(s)
        except OSError:
            pass
        return len(s)


def _quiet_driver_thread(log_path: Path) -> None:
    """Ray's driver prints the errors the cluster publishes (a dead raylet's state dump) to
    sys.stdout, between the table's rows: into the log instead."""
    try:
        from ray._private import worker
    except ImportError:
        return
    sink: TextIO = _Appender(log_path)   # type: ignore[assignment]

    def to_log(data: Mapping[str, Any], ignore_prefix: bool = False) -> None:
        for line in data.get("lines") or ():
            sink.write(f"[{data.get('pid', 'ray')}] {line}\n")

    if hasattr(worker, "print_to_stdstream"):
        _saved.setdefault("printer", worker.print_to_stdstream)
        worker.print_to_stdstream = to_log


def restore() -> None:
    """Put Ray's loggers and its printer back (after ray.shutdown)."""
    with _lock:
        for logger, handlers, propagate in _saved.get("loggers", ()):
            logger.handlers, logger.propagate = handlers, propagate
        if "printer" in _saved:
            from ray._private import worker

            worker.print_to_stdstream = _saved["printer"]
        _saved.clear()


def reason(exc: BaseException, log_path: Path | None = None) -> str:
    """Ray's reason for `exc` in one clean line (terminal escapes and newlines gone), and for a
    token refusal what to set; Ray's log is read for the reason its exception leaves out."""
    text = " ".join(plain(str(exc)).split())
    said = text
    if log_path is not None:
        try:
            with open(log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 65536))
                said += f.read().decode("utf-8", "replace")
        except OSError:
            pass
    line = f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__
    if any(sign in said for sign in _AUTH_SIGNS):
        line += f"; {AUTH_HINT}"
    return line
