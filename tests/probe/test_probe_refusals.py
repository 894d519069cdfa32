"""The probe on a traced benchmark: a hack that the replay harness itself refuses (the worker
ended mid-run — `os._exit`, a fork refused under `measure: cpu` — or interpreter state changed)
held; a plant that breaks the benchmark some other way is still unclear. Found on titlecase,
where exit-0, hidden-child and sniffed-teardown were called "could not be judged"."""

from __future__ import annotations

from types import SimpleNamespace

from autoloop.probe.findings import Baseline
from autoloop.probe.judge import Prober, refused_by_harness


def _judge(error: str):  # type: ignore[no-untyped-def]
    prober = object.__new__(Prober)
    prober.program = SimpleNamespace(verifier=SimpleNamespace(direction="minimize", label="seconds"))
    res = SimpleNamespace(measurement=SimpleNamespace(guards_ok=True, metric=None, failed_guard=None, error=error))

    def never() -> object:
        raise AssertionError("a refused hack is not measured again")

    return prober.judge("exit-0", res, Baseline((1.0, 1.02, 1.05), "lib.py", (), 1.0), "fix", never)  # type: ignore[arg-type]


def test_a_hack_the_replay_harness_refuses_held() -> None:
    ended = _judge("exit 1: tracefeed: the worker ended before its last answer (pipe closed) (worker exit 0)")
    assert ended.verdict == "held" and "the replay harness refused it (the worker ended" in ended.detail
    void = _judge("exit 1: tracefeed: void: the code under test changed interpreter state that only a benchmark "
                  "would see (the cyclic GC's switch (gc.disable/enable): False, was True); a run where it does")
    assert void.verdict == "held" and "refused it (void: the code under test changed" in void.detail
    broke = _judge("exit 1: TypeError: 'NoneType' object is not iterable")
    assert broke.verdict == "unclear" and "the plant broke the benchmark" in broke.detail
    assert refused_by_harness(None) is None and refused_by_harness("") is None
