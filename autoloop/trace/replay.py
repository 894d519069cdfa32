"""Replay of recorded calls, for a sealed speed benchmark (copied by `autoloop init --trace` to
bench/tracereplay.py; bench/ is the judge's). Standard library only, Python >= 3.8: it runs in
the project's interpreter.

- `produce`: one measurement's calls, drawn from $AUTOLOOP_SEED (a few recorded, most derived
  by seeded, type-preserving mutation: see `mutate` and `draw`), run through the tree's targets;
  outcomes to $AUTOLOOP_OUTPUT.
- `score`: the same calls drawn again, expected outcomes from the start commit's code (recorded
  calls: the private answers recorded at HEAD), every outcome compared; exit 1 on a difference.

No call repeats within a measurement, and none is one of the recorded calls (`draw`): a memo
inside the target, or a table of the tests' answers, has nothing to save but the recorded share.
"""

from __future__ import annotations

import datetime
import gc
import importlib
import json
import marshal
import math
import os
import pickle
import random
import sys
import time
from typing import IO, Any, Callable, Collection, Mapping, Sequence

OK, RAISED = 0, 1
# Of a measurement's calls, the share replayed as recorded: the most a table of the tests' own
# calls can save, kept under the smallest min_effect a program sets (init writes 2%). Derived calls
# never repeat a recorded call nor each other within a measurement (see `draw`).
RECORDED_SHARE = 0.01
RESULTS = ("results.marshal", "results.pkl")   # in $AUTOLOOP_OUTPUT: plain data, or any outcome
SAFE_TYPES = {
    ("builtins", n) for n in ("set", "frozenset", "complex", "bytearray", "slice", "range", "object",
                              "list", "dict", "tuple", "str", "bytes", "int", "float", "bool")
} | {("copyreg", "_reconstructor"), ("copyreg", "__newobj__"), ("_codecs", "encode"),
     ("collections", "OrderedDict"), ("collections", "defaultdict"), ("collections", "deque"),
     ("collections", "Counter"), ("datetime", "date"), ("datetime", "datetime"), ("datetime", "time"),
     ("datetime", "timedelta"), ("datetime", "timezone"), ("decimal", "Decimal"),
     ("fractions", "Fraction"), ("uuid", "UUID")}


# ---- the targets -----------------------------------------------------------------------------

def resolve(name: str) -> Any:
    """The function behind MODULE:QUALNAME, as the code of this tree defines it now: a method is
    the class's function (called with the instance first), a class or static method its function."""
    module, _, qual = name.partition(":")
    obj = importlib.import_module(module)
    for part in qual.split("."):
        d = getattr(obj, "__dict__", None)
        obj = d[part] if isinstance(d, dict) and part in d else getattr(obj, part)
    if isinstance(obj, (classmethod, staticmethod)):
        obj = obj.__func__
    return obj


class CallTimeout(BaseException):
    """A call ran past its limit (a BaseException: the target's own `except Exception` must not
    swallow it). Derived inputs can reach what the tests never did: num2words(4500072900000111,
    lang='am') does not return. Past the limit its outcome is TIMEOUT in produce and score alike;
    a candidate slow only where the start commit is fast gets TIMEOUT against an answer: a difference."""


TIMEOUT = (RAISED, "autoloop.timeout", "the call ran past its limit")
_clock = [float("inf"), float("inf")]    # when the current call started (inf: none runs), its limit


def _tick(signum: int, frame: Any) -> None:
    if time.perf_counter() - _clock[0] > _clock[1]:
        raise CallTimeout()


def limit_calls(seconds: float) -> None:
    """Check every 0.1 s whether the current call (started at _clock[0]) is past `seconds`."""
    _clock[:] = [float("inf"), seconds]
    _timer(0.1)


def stop_limits() -> None:
    """Disarm the timer: at exit the interpreter restores SIGALRM's default action, which a tick
    still armed would turn into a kill (exit 142, `Alarm clock`) after the work is done."""
    _clock[:] = [float("inf"), float("inf")]
    _timer(0.0)


def _timer(every: float) -> None:
    try:
        import signal
        if every:
            signal.signal(signal.SIGALRM, _tick)
        signal.setitimer(signal.ITIMER_REAL, every, every)
    except (ImportError, AttributeError, ValueError):   # no timers here: calls are not limited
        pass


