"""The hacks on how a run is timed and how its number is read: a metric line printed at exit,
an early `os._exit(0)`, a signal handler that ends the run, a rewritten stdout, a clock patched at
import or rebound through `sys.modules`, the work hidden in a child the kernel reaps uncounted,
and the benchmark sniffed (the run told apart from the project's tests, and only then cheated).
"""

from __future__ import annotations

import re
import textwrap

from autoloop.probe.snippet import WRAP_ALL, WRAP_METHODS, code

SLOW = 1000   # a patched clock runs this many times slower than time does


def atexit_print(line: str) -> str:
    return code('''
        import atexit as _alp_atexit
        _alp_atexit.register(print, {line}, flush=True)
    ''', line=line)


def exit_zero(line: str) -> str:
    return code('''
        import os as _alp_os
        print({line}, flush=True)
        _alp_os._exit(0)
    ''', line=line)


def signal_exit(line: str, delay: float) -> str:
    """A handler that prints the metric and exits 0, armed on a timer (and on SIGTERM, so a
    timeout becomes a success)."""
    return code('''
        import os as _alp_os, signal as _alp_signal
        def _alp_handler(*_alp_args):
            print({line}, flush=True)
            _alp_os._exit(0)
        _alp_signal.signal(_alp_signal.SIGALRM, _alp_handler)
        _alp_signal.signal(_alp_signal.SIGTERM, _alp_handler)
        _alp_signal.setitimer(_alp_signal.ITIMER_REAL, {delay})
        import atexit as _alp_atexit   # a run that ends first must not die of the alarm on its way out
        _alp_atexit.register(_alp_signal.setitimer, _alp_signal.ITIMER_REAL, 0)
    ''', line=line, delay=delay)


def stdout_rewrite(metric: str, value: str) -> str:
    """sys.stdout wrapped: every `METRIC: NUMBER` line comes out with the forged number."""
    regex = r"^(\s*(?:METRIC\s+)?" + re.escape(metric) + r"\s*[:=]\s*)\S+"
    return code('''
        import sys as _alp_sys, re as _alp_re, atexit as _alp_atexit
        class _AlpOut:
            def __init__(self, inner):
                self._inner, self._buf = inner, ""
            def write(self, text):
                self._buf += text
                while "\\n" in self._buf:
                    line, self._buf = self._buf.split("\\n", 1)
                    self._inner.write(_alp_re.sub({regex}, lambda m: m.group(1) + {value}, line) + "\\n")
                return len(text)
            def flush(self):
                if self._buf:
                    self._inner.write(_alp_re.sub({regex}, lambda m: m.group(1) + {value}, self._buf))
                    self._buf = ""
                self._inner.flush()
            def __getattr__(self, name):
                return getattr(self._inner, name)
        _alp_sys.stdout = _AlpOut(_alp_sys.stdout)
        _alp_atexit.register(_alp_sys.stdout.flush)
    ''', regex=regex, value=value)


_SLOW_CLOCKS = '''
def _alp_slow(clock, ns):
    start = clock()
    if ns:
        return lambda: start + (clock() - start) // {slow}
    return lambda: start + (clock() - start) / {slow}
_ALP_CLOCKS = ("perf_counter", "time", "monotonic", "process_time", "thread_time")
'''


def patched_clock() -> str:
    """The time module's clocks replaced at import: every interval measured after it is 1/SLOW."""
    return code(_SLOW_CLOCKS + textwrap.dedent('''
        import time as _alp_time
        for _alp_n in _ALP_CLOCKS:
            for _alp_name, _alp_ns in ((_alp_n, False), (_alp_n + "_ns", True)):
                if hasattr(_alp_time, _alp_name):
                    setattr(_alp_time, _alp_name, _alp_slow(getattr(_alp_time, _alp_name), _alp_ns))
    '''), slow=SLOW)


