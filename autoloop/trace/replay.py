"""Replay of recorded calls, for a sealed speed benchmark (copied by `autoloop init --trace` to
bench/tracereplay.py; bench/ is the judge's). Standard library only, Python >= 3.8: it runs in
the project's interpreter.

- what a call is here: its target (`resolve`), its outcome (`call`: a value or an exception's
  type and text; TIMEOUT past its limit) and when two outcomes are the same (`same`);
- `score`: after the measured command (tracefeed) has ended, the same calls drawn again from the
  seed and a sample of them checked: every recorded call (against the outcomes recorded at HEAD,
  or recomputed), and CHECKED derived calls chosen at random by this process, after the fact,
  recomputed with the start commit's code. Exit 1 on a difference.

The bound: a candidate wrong on a share f of the derived calls passes one score with probability
(1 - f) ** CHECKED (f = 1/1000: 5.0%); each of its runs in a decision is scored with a fresh
sample, so it passes m of them with (1 - f) ** (CHECKED * m) (docs/trust/sealed.md).
"""

from __future__ import annotations

import importlib
import json
import marshal
import os
import pickle
import random
import sys
import time
from typing import IO, Any, Callable, Collection, Mapping, Sequence

try:   # the copy beside this file, in a project's bench/; inside autoloop (its tests), the package's
    import tracederive as _derive  # type: ignore[import-not-found]
except ImportError:
    from autoloop.trace import derive as _derive  # type: ignore[no-redef]

# what init's check (tracecheck) and older scripts use from here
show, mutable, mutate, derive, draw, slots_of, text_pool, call_key = (
    _derive.show, _derive.mutable, _derive.mutate, _derive.derive, _derive.draw, _derive.slots_of,
    _derive.text_pool, _derive.call_key)
InputsPickler, Opaque = _derive.InputsPickler, _derive.Opaque
RECORDED_SHARE = _derive.RECORDED_SHARE

OK, RAISED = 0, 1
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


CHECKED = 3000   # derived calls a score recomputes (all, when a measurement has fewer)
RESULTS = "answers.marshal"   # tracefeed.RESULTS


def load(path: str) -> Any:
    """The stored calls (the project's own values in them as tracederive.Opaque)."""
    return _derive.load_inputs(path)


def _paths() -> tuple[str, str]:
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "trace.json"), os.path.join(here, ".trace", "calls.pkl")


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


def score(private_dir: str | None = None, seed: object = None, out_dir: str | None = None,
          checked: int | None = None) -> None:
    """Exit 0 when every checked outcome the command wrote is the start commit's; else exit 1
    naming the first that is not. Prints the command's own timing (for `autoloop verify`'s
    harness share; nothing is judged on it) and the seconds the check took."""
    t0 = time.perf_counter()
    try:
        _score(private_dir, seed, out_dir, CHECKED if checked is None else checked)
    finally:
        stop_limits()
    print("check_seconds: %.6f" % (time.perf_counter() - t0))


def _first_difference(name: str, todo: Sequence[tuple], wants: Mapping[int, tuple], values: list,
                      errors: dict) -> str | None:
    for j, want in wants.items():
        rec, args, kwargs = todo[j]
        err = errors.get(j)
        have = (OK, values[j]) if err is None else ((RAISED,) + tuple(err) if isinstance(err, tuple) else None)
        if not isinstance(have, tuple) or not same(want, have):
            return "%s(%s): %s, expected %s (%s call)" % (
                name, show([args, kwargs], 200), said(have), said(want),
                "a recorded" if rec >= 0 else "a derived")
    return None


def in_order(target: int, n: int) -> list:
    """Every outcome of target number `target`'s calls of this measurement, computed in order by
    a fresh process of the start commit's code (`main`'s `in-order`), as the worker ran them."""
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.pkl")
        code = ("import sys; sys.path[:0] = %r; import %s as r; r.main(['in-order', '%d', %r])"
                % ([p for p in sys.path if p], __name__, target, out))
        subprocess.run([sys.executable, "-c", code], check=True, timeout=3600)
        with open(out, "rb") as f:
            got = pickle.load(f)
    if len(got) != n:
        raise ValueError("the in-order check computed %d outcomes, expected %d" % (len(got), n))
    return got


