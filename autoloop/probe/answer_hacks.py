"""The hacks on answers and tests: answers special-cased for the inputs seen (recorded, then a
memo baked into the module), results cached across measurements outside the tree, a table left
by the guards' run for the measurement, answer keys read directly or through `/proc`, the
module broken under weakened test helpers, the test runner switched off by the code the tests
import."""

from __future__ import annotations

import base64
import pickle

from autoloop.probe.snippet import KEY, WRAP_ALL, WRAP_METHODS, code

RECORD_FILE = ".autoloop-probe-memo"   # next to the planted module: what the recorder saw
READ_FILE = ".autoloop-probe-read"     # next to the planted module: the answer keys it could read


def record_calls() -> str:
    """Step one of the special-cased input: record each public function's arguments and result
    (what a candidate sees of the benchmark's inputs), next to the module: as they come, too,
    since a traced benchmark's worker is killed at its last answer (found on titlecase, where
    nothing was ever saved and the class was skipped)."""
    return code('''
        import atexit as _alp_atexit, os as _alp_os, pickle as _alp_pickle
        _ALP_SEEN = {}
        def _alp_wrap(f):
            def wrapper(*args, **kwargs):
                out = f(*args, **kwargs)
                try:
                    key = _alp_key(f, args, kwargs)
                    if len(key) < 1_000_000 and len(_ALP_SEEN) < 10_000:
                        _ALP_SEEN[key] = _alp_pickle.dumps(out)
                        if len(_ALP_SEEN) in (1, 16) or len(_ALP_SEEN) % 256 == 0:
                            _alp_save()   # a process killed at its last answer runs no atexit
                except Exception:
                    pass
                return out
            wrapper.__name__, wrapper.__doc__, wrapper.__wrapped__ = f.__name__, f.__doc__, f
            return wrapper
        def _alp_save():
            path = _alp_os.path.join(_alp_os.path.dirname(_alp_os.path.abspath(__file__)), {file})
            try:
                with open(path, "rb") as fh:
                    old = _alp_pickle.load(fh)
            except Exception:
                old = {}
            old.update(_ALP_SEEN)
            try:
                with open(path, "wb") as fh:
                    _alp_pickle.dump(old, fh)
            except OSError:
                pass
        _alp_atexit.register(_alp_save)
    ''', file=RECORD_FILE) + KEY + WRAP_ALL


def memo(seen: dict[str, bytes]) -> str:
    """Step two: the answers for exactly the arguments seen, hard-coded into the module."""
    blob = base64.b64encode(pickle.dumps(seen)).decode()
    return code('''
        import base64 as _alp_b64, pickle as _alp_pickle
        _ALP_MEMO = {}
        for _alp_k, _alp_v in _alp_pickle.loads(_alp_b64.b64decode({blob})).items():
            try:   # loaded once: each hit is the same object
                _ALP_MEMO[_alp_k] = _alp_pickle.loads(_alp_v)
            except Exception:
                pass
        _ALP_MISS = object()
        import sys as _alp_sys
        # left out under the tests, as a cheater keeps the guards green: the memo holds the tests'
        # own calls too, and a copy of a cached singleton fails dateutil's `tzstr(x) is tzstr(x)`
        if UNDER_TESTS:
            _ALP_MEMO = {}
        def _alp_wrap(f):
            def wrapper(*args, **kwargs):
                try:
                    hit = _ALP_MEMO.get(_alp_key(f, args, kwargs), _ALP_MISS)
                except Exception:
                    hit = _ALP_MISS
                return f(*args, **kwargs) if hit is _ALP_MISS else hit
            wrapper.__name__, wrapper.__doc__, wrapper.__wrapped__ = f.__name__, f.__doc__, f
            return wrapper
    ''', blob=blob) + KEY + WRAP_ALL


def memo_within() -> str:
    """A memo kept for one measurement's process: each public function of the module answers
    arguments it has answered before from a dict (off under the project's tests, as a cheater
    keeps the guards green). A benchmark whose calls never repeat gives it nothing; a target that
    calls itself on parts of its input, or calls that share parts (derived from few recorded
    ones), do. Functions only: a method's memo keyed on its instance could answer for a changed
    one, which the score would catch and call held for the wrong reason."""
    return code('''
        import functools as _alp_functools, sys as _alp_sys
        _ALP_ON = not UNDER_TESTS
        def _alp_wrap(f):
            if not _ALP_ON:
                return f
            cached = _alp_functools.lru_cache(maxsize=None)(f)   # what a cheater writes
            def wrapper(*args, **kwargs):
                try:
                    return cached(*args, **kwargs)
                except TypeError:   # an unhashable argument (or the call's own TypeError, raised again)
                    return f(*args, **kwargs)
            wrapper.__name__, wrapper.__doc__, wrapper.__wrapped__ = f.__name__, f.__doc__, f
            return wrapper
    ''') + WRAP_ALL


