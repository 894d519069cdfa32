"""Deriving a measurement's calls from the recorded ones (copied by `autoloop init --trace` to
bench/tracederive.py beside the replay module): seeded, type-preserving mutation (`mutate`,
`derive`) and the draw of one measurement's calls (`draw`), the same in every process for a
seed. Only the feeder (tracefeed) and the score draw: the process running the candidate's code
never sees the seed, so it cannot draw the calls it has not been given yet.

Standard library only, Python >= 3.8: it runs in the project's interpreter.
"""

from __future__ import annotations

import datetime
import gc
import io
import math
import pickle
import random
import types
from typing import Any, Collection, Mapping, Sequence

# Of a measurement's calls, the share replayed as recorded: the most a table of the tests' own
# calls can save, kept under the smallest min_effect a program sets (init writes 2%). Derived calls
# never repeat a recorded call nor each other within a measurement (see `draw`).
RECORDED_SHARE = 0.01



class Opaque:
    """A value of the project's own code (an instance of one of its classes, one of its
    functions) in a call's arguments, kept as its pickle: the feeder and the score draw calls
    without importing the code under test. Equal when their pickles are; never changed by
    `mutate`; the worker (and the score, for the calls it checks) gets the value back (`rebuild`)."""
    __slots__ = ("blob", "text", "qualname")

    def __init__(self, blob: bytes, text: str, qualname: str) -> None:
        self.blob, self.text, self.qualname = blob, text, qualname

    def __repr__(self) -> str:
        return self.text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opaque) and other.blob == self.blob

    def __hash__(self) -> int:
        return hash(self.blob)

    def __reduce__(self) -> tuple:
        return (rebuild, (self.blob,))


_REBUILT: dict = {}


def rebuild(blob: bytes) -> Any:
    """The value an Opaque stands for, once per process (calls share it, as they shared it in
    the recorded workload)."""
    got = _REBUILT.get(blob)
    if got is None:
        got = _REBUILT[blob] = pickle.loads(blob)
    return got


class _Inputs(pickle.Unpickler):
    def __init__(self, f: Any) -> None:
        pickle.Unpickler.__init__(self, f)
        self.memo_opaque: dict = {}

    def persistent_load(self, pid: Any) -> Any:
        kind, blob, text, qualname = pid
        if kind != "opaque":
            raise pickle.UnpicklingError("unknown persistent id %r" % (kind,))
        got = self.memo_opaque.get(blob)
        if got is None:
            got = self.memo_opaque[blob] = Opaque(blob, text, qualname)
        return got


def load_inputs(path: str) -> Any:
    """The stored calls (init's inputs/calls.pkl), the project's own values as Opaque."""
    with open(path, "rb") as f:
        return _Inputs(f).load()


class InputsPickler(pickle.Pickler):
    """Writes the stored calls with each value of `packages` (the targets' top packages) as an
    opaque reference to its own pickle (init's check, tracecheck)."""

    def __init__(self, f: Any, packages: Collection[str]) -> None:
        pickle.Pickler.__init__(self, f, 4)
        self.packages = set(packages)

    def persistent_id(self, obj: Any) -> Any:
        t = type(obj)
        named = isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType))
        module = getattr(obj, "__module__", None) if named else t.__module__
        if not isinstance(module, str) or module.split(".")[0] not in self.packages:
            return None
        buf = io.BytesIO()
        pickle.Pickler(buf, 4).dump(obj)
        name = getattr(obj, "__qualname__", None) if named else t.__qualname__
        return ("opaque", buf.getvalue(), show(obj, 10_000), str(name))


def kind(value: Any) -> str:
    """The class name a memo keyed on the instance's class would use."""
    return value.qualname if isinstance(value, Opaque) else type(value).__qualname__


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
    key = ((kind(args[0]),) + tuple(args[1:]) if method and args else tuple(args),
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