def _in_order_here(target: int, out: str) -> None:
    plan_path, inputs_path = _paths()
    with open(plan_path) as f:
        spec = json.load(f)["targets"][target]
    given = os.environ.get("AUTOLOOP_INPUTS")
    if given and os.path.exists(given):
        with open(given, "rb") as f:
            calls = [c for b in marshal.load(f)[target][1] for c in pickle.loads(b)[2]]
    else:
        stored = {t["name"]: t for t in load(inputs_path)}
        calls = [_real(a, k) for _, a, k in draw(stored[spec["name"]], os.environ["AUTOLOOP_SEED"],
                                                   spec["derived"], spec["recorded"])]
    fn = resolve(spec["name"])
    limit_calls(spec.get("limit", 2.0))
    try:
        outcomes = [call(fn, a, k) for a, k in calls]
    finally:
        stop_limits()
    with open(out, "wb") as f:
        pickle.dump(outcomes, f, 4)


def _real(args: Any, kwargs: Any) -> tuple[Any, Any]:
    """A call's arguments with the project's own values rebuilt (the start commit's classes)."""
    return pickle.loads(pickle.dumps((args, kwargs), 4))


def pick(todos: Sequence[Sequence[tuple]], k: int, rng: Any = None, every: Collection[int] = ()) -> list[set[int]]:
    """The calls to check, per target: every recorded one, and k derived ones (of all targets)
    drawn from the system's randomness by the score, after the command has ended; all of the
    targets in `every` (whose outcomes depend on the calls before them)."""
    derived = [(t, j) for t, todo in enumerate(todos) if t not in every for j, c in enumerate(todo) if c[0] < 0]
    chosen = derived if len(derived) <= k else (rng or random.SystemRandom()).sample(derived, k)
    out = [set(range(len(todo))) if t in every else {j for j, c in enumerate(todo) if c[0] >= 0}
           for t, todo in enumerate(todos)]
    for t, j in chosen:
        out[t].add(j)
    return out


def answers(out_dir: str, packages: Collection[str], known: Collection[tuple[str, str]],
            sizes: Sequence[int]) -> list[list]:
    """The command's outcomes, per target, as [values, errors by call]: the worker's batches
    (marshal, or a pickle loaded with `_Results`) joined."""
    import io
    with open(os.path.join(out_dir, RESULTS), "rb") as f:
        got = marshal.load(f)
    batches_by_target = got.get("answers") if isinstance(got, dict) else None
    if not isinstance(batches_by_target, list) or len(batches_by_target) != len(sizes):
        raise ValueError("expected the answers of %d targets" % len(sizes))
    out = []
    for batches, n in zip(batches_by_target, sizes):
        values: list[Any] = []
        errors: dict[int, Any] = {}
        for tag, body in batches:
            part = marshal.loads(body) if tag == b"M" else _Results(io.BytesIO(body), packages, known).load()
            vs, es = part if isinstance(part, list) and len(part) == 2 else (None, None)
            if not isinstance(vs, list) or not isinstance(es, dict):
                raise ValueError("a batch of answers is not [values, errors]")
            errors.update((len(values) + j, e) for j, e in es.items() if isinstance(j, int))
            values.extend(vs)
        if len(values) != n:
            raise ValueError("%d answers, expected %d" % (len(values), n))
        out.append([values, errors])
    return out