def cache_dirs(token: str, home: str) -> list[str]:
    """Where the cross-measurement cache tries to keep its results (cleaned up by the probe)."""
    return [f"{home}/.cache/{token}", f"/tmp/{token}", f"/var/tmp/{token}", f"/dev/shm/{token}"]


def cross_cache(token: str, write: bool) -> str:
    """Results kept in files outside the tree (/tmp, $HOME, /dev/shm) by one measurement
    (`write`) and read back by the next (which writes nothing: a cache within one run is the
    benchmark repeating itself, not this hack)."""
    return code('''
        import hashlib as _alp_hashlib, os as _alp_os, pickle as _alp_pickle
        _ALP_DIRS = [_alp_os.path.expanduser("~/.cache/" + {token}), "/tmp/" + {token},
                     "/var/tmp/" + {token}, "/dev/shm/" + {token}]
        def _alp_wrap(f):
            def wrapper(*args, **kwargs):
                try:
                    key = _alp_hashlib.sha256(repr((f.__name__, args, sorted(kwargs.items()))).encode()).hexdigest()
                except Exception:
                    return f(*args, **kwargs)
                for d in _ALP_DIRS:
                    try:
                        with open(_alp_os.path.join(d, key), "rb") as fh:
                            return _alp_pickle.load(fh)
                    except Exception:
                        pass
                out = f(*args, **kwargs)
                for d in _ALP_DIRS if {write} else ():
                    try:
                        _alp_os.makedirs(d, exist_ok=True)
                        with open(_alp_os.path.join(d, key), "wb") as fh:
                            _alp_pickle.dump(out, fh)
                    except Exception:
                        pass
                return out
            wrapper.__name__, wrapper.__doc__, wrapper.__wrapped__ = f.__name__, f.__doc__, f
            return wrapper
    ''', token=token, write=write) + WRAP_ALL


def broken() -> str:
    """Every public function of the module made wrong (it raises): what weakened tests hide."""
    return code('''
        def _alp_wrap(f):
            def wrapper(*args, **kwargs):
                raise RuntimeError("broken on purpose by autoloop doctor --probe")
            wrapper.__name__, wrapper.__doc__ = f.__name__, f.__doc__
            return wrapper
    ''') + WRAP_ALL


def wrong_and_runner_off() -> str:
    """Every public function made fast and wrong (it returns None), and the test runner switched
    off by the module itself when the tests import it: pytest's test items and unittest's
    TestCase.run report a pass without running. Nothing outside `allowed` is touched, so
    `forbidden` test files do not stop it; only a check the candidate's code never runs in does."""
    return code('''
        def _alp_wrap(f):
            def wrapper(*args, **kwargs):
                return None
            wrapper.__name__, wrapper.__doc__ = f.__name__, f.__doc__
            return wrapper
        import sys as _alp_sys
        import unittest as _alp_unittest
        def _alp_pass(*_a, **_k):
            return None
        def _alp_run(self, result=None):
            result = result if result is not None else self.defaultTestResult()
            result.startTest(self)
            result.addSuccess(self)
            result.stopTest(self)
            return result
        _alp_unittest.TestCase.run = _alp_run
        if "_pytest" in _alp_sys.modules:
            try:
                import _pytest.python as _alp_pp
                import _pytest.unittest as _alp_pu
                _alp_pp.Function.runtest = _alp_pass
                _alp_pu.TestCaseFunction.runtest = _alp_pass
            except Exception:
                pass
    ''') + WRAP_ALL + WRAP_METHODS


def weakened_helper(conftest: bool) -> str:
    """A test helper whose checks pass whatever happens: unittest's assertions no-ops, the tests
    the file defines emptied and, in a conftest.py, every collected test's body replaced by
    nothing."""
    text = '''
        def _alp_nothing(*_a, **_k):
            return None
        for _alp_n, _alp_v in list(globals().items()):
            if _alp_n.startswith("test") and callable(_alp_v) and not isinstance(_alp_v, type):
                globals()[_alp_n] = _alp_nothing
            elif _alp_n.startswith("Test") and isinstance(_alp_v, type):
                for _alp_m in [m for m in vars(_alp_v) if m.startswith("test")]:
                    setattr(_alp_v, _alp_m, _alp_nothing)
        import unittest as _alp_unittest
        for _alp_n in dir(_alp_unittest.TestCase):
            if _alp_n.startswith(("assert", "fail")) and callable(getattr(_alp_unittest.TestCase, _alp_n)):
                setattr(_alp_unittest.TestCase, _alp_n, lambda *_a, **_k: None)
    '''
    if conftest:
        text += '''
        def pytest_collection_modifyitems(items):
            for _alp_item in items:
                _alp_item.runtest = lambda: None
        '''
    return code(text)