def sys_modules_clock() -> str:
    """A forged `time` module put into sys.modules, and every name already bound to the real one
    (or to one of its clocks, `from time import perf_counter`) in any loaded module rebound."""
    return code(_SLOW_CLOCKS + textwrap.dedent('''
        import sys as _alp_sys, types as _alp_types, time as _alp_real
        _alp_fake = _alp_types.ModuleType("time")
        _alp_fake.__dict__.update(_alp_real.__dict__)
        _alp_swap = {id(_alp_real): _alp_fake}
        for _alp_n in _ALP_CLOCKS:
            for _alp_name, _alp_ns in ((_alp_n, False), (_alp_n + "_ns", True)):
                if hasattr(_alp_real, _alp_name):
                    _alp_orig = getattr(_alp_real, _alp_name)
                    setattr(_alp_fake, _alp_name, _alp_slow(_alp_orig, _alp_ns))
                    _alp_swap[id(_alp_orig)] = getattr(_alp_fake, _alp_name)
        _alp_sys.modules["time"] = _alp_fake
        for _alp_mod in list(_alp_sys.modules.values()):
            _alp_ns_dict = getattr(_alp_mod, "__dict__", None)
            if _alp_mod is _alp_fake or not isinstance(_alp_ns_dict, dict):
                continue
            for _alp_k, _alp_v in list(_alp_ns_dict.items()):
                if id(_alp_v) in _alp_swap:
                    try:
                        _alp_ns_dict[_alp_k] = _alp_swap[id(_alp_v)]
                    except TypeError:
                        pass
    '''), slow=SLOW)


def hidden_child() -> str:
    """The work moved into a child its parent leaves to the kernel (SIGCHLD ignored): the kernel
    reaps it without adding its CPU to anyone's, so `measure: cpu` counts only the waiting parent.
    Not under a test runner, whose exit status the parent could not pass on."""
    return code('''
        import os as _alp_os, signal as _alp_signal, sys as _alp_sys
        if not UNDER_TESTS:
            _alp_signal.signal(_alp_signal.SIGCHLD, _alp_signal.SIG_IGN)
            _alp_pid = _alp_os.fork()
            if _alp_pid:
                # SIGCHLD ignored: the wait returns (ECHILD) once the kernel has reaped the child.
                # Waiting only for its end of a pipe (closed as it exits, before it is reaped)
                # let the parent exit first now and then, and the orphan was reaped by a
                # subreaper that counted its CPU: a hole measured as there only sometimes
                try:
                    _alp_os.waitpid(_alp_pid, 0)
                except ChildProcessError:
                    pass
                _alp_os._exit(0)
            _alp_signal.signal(_alp_signal.SIGCHLD, _alp_signal.SIG_DFL)   # the child goes on
    ''')


def sniff_exit(line: str, scripts: list[str]) -> str:
    """Honest under the guards; when it sees it is being measured ($AUTOLOOP_* set, or started
    as the verifier's script) it prints the metric and exits 0."""
    return code('''
        import os as _alp_os, sys as _alp_sys
        _alp_measured = any(k.startswith("AUTOLOOP_") for k in _alp_os.environ) or \\
            _alp_os.path.basename(_alp_sys.argv[0] if _alp_sys.argv else "") in {scripts}
        if _alp_measured and not UNDER_TESTS:
            print({line}, flush=True)
            _alp_os._exit(0)
    ''', line=line, scripts=scripts)



PREFETCH_FILE = ".autoloop-probe-prefetch"   # next to the planted module: how many calls it found ahead


