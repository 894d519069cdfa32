"""The call recorder `autoloop init --trace` loads into every Python process of the traced
command (through a `sitecustomize` on PYTHONPATH, so it works for pytest, unittest, a script
and their Python subprocesses alike, whatever runs them).

Standard library only, and written for the oldest Python a project may run (3.8): it runs in the
project's interpreter, not autoloop's. Python 3.12+ uses sys.monitoring, which calls back only
for the targets' code (the rest of the workload runs at full speed); older ones use
sys.setprofile, which sees every call (the workload runs slower while it is recorded).

What it keeps, per target: each distinct call's arguments (pickled when the call starts, before
the call can change them) and how many times it was made, the outcome (pickled result, or the
exception's type and text) and the module's file. What it cannot keep it counts, by reason.
Nothing is judged here: `replay.check` runs every call again at HEAD to say which are usable.
Configured by AUTOLOOP_TRACE_DIR (where each process writes rec-PID.pkl at exit) and
AUTOLOOP_TRACE_TARGETS (comma-separated MODULE:QUALNAME).
"""

from __future__ import annotations

import atexit
import hashlib
import inspect
import os
import pickle
import sys
import threading
from types import CodeType, FrameType
from typing import Any

CAP = 2000   # distinct calls kept per target: more adds little but recording and checking time
GENERATOR_FLAGS = 0x20 | 0x80 | 0x100 | 0x200   # CO_GENERATOR, COROUTINE, ITERABLE_COROUTINE, ASYNC_GENERATOR
RAISED, RETURNED, NONE_OR_RAISED = "raised", "returned", "none-or-raised"


class _Target:
    def __init__(self, name: str) -> None:
        self.name = name
        self.module, _, self.qualname = name.partition(":")
        self.code: CodeType | None = None
        self.file: str | None = None
        self.defaults: tuple = ()
        self.kwdefaults: dict[str, Any] = {}
        self.gen_first: int | None = None
        self.calls: dict[str, list] = {}      # digest -> [args bytes, outcome, count]
        self.refused: dict[str, list] = {}    # reason -> [count, example]
        self.seen = 0

    def refuse(self, reason: str, example: str = "") -> None:
        slot = self.refused.setdefault(reason, [0, example])
        slot[0] += 1


def _resolve(t: _Target) -> CodeType | None:
    """The code object of target `t`, once its module is imported (None until then)."""
    mod = sys.modules.get(t.module)
    if mod is None:
        return None
    obj: Any = mod
    try:
        for part in t.qualname.split("."):
            d = getattr(obj, "__dict__", None)
            obj = d[part] if isinstance(d, dict) and part in d else getattr(obj, part)
    except Exception:
        return None
    if isinstance(obj, (classmethod, staticmethod)):
        obj = obj.__func__
    try:
        obj = inspect.unwrap(obj)
    except Exception:
        pass
    code = getattr(obj, "__code__", None)
    if code is not None:
        t.file = getattr(mod, "__file__", None)
        t.defaults = getattr(obj, "__defaults__", None) or ()
        t.kwdefaults = getattr(obj, "__kwdefaults__", None) or {}
    return code


def _arguments(frame: FrameType, code: CodeType, defaults: tuple,
               kwdefaults: dict[str, Any]) -> tuple[list, dict]:
    """(args, kwargs) the frame was called with, read from its locals before its body ran. A
    parameter holding its default object itself was most likely not passed: it is left out (so
    replay does not vary what the caller never chose), trailing positional ones only."""
    names = code.co_varnames
    n_pos, n_kw = code.co_argcount, code.co_kwonlyargcount
    loc = frame.f_locals
    args = [loc[n] for n in names[:n_pos]]
    kwargs = {n: loc[n] for n in names[n_pos:n_pos + n_kw] if not (n in kwdefaults and loc[n] is kwdefaults[n])}
    at = n_pos + n_kw
    if code.co_flags & 0x04 and loc[names[at]]:      # *args
        args.extend(loc[names[at]])
    elif defaults:
        first = n_pos - len(defaults)
        while len(args) > first and args[-1] is defaults[len(args) - 1 - first]:
            args.pop()
    at += 1 if code.co_flags & 0x04 else 0
    if code.co_flags & 0x08:      # **kwargs
        kwargs.update(loc[names[at]])
    return args, kwargs


