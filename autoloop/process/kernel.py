"""prctl(2), with nothing but the standard library: `engine.trust` calls it in a process that may
not be able to read the virtualenv (an unprivileged uid, a mode-700 install), so this module must
import without psutil or any other third-party package."""

from __future__ import annotations

import ctypes


def prctl(option: int, arg: int | ctypes.c_int = 0) -> int | None:
    """prctl(2) with one argument (a c_int is passed by pointer); None where there is none."""
    try:
        call = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None   # not Linux
    value = ctypes.byref(arg) if isinstance(arg, ctypes.c_int) else ctypes.c_ulong(arg)
    return int(call(option, value, 0, 0, 0))
