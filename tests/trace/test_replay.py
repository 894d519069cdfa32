"""The replay library bench/ gets (autoloop/trace/replay.py): seeded type-preserving mutation,
a measurement's calls drawn the same in every process, outcomes compared, the command's results
loaded without running what a pickle names, and init's check at HEAD refusing what cannot be
replayed, by reason."""

from __future__ import annotations

import io
import os
import pickle
import random
import subprocess
import sys
from collections import OrderedDict, namedtuple
from pathlib import Path

import pytest

from autoloop.trace import check, replay

Point = namedtuple("Point", "x y")


@pytest.mark.parametrize("value", ["Hello World", "", "x", b"some bytes", 7, 0, -3, 10**40, 2.5, 0.0,
                                   [1, 2, 3], [3, 1, 2], ("a", 1), Point(1, 2), {"k": "v", "n": 3},
                                   OrderedDict(a="x"), {"a", "b", "c"}, frozenset({1, 2})])
def test_mutate_keeps_the_type_and_changes_the_value(value: object) -> None:
    rng = random.Random(1)
    pool = {str: ["other words"], bytes: [b"more"]}
    changed = 0
    for _ in range(20):
        out = replay.mutate(value, rng, pool)
        assert type(out) is type(value)
        changed += out != value
    assert changed >= 16   # a set can gain an item it had (1 moved to 2); the rest always change


def test_mutate_keeps_a_sorted_list_sorted_and_never_changes_its_input() -> None:
    rng = random.Random(2)
    value = [1, 4, 9, 16, 25]
    for _ in range(50):
        out = replay.mutate(value, rng, {})
        assert out == sorted(out)
    assert value == [1, 4, 9, 16, 25]


def test_flags_none_and_objects_cannot_be_varied() -> None:
    assert not replay.mutable(True) and not replay.mutable(None) and not replay.mutable(object())
    assert not replay.mutable([]) and not replay.mutable([None, False])
    args, kwargs = ["self-like", True], {"flag": None}
    assert replay.derive(args, kwargs, random.Random(0), {}, skip_first=True) == (args, kwargs)


def test_a_method_keeps_its_instance_and_a_frozen_argument_stays() -> None:
    rng = random.Random(3)
    for _ in range(30):
        args, kwargs = replay.derive(["inst", "text"], {"lang": "en"}, rng, {}, True,
                                     replay.slots_of(["inst", "text"], {"lang": "en"}, True, {"lang"}))
        assert args[0] == "inst" and kwargs == {"lang": "en"} and args[1] != "text"


TARGET = {"name": "m:f", "method": False, "frozen": [],
          "calls": [(["alpha beta", 3], {}), (["gamma", 10], {"sep": "-"}), ([[1, 2, 3]], {})],
          "weights": [5, 1, 1], "derivable": [True, True, True]}


def test_a_measurement_is_the_same_for_a_seed_in_another_process_and_new_for_another_seed(tmp_path: Path) -> None:
    """produce and score are separate processes with their own hash seeds: the draw may not
    depend on anything but $AUTOLOOP_SEED."""
    here = replay.draw(dict(TARGET), 42, 200, 2)
    (tmp_path / "t.pkl").write_bytes(pickle.dumps(TARGET))
    code = ("import pickle, sys; sys.path.insert(0, %r); import replay; "
            "t = pickle.load(open(%r, 'rb')); sys.stdout.buffer.write(pickle.dumps(replay.draw(t, 42, 200, 2)))"
            % (str(Path(replay.__file__).parent), str(tmp_path / "t.pkl")))
    there = pickle.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, check=True,
                                        env={**os.environ, "PYTHONHASHSEED": "123"}).stdout)
    assert there == here
    other = replay.draw(dict(TARGET), 43, 200, 2)
    assert other != here
    recorded = [c for c in here if c[0] >= 0]
    derived = [(a, k) for i, a, k in here if i < 0]
    # a call that only repeats another after RETRIES derivations is left out: few of 200 here
    assert len(recorded) == 2 and 190 <= len(derived) <= 200
    originals = [(list(a), k) for a, k in TARGET["calls"]]
    # hard-coding the recorded calls' answers serves none of the derived calls
    assert not any((list(a), k) in originals for a, k in derived)
    # and no call repeats within a measurement: a memo inside the target has nothing to save
    assert len({pickle.dumps(c) for c in derived}) == len(derived)