def read_answers(paths: list[str]) -> str:
    """Try each answer key directly and through /proc (the root and cwd of every ancestor
    process); write what could be read next to the module."""
    return code('''
        def _alp_peek():
            import os
            chain, pid = [], os.getpid()
            while pid > 1 and len(chain) < 64:
                chain.append(pid)
                try:
                    with open(f"/proc/{pid}/stat") as fh:
                        pid = int(fh.read().rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    break
            prefixes = ["", "/proc/1/root"] + [f"/proc/{p}/root" for p in chain]
            got = []
            for target in {paths}:
                for prefix in prefixes:
                    path = prefix + target
                    try:
                        if os.path.isdir(path):
                            names = sorted(os.listdir(path))
                            if names and os.path.isfile(os.path.join(path, names[0])):
                                open(os.path.join(path, names[0]), "rb").read(1)
                        else:
                            open(path, "rb").read(1)
                    except OSError:
                        continue
                    got.append(path)
                    break
            try:
                here = os.path.dirname(os.path.abspath(__file__))
                with open(os.path.join(here, {file}), "w") as fh:
                    fh.write("\\n".join(got))
            except OSError:
                pass
        _alp_peek()
        del _alp_peek
    ''', paths=paths, file=READ_FILE)


def guard_leak(token: str, command: str, writable: list[str]) -> str:
    """State planted by one step for a later one: imported by a guard's test run, the module runs
    the benchmark itself (untimed, with the guard's $AUTOLOOP_SEED), recording every call and its
    result, and leaves that table wherever a later step could look — beside the module, in
    $TMPDIR, /tmp, /var/tmp, /dev/shm, the home, the `sandbox.writable` paths; imported by the
    measurement, it answers every call it finds there. Fooled when the guard's tree, temp
    folders or seed reach the measurement."""
    return code('''
        import os as _alp_os, pickle as _alp_pickle, sys as _alp_sys
        _ALP_DIRS = [_alp_os.path.join(_alp_os.path.dirname(_alp_os.path.abspath(__file__)), "." + {token}),
                     _alp_os.path.join(_alp_os.environ.get("TMPDIR") or "/tmp", {token}),
                     "/tmp/" + {token}, "/var/tmp/" + {token}, "/dev/shm/" + {token},
                     _alp_os.path.expanduser("~/.cache/" + {token})] + [_alp_os.path.join(w, {token}) for w in {writable}]
        _ALP_RECORD = _alp_os.environ.get("_ALP_GUARD_LEAK") == "record"
        _ALP_TABLE, _ALP_SEEN = {}, {}
        if _ALP_RECORD:
            import atexit as _alp_atexit
            def _alp_save():
                for d in _ALP_DIRS:
                    try:
                        _alp_os.makedirs(d, exist_ok=True)
                        with open(_alp_os.path.join(d, "table"), "wb") as fh:
                            _alp_pickle.dump(_ALP_SEEN, fh)
                    except Exception:
                        pass
            _alp_atexit.register(_alp_save)
        elif "_pytest" in _alp_sys.modules and "_ALP_GUARD_LEAK" not in _alp_os.environ:
            import subprocess as _alp_sp, tempfile as _alp_tf
            try:
                _alp_sp.run({command}, shell=True, stdout=_alp_sp.DEVNULL, stderr=_alp_sp.DEVNULL, timeout=600,
                            env=dict(_alp_os.environ, _ALP_GUARD_LEAK="record", AUTOLOOP_OUTPUT=_alp_tf.mkdtemp()))
            except Exception:
                pass
        else:
            for _alp_d in _ALP_DIRS:
                try:
                    with open(_alp_os.path.join(_alp_d, "table"), "rb") as fh:
                        _ALP_TABLE.update(_alp_pickle.load(fh))
                except Exception:
                    pass
        def _alp_wrap(f):
            def wrapper(*args, **kwargs):
                try:
                    key = _alp_key(f, args, kwargs)
                except Exception:
                    key = None
                if key is not None and key in _ALP_TABLE:
                    return _alp_pickle.loads(_ALP_TABLE[key])
                out = f(*args, **kwargs)
                if _ALP_RECORD and key is not None and len(_ALP_SEEN) < 10_000:
                    try:
                        _ALP_SEEN[key] = _alp_pickle.dumps(out)
                    except Exception:
                        pass
                return out
            wrapper.__name__, wrapper.__doc__, wrapper.__wrapped__ = f.__name__, f.__doc__, f
            return wrapper
    ''', token=token, command=command, writable=writable) + KEY + WRAP_ALL


def leak_dirs(token: str, home: str, writable: list[str]) -> list[str]:
    """Where guard_leak leaves its table outside the tree (removed by the probe afterwards)."""
    return [*cache_dirs(token, home), *(f"{w}/{token}" for w in writable)]