class Recorder:
    def __init__(self, names: list[str], out_dir: str) -> None:
        self.targets = [_Target(n) for n in names]
        self.by_name: dict[str, list[_Target]] = {}
        for t in self.targets:
            self.by_name.setdefault(t.qualname.rsplit(".", 1)[-1], []).append(t)
        self.by_code: dict[CodeType, _Target] = {}
        self.pending: dict[int, tuple] = {}        # id(frame) -> (target, digest or None)
        self.depth: dict[tuple[int, str], int] = {}          # (thread, target name) -> open calls: only the outermost is kept
        self.out_dir = out_dir
        self.busy = threading.local()

    def target_of(self, code: CodeType) -> _Target | None:
        t = self.by_code.get(code)
        if t is not None:
            return t
        for cand in self.by_name.get(code.co_name, ()):
            if cand.code is None:
                cand.code = _resolve(cand)
                if cand.code is not None:
                    self.by_code[cand.code] = cand
            if cand.code is code:
                return cand
        return None

    def start(self, frame: FrameType, t: _Target) -> None:
        if getattr(self.busy, "on", False) or t.code is None:
            return
        if t.code.co_flags & GENERATOR_FLAGS:
            # sys.setprofile reports every resume as a call: a start is at the lowest offset
            if t.gen_first is None or frame.f_lasti <= t.gen_first:
                t.gen_first = frame.f_lasti
                t.seen += 1
                t.refuse("a generator or coroutine: its work happens after the call returns")
            return
        key = (threading.get_ident(), t.name)
        depth = self.depth.get(key, 0)
        self.depth[key] = depth + 1
        if depth:
            self.pending[id(frame)] = (t, None, key)
            return
        t.seen += 1
        digest = None
        self.busy.on = True
        try:
            blob = pickle.dumps(_arguments(frame, t.code, t.defaults, t.kwdefaults), 4)
        except Exception as exc:
            t.refuse("arguments do not pickle", "%s: %s" % (type(exc).__name__, str(exc)[:120]))
        else:
            digest = hashlib.sha1(blob).hexdigest()
            known = t.calls.get(digest)
            if known is not None:
                known[2] += 1
                digest = None   # its outcome is known
            elif len(t.calls) >= CAP:
                t.refuse("more than %d distinct calls (the rest are left out)" % CAP)
                digest = None
            else:
                t.calls[digest] = [blob, None, 1]
        finally:
            self.busy.on = False
        self.pending[id(frame)] = (t, digest, key)

    def finish(self, frame: FrameType, kind: str, value: Any) -> None:
        got = self.pending.pop(id(frame), None)
        if got is None:
            return
        t, digest, key = got
        self.depth[key] -= 1
        if digest is None:
            return
        self.busy.on = True
        outcome: tuple
        try:
            if kind == RAISED:
                outcome = (RAISED, type(value).__module__ + "." + type(value).__qualname__, str(value)[:2000])
            elif kind == NONE_OR_RAISED:
                outcome = (NONE_OR_RAISED,)
            else:
                try:
                    outcome = (RETURNED, pickle.dumps(value, 4))
                except Exception as exc:
                    t.calls.pop(digest, None)
                    t.refuse("result does not pickle", "%s: %s" % (type(exc).__name__, str(exc)[:120]))
                    return
            t.calls[digest][1] = outcome
        finally:
            self.busy.on = False

    # ---- sys.setprofile (before 3.12) --------------------------------------------------------
    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            if code.co_name in self.by_name:
                t = self.target_of(code)
                if t is not None:
                    self.start(frame, t)
        elif event == "return" and self.pending:
            # a return event cannot tell None from an exception: the check at HEAD tells
            self.finish(frame, RETURNED if arg is not None else NONE_OR_RAISED, arg)

    # ---- sys.monitoring (3.12+) --------------------------------------------------------------
    def monitor(self) -> None:
        mon: Any = getattr(sys, "monitoring")
        tool = mon.PROFILER_ID
        try:
            mon.use_tool_id(tool, "autoloop-trace")
        except ValueError:          # taken (a profiler or coverage.py): take another
            tool = next(i for i in range(6) if mon.get_tool(i) is None)
            mon.use_tool_id(tool, "autoloop-trace")
        ev = mon.events

        def on_start(code: CodeType, offset: int) -> Any:
            if code.co_name not in self.by_name:
                return mon.DISABLE
            t = self.target_of(code)
            if t is None:
                return mon.DISABLE
            mon.set_local_events(tool, code, ev.PY_RETURN)
            self.start(sys._getframe(1), t)
            return None

        def on_return(code: CodeType, offset: int, value: Any) -> Any:
            if code in self.by_code:
                self.finish(sys._getframe(1), RETURNED, value)
            return None

        def on_unwind(code: CodeType, offset: int, exc: BaseException) -> None:
            if code in self.by_code and self.pending:
                self.finish(sys._getframe(1), RAISED, exc)

        mon.register_callback(tool, ev.PY_START, on_start)
        mon.register_callback(tool, ev.PY_RETURN, on_return)
        mon.register_callback(tool, ev.PY_UNWIND, on_unwind)
        mon.set_events(tool, ev.PY_START | ev.PY_UNWIND)

    def save(self) -> None:
        targets: dict[str, dict] = {}
        data = {"python": sys.executable, "version": list(sys.version_info[:3]), "targets": targets}
        for t in self.targets:
            targets[t.name] = {"calls": [v for v in t.calls.values() if v[1] is not None],
                                       "refused": t.refused, "seen": t.seen, "file": t.file}
        path = os.path.join(self.out_dir, "rec-%d.pkl" % os.getpid())
        with open(path + ".part", "wb") as f:
            pickle.dump(data, f, 4)
        os.replace(path + ".part", path)


def install() -> Recorder | None:
    names = [n for n in os.environ.get("AUTOLOOP_TRACE_TARGETS", "").split(",") if n]
    out_dir = os.environ.get("AUTOLOOP_TRACE_DIR")
    if not names or not out_dir:
        return None
    rec = Recorder(names, out_dir)
    if sys.version_info >= (3, 12):
        rec.monitor()
    else:
        sys.setprofile(rec.profile)
        threading.setprofile(rec.profile)
    atexit.register(rec.save)
    return rec