def test_a_narrow_workload_still_draws_no_repeat_and_says_so_by_drawing_fewer() -> None:
    """A method called with a handful of small numbers per class: the draw keys a call by the
    instance's class and the other arguments, as a memo would, and never repeats one."""
    class Lang:
        pass

    class Other(Lang):
        pass

    a, b = Lang(), Other()
    target = {"name": "m:Lang.f", "method": True, "frozen": [],
              "calls": [([x, n], {}) for x in (a, b) for n in range(0, 40)],
              "weights": [1] * 80, "derivable": [True] * 80}
    got = replay.draw(target, 7, 3000, 4)
    keys = [replay.call_key(args, kwargs, True) for _, args, kwargs in got]
    assert len(set(keys)) == len(keys)
    assert {k[0][0].rsplit(".", 1)[-1] for k in keys} == {"Lang", "Other"}
    # the same number for two classes is two calls; the recorded 0..39 are never derived again
    derived = [k for (i, _, _), k in zip(got, keys) if i < 0]
    assert all(k[0][1] >= 40 or k[0][1] < 0 for k in derived)
    # numbers move within half their size: from 0..39 only so many new ones are near
    assert 40 < len(derived) < 300


def test_same_compares_outcomes_by_type_value_and_exception() -> None:
    assert replay.same((replay.OK, [1, 2]), (replay.OK, [1, 2]))
    assert not replay.same((replay.OK, (1, 2)), (replay.OK, [1, 2]))
    assert not replay.same((replay.OK, 1), (replay.OK, 1.0))
    assert replay.same((replay.OK, float("nan")), (replay.OK, float("nan")))
    assert replay.same((replay.RAISED, "builtins.ValueError", "bad"), (replay.RAISED, "builtins.ValueError", "bad"))
    assert not replay.same((replay.RAISED, "builtins.ValueError", "bad"), (replay.OK, None))


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_the_commands_results_cannot_run_code_in_the_score() -> None:
    blob = pickle.dumps([[(replay.OK, _Evil())]])
    with pytest.raises(pickle.UnpicklingError, match="posix.system|os.system"):
        replay._Results(io.BytesIO(blob), {"mypkg"}).load()
    fine = pickle.dumps([[(replay.OK, {"a": {1, 2}, "b": OrderedDict(x=1)})]])
    assert replay._Results(io.BytesIO(fine), {"mypkg"}).load()[0][0][1]["a"] == {1, 2}


def _rebuild(value: int) -> "_Zone":
    return _Zone(value)