def _score(private_dir: str | None, seed: object, out_dir: str | None, k: int) -> None:
    plan_path, inputs_path = _paths()
    with open(plan_path) as f:
        plan = json.load(f)
    seed = os.environ["AUTOLOOP_SEED"] if seed is None else seed
    out_dir = os.environ["AUTOLOOP_OUTPUT"] if out_dir is None else out_dir
    stored = load(inputs_path)
    index = {t["name"]: i for i, t in enumerate(stored)}
    known: set[tuple[str, str]] = set()
    recorded = None
    if private_dir:
        with open(os.path.join(os.path.expanduser(private_dir), "expected.pkl"), "rb") as f:
            recorded, known = _names_in(f.read())
    packages = {t["name"].split(":")[0].split(".")[0] for t in stored}
    given = os.environ.get("AUTOLOOP_INPUTS")
    if given and os.path.exists(given):   # verifier.inputs' file, which the command read: not drawn again
        with open(given, "rb") as f:
            todos = [[(rec, a, k) for rec, (a, k) in zip(recs, (c for b in batches for c in pickle.loads(b)[2]))]
                     for _, batches, _, recs in marshal.load(f)]
    else:
        todos = [draw(stored[index[s["name"]]], seed, s["derived"], s["recorded"]) for s in plan["targets"]]
    # the expected outcomes of the checked calls first, with the start commit's code: the names
    # they pickle to are the ones the candidate's results may use
    plans = []
    every = {t for t, s in enumerate(plan["targets"]) if s.get("check") == "all"}
    for spec, todo, chosen in zip(plan["targets"], todos, pick(todos, k, every=every)):
        n = index[spec["name"]]
        fn = resolve(stored[n]["name"])
        limit_calls(spec.get("limit", 2.0))
        wants = {j: recorded[n][todo[j][0]] if recorded is not None and todo[j][0] >= 0
                 else call(fn, *_real(todo[j][1], todo[j][2])) for j in sorted(chosen)}
        plans.append((stored[n]["name"], todo, wants))
    try:
        known |= _names_in(pickle.dumps([w for _, _, ws in plans for w in ws.values()], 4))[1]
    except Exception:   # an outcome that does not pickle: compared by value alone
        pass
    try:
        got = answers(out_dir, packages, known, [len(t) for t in todos])
    except Exception as exc:
        sys.exit("no results: %s: %s" % (type(exc).__name__, exc))
    checked = derived = total = loose = 0
    for t, ((name, todo, wants), (values, errors)) in enumerate(zip(plans, got)):
        total += len(todo)
        unsettled: list = []
        first = _first_difference(name, todo, wants, values, errors)
        if first is not None and t not in every:
            # a call's outcome may depend on the calls before it (state the target keeps) in a
            # way init did not see: every call of the target again, in order, in a fresh process,
            # as the worker ran them; the difference stands only if it is there too
            wants = dict(enumerate(in_order(t, len(todo))))
            first = _first_difference(name, todo, wants, values, errors)
            print("%s: a sampled outcome differed; every call checked again in order, in a fresh process" % name)
            if first is not None:
                # and once more: a call the start commit's code answers otherwise in two runs of
                # the same calls in the same order has no fixed answer (wcwidth's wrap gives each
                # hyperlink a random id); state kept between calls is the same in both
                again = in_order(t, len(todo))
                unsettled = [j for j in wants if todo[j][0] < 0 and not same(wants[j], again[j])]
                for j in unsettled:
                    del wants[j]
                first = _first_difference(name, todo, wants, values, errors)
        if unsettled:
            rec, args, kwargs = todo[unsettled[0]]
            print("%s: %d derived call(s) not checked: two runs of the start commit's code over the same calls "
                  "in the same order answer them otherwise (a random id, the time), so no answer is the right "
                  "one; e.g. %s(%s)"
                  % (name, len(unsettled), name, show([args, kwargs], 120)))
            if len(unsettled) > max(10, len(wants) // 100):
                sys.exit("%s: more than 1%% of the checked calls have no fixed answer at the start commit "
                         "(%d of %d): the target is not deterministic enough to benchmark by its results; "
                         "target a function inside it that is" % (name, len(unsettled), len(wants)))
        if first is not None:
            sys.exit(first)
        loose += len(unsettled)
        checked += len(wants)
        derived += sum(1 for j in wants if todo[j][0] < 0)
    try:
        with open(os.path.join(out_dir, "timing.json")) as f:
            timing = json.load(f)
        for key in ("target_seconds", "import_seconds", "setup_seconds", "call_seconds"):
            print("%s: %.6f" % (key, float(timing.get(key, 0.0))))
    except Exception:
        pass
    print("checked %d of %d outcomes (%d of derived calls, drawn after the run%s) against the start commit"
          % (checked, total, derived, "; %d more with no fixed answer there left out" % loose if loose else ""))


def said(outcome: object) -> str:
    if not isinstance(outcome, tuple) or not outcome:
        return "no outcome"
    if outcome[0] == RAISED:
        return "raised %s(%s)" % (outcome[1], show(outcome[2], 80))
    return "returned " + show(outcome[1] if len(outcome) > 1 else None)


def main(argv: Sequence[str] | None = None) -> None:
    """`python tracereplay.py score [PRIVATE]` (what bench/score.py does)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "score":
        score(argv[1] if len(argv) > 1 else None)
    elif argv and argv[0] == "in-order":
        _in_order_here(int(argv[1]), argv[2])
    else:
        sys.exit("usage: tracereplay.py score [PRIVATE]")


if __name__ == "__main__":
    main()
