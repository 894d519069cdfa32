"""init's check of the recorded calls at HEAD (`autoloop init --trace`), run by the project's own
interpreter (only it can load the arguments) beside a copy of the replay module: which calls are
usable — each run twice at HEAD with the same outcome, as recorded, its arguments unchanged and no
file written — why the others are not, which arguments derived calls should keep, and how long
calls take, to size a measurement. It writes the store: the usable calls (inputs/calls.pkl) and
their outcomes (private/expected.pkl).

Standard library only, for any Python >= 3.8, like the replay module.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import random
import sys
import time
from typing import Any, Callable

try:   # inside autoloop (its tests); in the project's interpreter, the copy beside this file
    from autoloop.trace import replay
except ImportError:
    import tracereplay as replay  # type: ignore[no-redef]

OK, RAISED = replay.OK, replay.RAISED
call, same, show, derive, slots_of, text_pool = (replay.call, replay.same, replay.show, replay.derive,
                                                 replay.slots_of, replay.text_pool)
resolve = replay.resolve
LIMIT_S = 2.0   # a call that runs longer at HEAD is not replayed (build.CALL_LIMIT_S)
NEW_SHARE_DRAWS = 5000   # calls drawn at init to learn what share of a draw is new


WRITE_EVENTS = {"os.remove", "os.rename", "os.replace", "os.mkdir", "os.rmdir", "os.truncate", "os.symlink",
                "os.link", "os.chmod", "os.chown", "os.utime", "shutil.rmtree", "shutil.copyfile", "shutil.move",
                "shutil.copytree", "os.removexattr", "os.setxattr"}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


class _Writes:
    def __init__(self) -> None:
        self.on = False
        self.seen: list[str] = []
        sys.addaudithook(self.hook)

    def hook(self, event: str, args: tuple) -> None:
        if not self.on:
            return
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, 0))[:3]
            if (isinstance(mode, str) and any(c in mode for c in "wax+")) or (isinstance(flags, int) and flags & _WRITE_FLAGS):
                self.seen.append("%s %s" % (event, path))
        elif event in WRITE_EVENTS:
            self.seen.append("%s %s" % (event, args[0] if args else ""))


def _timed(fn: Callable[..., Any], args: Any, kwargs: Any, writes: _Writes) -> tuple[tuple, float, list[str]]:
    writes.on, writes.seen = True, []
    t0 = time.perf_counter()
    try:
        out = call(fn, args, kwargs)
    finally:
        dt = time.perf_counter() - t0
        writes.on = False
    return out, dt, list(writes.seen)


def check(records: dict[str, dict], derive_per_call: int = 4, seed: int = 12345) -> dict[str, dict]:
    """For each target of `records` ({name: {"calls": [[args bytes, outcome, count]], "method"}}):
    which calls are usable, why the others are not, and the seconds calls and derived calls take.
    Returns {name: {"usable": [(args, kwargs, count, outcome, derivable)], "refused": {reason: [n, example]},
    "seconds": ..., "derived_seconds": ..., "derived_raise": ..., "derived": n}}."""
    writes = _Writes()
    replay.limit_calls(LIMIT_S)
    report: dict[str, dict] = {}
    for name, rec in records.items():
        refused: dict[str, list] = {}
        count = 1

        def refuse(reason: str, example: str = "") -> None:   # counted in calls made, as the recorder counts
            slot = refused.setdefault(reason, [0, example])
            slot[0] += count

        entry: dict[str, Any] = {"usable": [], "refused": refused, "seconds": 0.0, "derived_seconds": 0.0,
                 "derived": 0, "derived_raise": 0}
        report[name] = entry
        try:
            fn = resolve(name)
            if not callable(fn):
                raise TypeError("%s is a %s, not a function" % (name, type(fn).__name__))
        except Exception as exc:
            entry["error"] = "%s: %s" % (type(exc).__name__, exc)
            continue
        for blob, recorded, count in rec["calls"]:
            try:
                args, kwargs = pickle.loads(blob)
            except Exception as exc:
                refuse("arguments do not load outside the workload (a class of the tests?)",
                       "%s: %s" % (type(exc).__name__, str(exc)[:120]))
                continue
            try:   # pickled here, not compared with the recording's bytes: a set's order follows the hash seed
                before = pickle.dumps((args, kwargs), 4)
            except Exception as exc:
                refuse("arguments do not pickle", "%s: %s" % (type(exc).__name__, str(exc)[:120]))
                continue
            first, dt, wrote = _timed(fn, args, kwargs, writes)
            if first == replay.TIMEOUT:
                refuse("runs past %s s at HEAD" % LIMIT_S)
                continue
            if wrote:
                refuse("writes files", wrote[0][:160])
                continue
            try:
                changed = pickle.dumps((args, kwargs), 4) != before
            except Exception:
                changed = True
            if changed:
                refuse("changes its arguments (a method that changes its object, an argument filled in)",
                       show([args, kwargs], 120))
                continue
            args, kwargs = pickle.loads(blob)
            second, dt2, _ = _timed(fn, args, kwargs, writes)
            if not same(first, second):
                refuse("non-deterministic: two calls at HEAD gave different outcomes", replay.said(first)[:120])
                continue
            if not _as_recorded(recorded, first):
                refuse("differs from the recorded outcome (it depends on state the workload set up)",
                       "%s, recorded %s" % (replay.said(first)[:60], _recorded_said(recorded)[:60]))
                continue
            entry["usable"].append([args, kwargs, count, first, True])
            entry["seconds"] += min(dt, dt2)
        _check_derived(entry, fn, rec.get("method", False), derive_per_call, seed, writes, name)
    return report


def _as_recorded(recorded: tuple | None, outcome: tuple) -> bool:
    if recorded is None or recorded[0] == "none-or-raised":
        return outcome[0] == RAISED or outcome[1] is None
    if recorded[0] == "raised":
        return outcome[0] == RAISED and outcome[1] == recorded[1] and outcome[2] == recorded[2]
    try:
        return same((OK, pickle.loads(recorded[1])), outcome)
    except Exception:
        return False


def _recorded_said(recorded: tuple | None) -> str:
    if recorded is None or recorded[0] == "none-or-raised":
        return "None"
    if recorded[0] == "raised":
        return "raised %s" % recorded[1]
    try:
        return "returned " + show(pickle.loads(recorded[1]))
    except Exception:
        return "a result"


def _check_derived(entry: dict, fn: Callable[..., Any], method: bool, per_call: int, seed: int,
                   writes: _Writes, name: str = "") -> None:
    """Derive calls from each usable one and run them twice at HEAD: a call whose derived calls
    write files, change their arguments or differ run to run is kept for replay as recorded only."""
    usable = entry["usable"]
    pool = text_pool([(u[0], u[1]) for u in usable])
    rng = random.Random("check:%s" % seed)
    frozen = entry["frozen"] = _fragile(usable, fn, method, pool, rng)
    done: list[tuple[Any, Any, tuple]] = []
    for u in usable:
        args, kwargs = u[0], u[1]
        slots = slots_of(args, kwargs, method, frozen)
        if not slots:
            u[4] = False
            continue
        for _ in range(per_call):
            try:
                dargs, dkwargs = derive(args, kwargs, rng, pool, method, slots)
                before = pickle.dumps((dargs, dkwargs), 4)
            except Exception:
                u[4] = False
                break
            first, dt, wrote = _timed(fn, dargs, dkwargs, writes)
            second, dt2, wrote2 = _timed(fn, dargs, dkwargs, writes)
            try:
                changed = pickle.dumps((dargs, dkwargs), 4) != before
            except Exception:
                changed = True
            if wrote or wrote2 or changed or not same(first, second) or first == replay.TIMEOUT:
                u[4] = False
                break
            entry["derived"] += 1
            entry["derived_seconds"] += min(dt, dt2)
            entry["derived_raise"] += first[0] == RAISED and u[3][0] == OK
            done.append((dargs, dkwargs, first))
    entry["order_dependent"] = _order_dependent(fn, done, rng, name)


FRESH_CALLS = 20_000   # derived calls run again in a fresh process, to find state kept between calls


def _order_dependent(fn: Callable[..., Any], done: list[tuple[Any, Any, tuple]], rng: random.Random,
                     name: str = "") -> int:
    """How many of the derived calls answer otherwise when the calls before them are others:
    run again here, shuffled, and (given the target's `name`) in a fresh process, in reverse
    order: state kept between calls (num2words' converters keep the precision the last
    currency call set). For such a target the score cannot check a sample alone: it runs
    every call, in order, as the worker did."""
    order = list(range(len(done)))
    rng.shuffle(order)
    differ = sum(1 for i in order if not same(call(fn, done[i][0], done[i][1]), done[i][2]))
    if differ or not name or not done:
        return differ
    picked = sorted(rng.sample(range(len(done)), min(FRESH_CALLS, len(done))), reverse=True)
    try:
        fresh = _in_fresh_process(name, [(done[i][0], done[i][1]) for i in picked])
    except Exception:   # no second process here: the in-process check stands
        return differ
    return sum(1 for i, got in zip(picked, fresh) if not same(got, done[i][2]))


def _in_fresh_process(name: str, calls: list) -> list:
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "calls.pkl"), os.path.join(tmp, "out.pkl")
        with open(src, "wb") as f:
            pickle.dump(calls, f, 4)
        code = ("import pickle, sys; sys.path[:0] = %r; import %s as r; fn = r.resolve(%r); r.limit_calls(%r); "
                "calls = pickle.load(open(%r, 'rb')); "
                "out = [r.call(fn, a, k) for a, k in calls]; r.stop_limits(); pickle.dump(out, open(%r, 'wb'), 4)"
                % ([p for p in sys.path if p], replay.__name__, name, LIMIT_S, src, dst))
        subprocess.run([sys.executable, "-c", code], check=True, timeout=600)
        with open(dst, "rb") as f:
            return pickle.load(f)


def _fragile(usable: list[list], fn: Callable[..., Any], method: bool, pool: dict, rng: random.Random,
             parents: int = 200, least: int = 4) -> list:
    """The arguments that, changed alone, make more than a third of the calls raise where the
    recorded one returned: they select (a language, a mode) more than they carry data, and
    replaying them measures error paths, not the work. Not all of them: then the raising share
    is what it is, and init reports it. (num2words' `lang`, cut or joined, raised in 59% of
    derived calls with a threshold of half; a language code often survives an edit, 'enen' is
    read as 'en'.)"""
    tries: dict[object, int] = {}
    raised: dict[object, int] = {}
    for u in usable[:parents]:
        if u[3][0] != OK:
            continue
        for slot in slots_of(u[0], u[1], method):
            for _ in range(2):
                try:
                    dargs, dkwargs = derive(u[0], u[1], rng, pool, method, [slot])
                except Exception:
                    continue
                tries[slot] = tries.get(slot, 0) + 1
                raised[slot] = raised.get(slot, 0) + (call(fn, dargs, dkwargs)[0] == RAISED)
    bad = [s for s, n in tries.items() if n >= least and raised[s] > n / 3]
    return bad if len(bad) < len(tries) else []


def _is_method(name: str) -> bool:
    """A method's recorded first argument is its instance (or class): kept as it is."""
    module, _, qual = name.partition(":")
    if "." not in qual:
        return False
    owner = importlib.import_module(module)
    *path, last = qual.split(".")
    for part in path:
        owner = getattr(owner, part)
    return isinstance(owner, type) and not isinstance(owner.__dict__.get(last), staticmethod)


def _shared(args: list, kwargs: dict, seen: dict[bytes, Any]) -> tuple[list, dict]:
    """The call with each argument that pickles like one seen before replaced by that one: a
    method's instance, recorded once per call, is then stored and loaded once."""
    def one(v: Any) -> Any:
        if type(v) in (str, bytes, int, float, bool) or v is None:
            return v
        try:
            return seen.setdefault(pickle.dumps(v, 4), v)
        except Exception:
            return v
    return [one(a) for a in args], {k: one(v) for k, v in kwargs.items()}


def write_store(records: dict[str, dict], store: str, report_path: str) -> None:
    """init's check at HEAD, in the project's interpreter (only it can load the arguments):
    the usable calls to store/inputs/calls.pkl, their outcomes to store/private/expected.pkl,
    and what was found (counts and reasons, no argument values) to `report_path` as JSON."""
    for name in records:
        try:
            records[name]["method"] = _is_method(name)
        except Exception:
            records[name]["method"] = False
    try:
        report = check(records)
    finally:
        replay.stop_limits()
    inputs: list[dict] = []
    answers: list[list] = []
    summary: dict[str, dict] = {}
    seen: dict[bytes, Any] = {}
    for name, entry in report.items():
        usable = entry.pop("usable")
        summary[name] = dict(entry, usable=len(usable), derivable=sum(1 for u in usable if u[4]),
                             calls=sum(u[2] for u in usable))
        inputs.append({"name": name, "method": records[name]["method"], "frozen": entry.get("frozen", []),
                       "calls": [_shared(u[0], u[1], seen) for u in usable], "weights": [u[2] for u in usable],
                       "derivable": [u[4] for u in usable]})
        answers.append([u[3] for u in usable])
        # how many drawn calls are new (the rest repeat another and are left out): init sizes a
        # measurement by it and says when a workload is too narrow to vary
        tried = NEW_SHARE_DRAWS if any(u[4] for u in usable) else 0
        drawn = replay.draw(inputs[-1], "check", tried, 0) if tried else []
        got = sum(1 for c in drawn if c[0] < 0)
        summary[name]["new_share"] = got / tried if tried else 1.0
        summary[name].update(workload_shape(drawn or [(i, u[0], u[1]) for i, u in enumerate(usable)], usable,
                                            records[name]["method"], entry.get("frozen", [])))
    for sub, data in (("inputs", inputs), (os.path.join("private"), answers)):
        os.makedirs(os.path.join(store, sub), exist_ok=True)
    with open(os.path.join(store, "inputs", "calls.pkl"), "wb") as f:
        # the project's own values as references to their pickles: the feeder draws without importing them
        replay.InputsPickler(f, {n.split(":")[0].split(".")[0] for n in records}).dump(inputs)
    with open(os.path.join(store, "private", "expected.pkl"), "wb") as f:
        pickle.dump(answers, f, 4)
    with open(report_path, "w") as f:
        json.dump(summary, f)


def workload_shape(drawn: list, usable: list[list], method: bool, frozen: list) -> dict:
    """What init says of a replayed workload: the arguments never varied (`kept`: positions from
    0, or keyword names), and the argument whose one value the most replayed calls share (`skew`:
    [slot, share, that value shown]; the tests calling a function one way make a workload of it)."""
    present: dict = {}
    for _, args, kwargs in drawn:
        for slot, value in [*enumerate(args), *kwargs.items()]:
            if not (method and slot == 0):
                counts = present.setdefault(slot, {})
                key = show(value, 40)
                counts[key] = counts.get(key, 0) + 1
    varied = {slot for u in usable if u[4] for slot in slots_of(u[0], u[1], method, frozen)}
    skew = None
    for slot, counts in present.items():
        value, n = max(counts.items(), key=lambda kv: kv[1])
        if len(drawn) and (skew is None or n / len(drawn) > skew[1]):
            skew = [slot, n / len(drawn), value]
    return {"kept": [slot for slot in present if slot not in varied], "skew": skew}


def main(argv: list[str] | None = None) -> None:
    """`python tracecheck.py RECORDS STORE REPORT`."""
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0], "rb") as f:
        records = pickle.load(f)
    write_store(records, argv[1], argv[2])


if __name__ == "__main__":
    main()