class _Zone:
    """Pickles through a module-level function, as dateutil's time zones do."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __reduce__(self) -> tuple:
        return (_rebuild, (self.value,))


def test_a_result_rebuilt_by_a_function_loads_only_when_the_start_commits_own_outcomes_use_it() -> None:
    """dateutil's tz-aware results pickle through dateutil.tz._tzfile._unpickle, a function: the
    score loads the names the expected outcomes (the start commit's code) pickle to, no other."""
    expected, names = replay._names_in(pickle.dumps([(replay.OK, _Zone(3))], 4))
    assert expected[0][1].value == 3 and (__name__, "_rebuild") in names
    blob = pickle.dumps([[(replay.OK, _Zone(4))]])
    with pytest.raises(pickle.UnpicklingError, match="_rebuild, which the score does not load"):
        replay._Results(io.BytesIO(blob), {"mypkg"}).load()
    assert replay._Results(io.BytesIO(blob), {"mypkg"}, names).load()[0][0][1].value == 4
    # known names open nothing else
    with pytest.raises(pickle.UnpicklingError, match="system"):
        replay._Results(io.BytesIO(pickle.dumps([[(replay.OK, _Evil())]])), {"mypkg"}, names).load()


def test_plain_results_travel_by_marshal_which_builds_no_object_but_the_built_ins() -> None:
    import marshal

    results = [[["a", ("b", 1), None], {2: ("builtins.ValueError", "bad")}]]
    assert marshal.loads(marshal.dumps(results)) == results
    with pytest.raises(ValueError):   # anything else: the restricted pickle
        marshal.dumps([[_Zone(1)], {}])


MODULE = '''
import random

def good(text, n=2):
    return text[:n] * 2

def sorts(xs):
    xs.sort()
    return len(xs)

def noisy(x):
    return x + random.random()

def writes(path):
    with open(path, "w") as f:
        f.write("x")
    return 1

def lang(text, code="en"):
    if code not in ("en", "fr"):
        raise NotImplementedError(code)
    return text.upper() if code == "en" else text.lower()
'''


def _records(calls: list[tuple[list, dict]], outcome: object = None) -> dict:
    return {"calls": [[pickle.dumps((a, k), 4), ("none-or-raised",) if outcome is None else outcome, 1]
                      for a, k in calls]}


def test_check_keeps_what_replays_and_names_the_reason_for_the_rest(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tmod.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    ret = lambda v: ("returned", pickle.dumps(v, 4))
    records = {
        "tmod:good": {"calls": [[pickle.dumps((["abcdef"], {}), 4), ret("abab"), 3],
                                [pickle.dumps((["xyz", 1], {}), 4), ret("zz"), 1]]},   # not what it returns now
        "tmod:sorts": _records([([[3, 1, 2]], {})]),
        "tmod:noisy": _records([([1.0], {})]),
        "tmod:writes": _records([([str(tmp_path / "out.txt")], {})]),
        "tmod:lang": {"calls": [[pickle.dumps(([f"word{i}", "en"], {}), 4), ret(f"WORD{i}"), 1] for i in range(8)]},
    }
    for rec in records.values():
        rec["method"] = False
    report = check.check(records)
    good = report["tmod:good"]
    assert len(good["usable"]) == 1 and good["usable"][0][2] == 3
    assert list(good["refused"]) == ["differs from the recorded outcome (it depends on state the workload set up)"]
    assert "changes its arguments" in next(iter(report["tmod:sorts"]["refused"]))
    assert next(iter(report["tmod:noisy"]["refused"])).startswith("non-deterministic")
    assert list(report["tmod:writes"]["refused"]) == ["writes files"]
    lang = report["tmod:lang"]
    assert len(lang["usable"]) == 8 and lang["frozen"] == [1]   # a changed language code only raises
    assert lang["derived"] > 0 and lang["derived_raise"] == 0


def test_a_call_that_does_not_end_counts_as_timed_out_and_the_next_one_runs() -> None:
    """Derived inputs reach what the tests never did (num2words(4500072900000111, lang='am')
    does not return): produce and score both give such a call the same outcome, past its limit."""
    def spin(n):
        while n:
            try:
                pass
            except Exception:   # the target's own handlers do not swallow the limit
                pass
        return n

    replay.limit_calls(0.3)
    try:
        assert replay.call(spin, [1], {}) == replay.TIMEOUT
        assert replay.call(spin, [0], {}) == (replay.OK, 0)
    finally:
        replay.stop_limits()


def test_a_target_imported_from_the_checkouts_venv_is_an_installed_copy_not_the_project(tmp_path: Path) -> None:
    """pip installing a test dependency (freezegun) put a regular python-dateutil into the
    checkout's .venv over the editable one: its calls were recorded, and `allowed` became the
    venv's copy. A module under a venv or site-packages is refused, naming the fix."""
    from autoloop.trace import build

    tree = tmp_path / "tree"
    own = build.TargetReport("pkg.core:f", seen=3, file=str(tree / "pkg" / "core.py"))
    venv = build.TargetReport("dateutil.parser:parse", seen=3,
                              file=str(tree / ".venv/lib/python3.11/site-packages/dateutil/parser/_parser.py"))
    roots = build._place({"own": own, "venv": venv}, (tree,))
    assert roots == [""] and own.file == "pkg/core.py" and not own.error
    assert "not from the repository's own files (an installed copy)" in venv.error
    assert "pip install -e ." in venv.error