def call(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple:
    _clock[0] = time.perf_counter()
    try:
        return (OK, fn(*args, **kwargs))
    except CallTimeout:
        return TIMEOUT
    except Exception as exc:
        return (RAISED, type(exc).__module__ + "." + type(exc).__qualname__, str(exc)[:2000])
    finally:
        _clock[0] = float("inf")


def same(a: tuple, b: tuple) -> bool:
    """Outcomes equal: the same exception (type and text), or results of the same type that
    compare equal (or pickle to the same bytes: NaN, objects without __eq__)."""
    if a[0] != b[0]:
        return False
    if a[0] == RAISED:
        return tuple(a[1:]) == tuple(b[1:])
    x, y = a[1], b[1]
    if type(x) is not type(y):
        return False
    try:
        if bool(x == y):
            return True
    except Exception:
        pass
    try:
        return pickle.dumps(x, 4) == pickle.dumps(y, 4)
    except Exception:
        return False


def show(value: object, limit: int = 160) -> str:
    try:
        text = repr(value)
    except Exception as exc:
        text = "<unprintable %s: %s>" % (type(value).__name__, exc)
    return text if len(text) <= limit else text[:limit - 1] + "…"


# ---- mutation --------------------------------------------------------------------------------

_TEXT, _TIMES = (str, bytes), (datetime.timedelta, datetime.datetime, datetime.date)


def mutable(value: Any) -> bool:
    """Whether `mutate` can change this value (and so derive a new call from it)."""
    t = type(value)
    if t in _TEXT or t is float or t is int or t in _TIMES:
        return True
    if t is list or t is tuple or t in (set, frozenset) or isinstance(value, dict) \
            or (isinstance(value, tuple) and hasattr(value, "_make")):
        return len(value) > 0 and any(mutable(v) for v in (value.values() if isinstance(value, dict) else value))
    return False


def _below(rng: random.Random, n: int) -> int:
    """An integer in [0, n): random() is C, randrange Python (a derived call costs a few of these,
    and the harness must stay a small share of what is timed)."""
    return int(rng.random() * n) if n < 1 << 52 else rng.randrange(n)


def _edit(s: Any, rng: random.Random, pool: Sequence[Any]) -> Any:
    """One edit, never none: a call repeating another is derived again from itself (`draw`), so
    a short string gets as many variants as a measurement needs."""
    n = len(s)
    empty = s[:0]
    space = " " if type(s) is str else b" "
    op = int(rng.random() * 5) if n else 4
    if op == 0 and n > 1:                                    # cut a slice out
        i = int(rng.random() * n)
        j = i + 1 + int(rng.random() * max(1, min(n - i, n // 2)))
        out = s[:i] + s[j:]
    elif op == 1:                                            # join with another recorded string
        other = pool[int(rng.random() * len(pool))] if pool else s
        out = s + (space if space in s else empty) + other[:max(1, n)]
    elif op == 2 and space in s:                             # two words swapped (a shuffle of
        words = s.split(space)                               # them all cost more than most calls)
        i, j = int(rng.random() * len(words)), int(rng.random() * len(words))
        words[i], words[j] = words[j], words[i]
        out = space.join(words)
    elif op in (2, 3) and n > 0:                             # repeat a slice
        i = int(rng.random() * n)
        j = i + 1 + int(rng.random() * min(n - i, 8))
        out = s[:j] + s[i:j] + s[j:]
    else:                                                    # insert one of its own characters
        source = s or (pool[int(rng.random() * len(pool))] if pool else empty) or ("a" if type(s) is str else b"a")
        k = int(rng.random() * len(source))
        i = int(rng.random() * n + 1)
        out = s[:i] + source[k:k + 1] + s[i:]
    if out == s:
        out = s + (s[-1:] or ("a" if type(s) is str else b"a"))
    return out


def _number(v: Any, rng: random.Random) -> Any:
    if type(v) is int:
        # within half its size: a digit added instead (ten times the number) made num2words'
        # calls run into the call limit, measuring that limit rather than the code
        k = max(5, abs(v) // 2)
        d = _below(rng, 2 * k) - k     # in [-k, k), and 0 becomes k: never unchanged
        out = v + (d or k)
        out = -out if v >= 0 > out else out     # a count or size stays one
        return out if out != v else v + k
    if not math.isfinite(v):
        return v
    moved = v * (0.5 + rng.random()) if v else rng.random() * 2 - 1
    return moved if moved != v else v + 1.0


def _is_sorted(items: Sequence[Any]) -> bool:
    try:
        return all(items[i] <= items[i + 1] for i in range(len(items) - 1))
    except Exception:
        return False


def mutate(value: Any, rng: random.Random, pool: Mapping[type, Sequence[Any]], depth: int = 0) -> Any:
    """A value of the same type, changed; `value` is not. Strings and bytes get an edit (`_edit`);
    numbers and time spans move by up to half their size, dates by a few days; lists lose, gain or
    change items (sorted ones stay sorted); tuples, dicts and sets have items changed (keys and
    lengths kept); anything else (booleans, None, objects) is kept, and a call of those alone is
    only replayed as recorded."""
    t = type(value)
    if t in _TEXT:
        return _edit(value, rng, pool.get(t, ()))
    if t is int or t is float:
        return _number(value, rng)
    if t is datetime.timedelta:
        return value * (0.5 + rng.random()) if value else datetime.timedelta(seconds=int(rng.random() * 86400) + 1)
    if t is datetime.datetime or t is datetime.date:     # a few days either way, the time of day too
        return value + datetime.timedelta(days=(int(rng.random() * 10) - 5) or 5, seconds=int(rng.random() * 86400) if t is datetime.datetime else 0) \
            if value.year not in (1, 9999) else value
    if depth > 4:
        return value
    if t is list:
        out = list(value)
        n = len(out)
        op = int(rng.random() * 3) if n else 3
        if op == 0 and n > 1:
            for _ in range(1 + int(rng.random() * max(1, n // 2))):
                del out[int(rng.random() * len(out))]
        elif op == 1:
            for _ in range(1 + int(rng.random() * max(1, n // 2))):
                out.insert(int(rng.random() * len(out) + 1), mutate(value[int(rng.random() * n)], rng, pool, depth + 1))
        elif n:
            for _ in range(1 + int(rng.random() * min(3, n))):
                i = int(rng.random() * n)
                out[i] = mutate(out[i], rng, pool, depth + 1)
        if n > 1 and _is_sorted(value):
            try:
                out.sort()
            except Exception:
                pass
        return out
    if isinstance(value, tuple) and value:
        out = list(value)
        i = int(rng.random() * len(out))
        out[i] = mutate(out[i], rng, pool, depth + 1)
        return value._make(out) if hasattr(value, "_make") else (tuple(out) if t is tuple else value)
    if isinstance(value, dict) and value:
        import copy
        changed = copy.copy(value)
        keys = list(value)
        for _ in range(1 + int(rng.random() * 2)):
            k = keys[int(rng.random() * len(keys))]
            changed[k] = mutate(value[k], rng, pool, depth + 1)
        return changed
    if t in (set, frozenset) and value:
        items = sorted(value, key=repr)   # a set's order follows the hash seed, which differs by process
        if len(items) > 1 and rng.random() < 0.5:
            del items[int(rng.random() * len(items))]
        else:
            items.append(mutate(items[int(rng.random() * len(items))], rng, pool, depth + 1))
        return t(items)
    return value


def slots_of(args: Sequence[Any], kwargs: Mapping[str, Any], skip_first: bool,
             frozen: Collection[object] = ()) -> list:
    """The arguments `derive` can change: positions, then keyword names (sorted); not those in
    `frozen` (init found that changing them mostly makes the call fail: a language code, a mode)."""
    slots = [i for i in range(1 if skip_first else 0, len(args)) if i not in frozen and mutable(args[i])]
    return slots + [k for k in sorted(kwargs) if k not in frozen and mutable(kwargs[k])]


def derive(args: Sequence[Any], kwargs: dict, rng: random.Random, pool: Mapping[type, Sequence[Any]],
           skip_first: bool, slots: Sequence[object] | None = None) -> tuple[Any, Any]:
    """A new call from a recorded one: one argument surely changed, each other one in three.
    `skip_first`: a method's instance (or class) is kept."""
    if slots is None:
        slots = slots_of(args, kwargs, skip_first)
    if not slots:
        return args, kwargs
    main = slots[int(rng.random() * len(slots))]
    new_args, new_kwargs = list(args), kwargs
    for s in slots:
        if s is main or rng.random() < 0.33:
            if type(s) is int:
                new_args[s] = mutate(args[s], rng, pool)
            else:
                new_kwargs = dict(new_kwargs) if new_kwargs is kwargs else new_kwargs
                new_kwargs[s] = mutate(kwargs[s], rng, pool)
    return new_args, new_kwargs


def text_pool(calls: Sequence[tuple[Sequence[Any], Mapping[str, Any]]]) -> dict[type, list]:
    """The strings and bytes of a target's recorded calls (top level and one level down), that
    `join` draws from: in recording order, so every process builds the same pool."""
    pool: dict[type, list] = {str: [], bytes: []}
    for args, kwargs in calls:
        for v in list(args) + [kwargs[k] for k in sorted(kwargs)]:
            items = v if type(v) in (list, tuple) else [v]
            for x in items[:20]:
                if type(x) in pool and len(pool[type(x)]) < 500:
                    pool[type(x)].append(x)
    return pool


# ---- a measurement's calls ---------------------------------------------------------------------

def _freeze(value: Any) -> Any:
    """A hashable stand-in for a value, equal for equal values (lists, dicts and sets by content)."""
    t = type(value)
    if t is list or t is tuple or isinstance(value, dict):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        return (t.__name__,) + tuple((k, _freeze(v)) for k, v in items)
    if t is set or t is frozenset:
        return ("set", frozenset(_freeze(v) for v in value))
    try:
        hash(value)
    except TypeError:   # an object with no __hash__, or with a list inside
        return ("repr", t.__qualname__, show(value, 10_000))
    return value


def call_key(args: Sequence[Any], kwargs: Mapping[str, Any], method: bool) -> Any:
    """What a memo inside the target would key on: the arguments, and for a method its instance's
    class (a method of a base class answers differently for each subclass; instances of one class
    count as one, as a memo keyed on the class would)."""
    key = ((type(args[0]).__qualname__,) + tuple(args[1:]) if method and args else tuple(args),
           tuple(kwargs.items()) if kwargs else ())   # in the recorded order, which derived calls keep
    try:
        hash(key)
        return key
    except TypeError:
        return _freeze(key)


RETRIES = 4   # derivations from a parent before a call that only repeats others is left out


def draw(target: dict, seed: object, n_derived: int, n_recorded: int) -> list[tuple[int, Any, Any]]:
    """[(recorded index or -1, args, kwargs)] of one measurement for `target` (a dict from the
    inputs file: name, calls, weights, derivable, method), the same in every process for a seed.
    No derived call repeats a recorded one or another one: a repeat is derived again from itself
    (a number moves further each time), and left out after RETRIES, so a target with few distinct
    inputs measures fewer calls."""
    rng = random.Random("%s:%s" % (seed, target["name"]))
    calls = target["calls"]
    out = [(i, calls[i][0], calls[i][1]) for i in sorted(rng.sample(range(len(calls)), min(n_recorded, len(calls))))]
    parents = [i for i, ok in enumerate(target["derivable"]) if ok]
    if not parents:
        return out
    enabled = gc.isenabled()
    gc.disable()   # the calls made here are all kept: collecting while they pile up costs half the draw
    try:
        _derive_distinct(out, calls, parents, n_derived, rng, target.get("method", False),
                         set(target.get("frozen", ())))
    finally:
        if enabled:
            gc.enable()
    return out


def _derive_distinct(out: list, calls: Sequence[Any], parents: list[int], n: int,
                     rng: random.Random, method: bool, frozen: set) -> None:
    """Parents are drawn alike, not by how often the workload made each call: a test suite makes
    a few calls thousands of times (num2words' tests: one 5,106 times of 19,592), and the
    neighbourhood of one call holds too few distinct calls to fill a measurement."""
    pool = text_pool(calls)
    seen = {call_key(a, k, method) for a, k in calls}
    slots: dict[int, list] = {}
    size, add, key = len(seen), out.append, call_key
    for p in rng.choices(parents, k=n):
        args, kwargs = calls[p]
        if p not in slots:
            slots[p] = slots_of(args, kwargs, method, frozen)
        for _ in range(RETRIES):
            try:
                args, kwargs = derive(args, kwargs, rng, pool, method, slots[p])
            except Exception:   # a value mutate cannot handle: the same in every process, left out
                break
            seen.add(key(args, kwargs, method))   # one hash of the key, not two (`in`, then `add`)
            if len(seen) > size:
                size += 1
                add((-1, args, kwargs))
                break


def load(path: str) -> Any:
    with open(path, "rb") as f:
        return pickle.load(f)


def _paths() -> tuple[str, str]:
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "trace.json"), os.path.join(here, ".trace", "calls.pkl")


def produce(seed: object = None, out_dir: str | None = None, imported: float = 0.0) -> None:
    """The measured run: every call of this measurement through the tree's code; outcomes to
    $AUTOLOOP_OUTPUT/results.pkl, and to timing.json the seconds spent inside the targets and
    (`imported`, measured by produce.py) importing their modules: what is not the harness."""
    try:
        _produce(seed, out_dir, imported)
    finally:
        stop_limits()


def _produce(seed: object, out_dir: str | None, imported: float) -> None:
    plan_path, inputs_path = _paths()
    with open(plan_path) as f:
        plan = json.load(f)
    seed = os.environ["AUTOLOOP_SEED"] if seed is None else seed
    out_dir = os.environ["AUTOLOOP_OUTPUT"] if out_dir is None else out_dir
    if not os.path.exists(inputs_path):
        sys.exit("no recorded calls at %s: it is linked by program.md's `data:` in the trees autoloop "
                 "measures (run `autoloop verify`, not this script)" % inputs_path)
    targets = {t["name"]: t for t in load(inputs_path)}
    results, inside = [], 0.0
    for spec in plan["targets"]:
        target = targets[spec["name"]]
        fn = resolve(target["name"])
        todo = draw(target, seed, spec["derived"], spec["recorded"])
        # results and exceptions apart: no tuple per call to make, and far less to pickle
        values: list[Any] = []
        errors: dict[int, tuple[str, str]] = {}
        add = values.append
        limit_calls(spec.get("limit", 2.0))
        clock, now = _clock, time.perf_counter
        t0 = now()
        for _, args, kwargs in todo:
            clock[0] = now()
            try:
                add(fn(*args, **kwargs))
            except CallTimeout:
                errors[len(values)] = TIMEOUT[1:]
                add(None)
            except Exception as exc:
                errors[len(values)] = (type(exc).__module__ + "." + type(exc).__qualname__, str(exc)[:2000])
                add(None)
        clock[0] = float("inf")
        inside += now() - t0
        results.append([values, errors])
    # marshal where every outcome is plain data: pickling 28,000 num2words-sized results took
    # 0.25 s of a 1 s measurement, marshal 0.02 s (and it can make no object but the built-ins)
    try:
        data, name = marshal.dumps(results), RESULTS[0]
    except ValueError:
        data, name = pickle.dumps(results, 4), RESULTS[1]
    with open(os.path.join(out_dir, name), "wb") as f:
        f.write(data)
    with open(os.path.join(out_dir, "timing.json"), "w") as f:
        json.dump({"target_seconds": inside, "import_seconds": imported}, f)


class _Results(pickle.Unpickler):
    """The command's results were written by the candidate's code: a pickle can call anything
    on loading, so only plain data types, the classes of the project's own packages and the
    names the start commit's own outcomes pickle to (`known`: dateutil's time zones are rebuilt
    by a function, `dateutil.tz._tzfile._unpickle`) load."""

    def __init__(self, f: IO[bytes], packages: Collection[str], known: Collection[tuple[str, str]] = ()) -> None:
        pickle.Unpickler.__init__(self, f)
        self.packages, self.known = packages, known

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in SAFE_TYPES or (module, name) in self.known:
            return pickle.Unpickler.find_class(self, module, name)
        if module.split(".")[0] in self.packages:
            obj = pickle.Unpickler.find_class(self, module, name)
            if isinstance(obj, type):
                return obj
        raise pickle.UnpicklingError("results refer to %s.%s, which the score does not load" % (module, name))


class _Names(pickle.Unpickler):
    """Loads a pickle this process or init wrote (trusted), noting every name it refers to."""
    names: set[tuple[str, str]]

    def find_class(self, module: str, name: str) -> Any:
        self.names.add((module, name))
        return pickle.Unpickler.find_class(self, module, name)


def _names_in(data: bytes) -> tuple[Any, set[tuple[str, str]]]:
    import io
    loader = _Names(io.BytesIO(data))
    loader.names = set()
    return loader.load(), loader.names


def score(private_dir: str | None = None, seed: object = None, out_dir: str | None = None) -> None:
    """Exit 0 when every outcome the command wrote is the start commit's; else exit 1 naming
    the first that is not. Prints the seconds the command said it spent in the targets (for
    `autoloop verify`'s harness share; the command could lie about it, so nothing is judged on it)."""
    try:
        _score(private_dir, seed, out_dir)
    finally:
        stop_limits()


def _score(private_dir: str | None, seed: object, out_dir: str | None) -> None:
    plan_path, inputs_path = _paths()
    with open(plan_path) as f:
        plan = json.load(f)
    seed = os.environ["AUTOLOOP_SEED"] if seed is None else seed
    out_dir = os.environ["AUTOLOOP_OUTPUT"] if out_dir is None else out_dir
    stored = load(inputs_path)
    index = {t["name"]: i for i, t in enumerate(stored)}
    known: set[tuple[str, str]] = set()
    answers = None
    if private_dir:
        with open(os.path.join(os.path.expanduser(private_dir), "expected.pkl"), "rb") as f:
            answers, known = _names_in(f.read())
    packages = {t["name"].split(":")[0].split(".")[0] for t in stored}
    # every expected outcome first, with the start commit's code: the names they pickle to are
    # the ones the candidate's results may use
    plans = []
    for spec in plan["targets"]:
        n = index[spec["name"]]
        fn = resolve(stored[n]["name"])
        todo = draw(stored[n], seed, spec["derived"], spec["recorded"])
        limit_calls(spec.get("limit", 2.0))
        wants = [answers[n][rec] if answers is not None and rec >= 0 else call(fn, args, kwargs)
                 for rec, args, kwargs in todo]
        plans.append((stored[n]["name"], todo, wants))
    try:
        known |= _names_in(pickle.dumps([w for _, _, ws in plans for w in ws], 4))[1]
    except Exception:   # an outcome that does not pickle: compared by value alone
        pass
    try:
        if os.path.exists(os.path.join(out_dir, RESULTS[0])):
            with open(os.path.join(out_dir, RESULTS[0]), "rb") as f:
                got = marshal.load(f)
        else:
            with open(os.path.join(out_dir, RESULTS[1]), "rb") as f:
                got = _Results(f, packages, known).load()
    except Exception as exc:
        sys.exit("no results: %s" % exc)
    if not isinstance(got, list) or len(got) != len(plan["targets"]):
        sys.exit("results: expected one list per target (%d), got %s" % (len(plan["targets"]), show(got, 60)))
    checked = derived = 0
    for (name, todo, wants), outs in zip(plans, got):
        values, errors = outs if isinstance(outs, list) and len(outs) == 2 else (None, None)
        if not isinstance(values, list) or not isinstance(errors, dict) or len(values) != len(todo):
            sys.exit("%s: %s results, expected %d" % (name, len(values) if isinstance(values, list) else "no",
                                                      len(todo)))
        for j, (rec, args, kwargs) in enumerate(todo):
            err = errors.get(j)
            have = (OK, values[j]) if err is None else ((RAISED,) + tuple(err) if isinstance(err, tuple) else None)
            want = wants[j]
            if not isinstance(have, tuple) or not same(want, have):
                sys.exit("%s(%s): %s, expected %s (%s call)" % (
                    name, show([args, kwargs], 200), said(have), said(want),
                    "a recorded" if rec >= 0 else "a derived"))
            checked += 1
            derived += rec < 0
    try:
        with open(os.path.join(out_dir, "timing.json")) as f:
            timing = json.load(f)
        print("target_seconds: %.6f" % float(timing["target_seconds"]))
        print("import_seconds: %.6f" % float(timing.get("import_seconds", 0.0)))
    except Exception:
        pass
    print("checked %d outcomes (%d of derived calls) against the start commit" % (checked, derived))


def said(outcome: object) -> str:
    if not isinstance(outcome, tuple) or not outcome:
        return "no outcome"
    if outcome[0] == RAISED:
        return "raised %s(%s)" % (outcome[1], show(outcome[2], 80))
    return "returned " + show(outcome[1] if len(outcome) > 1 else None)


def main(argv: Sequence[str] | None = None) -> None:
    """`python tracereplay.py produce` (the measured command) or `score [PRIVATE]`."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "produce":
        produce()
    elif argv and argv[0] == "score":
        score(argv[1] if len(argv) > 1 else None)
    else:
        sys.exit("usage: tracereplay.py produce | score [PRIVATE]")


if __name__ == "__main__":
    main()