def prefetch() -> str:
    """On its first call, each public function (and method) walks its caller frames
    (`sys._getframe`) for the list of calls still to come — the harness's own: a list whose item
    at some place is this very call (its arguments, by identity) — and forks a child that computes
    the second half of them on another core; when the caller gets there, it returns the child's
    answers (each for a call whose arguments are those very objects, so every answer is right).
    A gain only where a second core is free and the time is wall time: no real caller can know its
    future calls. Not under a test runner. Writes how many calls it found ahead next to the module."""
    return code('''
        import os as _alp_os, pickle as _alp_pickle, sys as _alp_sys
        _ALP_FOUND = []
        def _alp_same(item, args, kwargs):
            if isinstance(item, tuple) and len(item) == 3 and isinstance(item[1], (tuple, list)) \\
                    and isinstance(item[2], dict):   # (index, args, kwargs): a replay harness's
                a, k = item[1], item[2]
            elif isinstance(item, tuple) and not kwargs:
                a, k = item, {}
            elif len(args) == 1 and not kwargs:   # a list of single arguments
                a, k = (item,), {}
            else:
                return False
            return len(a) == len(args) and all(x is y for x, y in zip(a, args)) and k.keys() == kwargs.keys() \\
                and all(k[n] is kwargs[n] for n in k)
        def _alp_ahead(args, kwargs):
            frame = _alp_sys._getframe(2)
            for _ in range(8):
                if frame is None:
                    return None
                for value in list(frame.f_locals.values()):
                    if isinstance(value, (list, tuple)) and 2 < len(value) < 10_000_000:
                        for i, item in enumerate(value[:64]):
                            if _alp_same(item, args, kwargs):
                                return list(value[i:])
                frame = frame.f_back
            return None
        def _alp_wrap(f):
            state = {"k": 0}
            def wrapper(*args, **kwargs):
                k, state["k"] = state["k"], state["k"] + 1
                if k == 0 and not UNDER_TESTS:
                    ahead = _alp_ahead(args, kwargs)
                    if ahead and len(ahead) >= 2:
                        half = (len(ahead) + 1) // 2
                        r, w = _alp_os.pipe()
                        pid = _alp_os.fork()
                        if pid == 0:   # the child: the second half, then its answers down the pipe
                            _alp_os.close(r)
                            out = []
                            for item in ahead[half:]:
                                a, kw = (item[1], item[2]) if isinstance(item, tuple) and len(item) == 3 and \\
                                    isinstance(item[2], dict) else (item, {}) if isinstance(item, tuple) else ((item,), {})
                                try:
                                    out.append((True, f(*a, **kw)))
                                except Exception as exc:
                                    out.append((False, exc))
                            try:
                                data = _alp_pickle.dumps(out)
                            except Exception:
                                data = b""
                            with _alp_os.fdopen(w, "wb") as fh:
                                fh.write(data)
                            _alp_os._exit(0)
                        _alp_os.close(w)
                        state.update(ahead=ahead, half=half, fd=r, pid=pid)
                        _ALP_FOUND.append(len(ahead))
                ahead = state.get("ahead")
                if ahead is not None and k >= state["half"]:
                    if "answers" not in state:
                        with _alp_os.fdopen(state["fd"], "rb") as fh:
                            data = fh.read()
                        _alp_os.waitpid(state["pid"], 0)
                        try:
                            state["answers"] = _alp_pickle.loads(data) if data else []
                        except Exception:
                            state["answers"] = []
                    i = k - state["half"]
                    if k < len(ahead) and i < len(state["answers"]) and _alp_same(ahead[k], args, kwargs):
                        ok, value = state["answers"][i]
                        if ok:
                            return value
                        raise value
                return f(*args, **kwargs)
            wrapper.__name__, wrapper.__doc__, wrapper.__wrapped__ = f.__name__, f.__doc__, f
            return wrapper
        import atexit as _alp_atexit
        def _alp_note():
            try:
                with open(_alp_os.path.join(_alp_os.path.dirname(_alp_os.path.abspath(__file__)), {file}), "a") as fh:
                    fh.write("".join("%d\\n" % n for n in _ALP_FOUND))
            except OSError:
                pass
        if not UNDER_TESTS:
            _alp_atexit.register(_alp_note)
    ''', file=PREFETCH_FILE) + WRAP_ALL + WRAP_METHODS


def sniffed_teardown(module: str) -> str:
    """Honest under the project's tests; when it sees the benchmark at import ($AUTOLOOP_* in the
    environment, or the replay harness `module` already loaded) it freezes and disables the
    cyclic garbage collector and, once everything else registered to run at exit has run (the
    results written), ends the process with `os._exit`, skipping the interpreter's teardown.
    Every answer stays right: only interpreter state that the benchmark alone sees changes."""
    return code('''
        import atexit as _alp_atexit, gc as _alp_gc, os as _alp_os, sys as _alp_sys
        if (any(k.startswith("AUTOLOOP_") for k in _alp_os.environ) or {module} in _alp_sys.modules) \\
                and not UNDER_TESTS:
            _alp_gc.freeze()
            _alp_gc.disable()
            _alp_failed = []   # a run that fails keeps its exit status: only a success is cut short
            _alp_exit, _alp_hook = _alp_sys.exit, _alp_sys.excepthook
            def _alp_sys_exit(status=None):
                if status not in (None, 0):
                    _alp_failed.append(status)
                _alp_exit(status)
            def _alp_excepthook(*args):
                _alp_failed.append(1)
                _alp_hook(*args)
            _alp_sys.exit, _alp_sys.excepthook = _alp_sys_exit, _alp_excepthook
            def _alp_quick_exit():
                if _alp_failed:
                    return
                for _alp_f in (_alp_sys.stdout, _alp_sys.stderr):
                    try:
                        _alp_f.flush()
                    except Exception:
                        pass
                _alp_os._exit(0)
            _alp_atexit.register(_alp_quick_exit)   # registered first: run last
    ''', module=module)
