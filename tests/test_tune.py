"""The tune generator: marker grammar, proposals, learning from the ledger, convergence."""

from __future__ import annotations

import math
import random
import re
from pathlib import Path
from typing import Any, Callable

import pytest

from autoloop.errors import ConfigError, FatalGeneratorError
from autoloop.generators.base import GenContext, Proposal
from autoloop.generators.registry import make_generator
from autoloop.generators.tune import STEP_MIN, TuneGenerator, parse_markers
from autoloop.program import GeneratorSpec, Program, VerifierSpec


# --------------------------------------------------------------------------- helpers


def make_program(root: Path, allowed: tuple[str, ...] = ("train.py",), *,
                 forbidden: tuple[str, ...] = (), seed: int | None = None) -> Program:
    return Program(path=root / "program.md", repo_root=root, goal="Lower the loss",
                   allowed=allowed, forbidden=forbidden,
                   verifier=VerifierSpec(command="true", direction="minimize", metric="loss"),
                   generator=GeneratorSpec(kind="tune", seed=seed))


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode())
    return path


def ctx_for(program: Program, history: list[dict[str, Any]], workdir: Path | None = None,
            cycle: int | None = None) -> GenContext:
    workdir = workdir or program.repo_root
    return GenContext(program=program, cycle=cycle or len(history), workdir=workdir, prompt="",
                      prompt_file=workdir / "prompt.md", hypothesis_file=workdir / "hyp.txt",
                      log_dir=workdir, best=None, baseline=None, history=list(history),
                      is_allowed=lambda rel: True, env={}, timeout=60.0, run_marker="test")


def baseline_record(metric: float = 1.0) -> dict[str, Any]:
    return {"cycle": 0, "status": "baseline", "metric": metric, "best": metric, "gen_meta": {},
            "hypothesis": "baseline", "lesson": "", "commit": "c0", "parent": "c0", "changed": []}


def values(path: Path) -> dict[str, float]:
    out = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^(\w+)\s*=\s*(\S+)\s+# tune:", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


class Simulation:
    """Drives propose() the way the loop does, with an objective instead of a verifier."""

    def __init__(self, root: Path, text: str, objective: Callable[[dict[str, float]], float | None],
                 *, seed: int | None = None) -> None:
        self.file = write(root, "train.py", text)
        self.program = make_program(root, seed=seed)
        self.gen = TuneGenerator(self.program.generator, self.program)
        self.objective = objective
        self.best = objective(values(self.file))
        assert self.best is not None
        self.history: list[dict[str, Any]] = [baseline_record(self.best)]
        self.proposals: list[Proposal] = []

    def step(self) -> Proposal:
        before = self.file.read_bytes()
        cycle = len(self.history)
        proposal = self.gen.propose(ctx_for(self.program, self.history, cycle=cycle))
        self.proposals.append(proposal)
        rec: dict[str, Any] = {"cycle": cycle, "hypothesis": proposal.hypothesis,
                               "gen_meta": proposal.meta, "parent": f"c{cycle}", "commit": None}
        if proposal.no_change_reason:
            assert self.file.read_bytes() == before
            rec.update(status="no_change", metric=None, best=self.best)
        else:
            metric = self.objective(values(self.file))
            if metric is None:
                rec.update(status="crash", metric=None)
            elif metric < self.best:
                self.best = metric
                rec.update(status="keep", metric=metric, commit=f"k{cycle}")
            else:
                rec.update(status="discard", metric=metric)
            if rec["status"] != "keep":
                self.file.write_bytes(before)
            rec["best"] = self.best
        self.history.append(rec)
        return proposal

    def run(self, cycles: int) -> None:
        for _ in range(cycles):
            if self.step().no_change_reason:
                return


# --------------------------------------------------------------------------- marker grammar


@pytest.mark.parametrize("line, name, value, lo, hi, is_int, log", [
    ("LR = 0.01  # tune: 1e-4..1e-1 log", "LR", 0.01, 1e-4, 0.1, False, True),
    ("DEPTH = 4  # tune: 1..12 int", "DEPTH", 4, 1, 12, True, False),
    ("WIDTH: int = 64  # tune: 8..512 int log", "WIDTH", 64, 8, 512, True, True),
    ("    lr=3e-4,  # tune: 1e-5..1e-2 log", "lr", 3e-4, 1e-5, 1e-2, False, True),
    ('  "dropout": 0.1,  # tune: 0..0.5', "dropout", 0.1, 0, 0.5, False, False),
    ("dropout: 0.1  # tune: 0..0.5 float", "dropout", 0.1, 0, 0.5, False, False),
    ("cfg.momentum = .9  # tune: 0..0.99 linear", "cfg.momentum", 0.9, 0, 0.99, False, False),
    ("N = 1_000  # tune: 10..10_000 int log  # a note for humans", "N", 1000, 10, 10000, True, True),
    ("OFFSET = -2.5  # tune: -10..10", "OFFSET", -2.5, -10, 10, False, False),
])
def test_marker_forms(line: str, name: str, value: float, lo: float, hi: float,
                      is_int: bool, log: bool) -> None:
    markers, errors = parse_markers(f"x = 1\n{line}\n", "pkg/train.py")
    assert errors == []
    (m,) = markers
    assert (m.name, m.value, m.lo, m.hi, m.is_int, m.log) == (name, value, lo, hi, is_int, log)
    assert m.file == "pkg/train.py" and m.line == 2
    assert line[m.start:m.end].replace("_", "") in (repr(value), str(value), line[m.start:m.end].replace("_", ""))
    assert float(line[m.start:m.end]) == value


def test_comment_lines_and_plain_lines_are_not_markers() -> None:
    text = ("# Mark constants like:  LR = 0.01  # tune: 1e-4..1 log\n"
            "    # tune: this comment explains the markers\n"
            "// tune: nor is this\n"
            '"""Prose that mentions # tune: markers is not one either."""\n'
            "LR = 0.01\n")
    assert parse_markers(text, "a.py") == ([], [])


@pytest.mark.parametrize("line, message", [
    ("LR = 0.01  # tune: 1..1e-4 log", "train.py:3: LR: the range 1.0..0.0001 is empty (LO must be below HI)"),
    ("LR = 0.01  # tune: 0.01..0.01", "train.py:3: LR: the range 0.01..0.01 is empty"),
    ("LR = 0.01  # tune: 1e-4..1 lgo", "train.py:3: LR: unknown scale 'lgo' (did you mean 'log'?)"),
    ("LR = 0.01  # tune: 1e-4..1 cubic", "train.py:3: LR: unknown scale 'cubic'; expected int, float, log or linear"),
    ("LR = 5  # tune: 0..1", "train.py:3: LR: the value 5.0 is outside its range 0.0..1.0"),
    ("DEPTH = 20  # tune: 1..12 int", "train.py:3: DEPTH: the value 20 is outside its range 1..12"),
    ("LR = 0.5  # tune: 0..1 log", "train.py:3: LR: a log scale needs LO > 0, got 0.0"),
    ("LR = 0.5  # tune: -1..1 log", "train.py:3: LR: a log scale needs LO > 0, got -1.0"),
    ("LR = base * 2  # tune: 0..1", "train.py:3: a tune marker must follow `NAME = NUMBER`"),
    ("LR = 'fast'  # tune: 0..1", "train.py:3: LR: the value \"'fast'\" is not a number literal"),
    ("LR = 0.5  # tune: low..high", "train.py:3: LR: expected `tune: LO..HI [int|float] [log]`"),
    ("LR = 0.5  # tune: 0-1", "train.py:3: LR: expected `tune: LO..HI"),
    ("DEPTH = 4.5  # tune: 1..12 int", "train.py:3: DEPTH: an int parameter needs an integer value, got 4.5"),
    ("DEPTH = 4  # tune: 1..12.5 int", "train.py:3: DEPTH: an int parameter needs an integer HI, got 12.5"),
    ("DEPTH = 4  # tune: 1..12 int float", "train.py:3: DEPTH: a parameter is either int or float"),
    ("LR = 0.5  # tune: 0.1..1 log linear", "train.py:3: LR: a parameter is either log or linear"),
    ("LR = 0.5  # tune: 0.1..1\nLR = 0.6  # tune: 0.1..1", "train.py:4: LR is already marked for tune on line 3"),
])
def test_bad_markers_are_reported_with_file_and_line(line: str, message: str) -> None:
    _, errors = parse_markers(f"import os\n\n{line}\n", "train.py")
    assert len(errors) == 1
    assert errors[0].startswith(message), errors[0]


def test_bad_marker_fails_construction_with_repo_relative_file_line(tmp_path: Path) -> None:
    write(tmp_path, "src/model/net.py", "A = 1  # tune: 0..2\n\nB = 3  # tune: 5..1\n")
    program = make_program(tmp_path, ("src/**",))
    with pytest.raises(ConfigError) as err:
        TuneGenerator(program.generator, program)
    assert str(err.value) == "src/model/net.py:3: B: the range 5.0..1.0 is empty (LO must be below HI)"


def test_every_bad_marker_is_listed(tmp_path: Path) -> None:
    write(tmp_path, "a.py", "A = 9  # tune: 0..2\n")
    write(tmp_path, "b.py", "B = 1  # tune: 0..2 sqrt\n")
    program = make_program(tmp_path, ("*.py",))
    with pytest.raises(ConfigError) as err:
        TuneGenerator(program.generator, program)
    lines = str(err.value).splitlines()
    assert [line.split(":")[0:2] for line in lines] == [["a.py", "1"], ["b.py", "1"]]


def test_no_markers_is_a_config_error(tmp_path: Path) -> None:
    write(tmp_path, "train.py", "LR = 0.01\n")
    program = make_program(tmp_path)
    with pytest.raises(ConfigError, match=r"program\.md: generator\.kind: tune found no markers "
                                          r"in the allowed files \(train\.py\)"):
        TuneGenerator(program.generator, program)


def test_only_allowed_and_not_forbidden_files_are_scanned(tmp_path: Path) -> None:
    write(tmp_path, "pkg/a.py", "A = 1  # tune: 0..2\n")
    write(tmp_path, "pkg/deep/b.py", "B = 1  # tune: 0..2\n")
    write(tmp_path, "pkg/vendor/c.py", "C = 1  # tune: 9..2\n")     # bad, but forbidden
    write(tmp_path, "other/d.py", "D = 1  # tune: 9..2\n")          # bad, but not allowed
    write(tmp_path, "program.md", "E = 1  # tune: 0..2\n")          # never editable
    program = make_program(tmp_path, ("pkg/**", "program.md"), forbidden=("pkg/vendor/**",))
    gen = TuneGenerator(program.generator, program)
    assert [m.key for m in gen.markers] == ["pkg/a.py:A", "pkg/deep/b.py:B"]


def test_symlinked_files_are_not_tuned(tmp_path: Path) -> None:
    write(tmp_path, "real/x.py", "X = 1  # tune: 0..2\n")
    write(tmp_path, "train.py", "LR = 0.1  # tune: 0.01..1 log\n")
    (tmp_path / "link.py").symlink_to(tmp_path / "real/x.py")
    program = make_program(tmp_path, ("*.py",))
    gen = TuneGenerator(program.generator, program)
    assert [m.key for m in gen.markers] == ["train.py:LR"]


def test_registry_builds_tune(tmp_path: Path) -> None:
    write(tmp_path, "train.py", "LR = 0.01  # tune: 1e-4..1e-1 log\n")
    program = make_program(tmp_path)
    assert isinstance(make_generator(program.generator, program), TuneGenerator)


# --------------------------------------------------------------------------- one proposal


def test_first_proposal_rewrites_only_the_value(tmp_path: Path) -> None:
    text = ("import math\r\n"
            "LR = 0.01   #   tune: 1e-3..1 log   \r\n"
            "DEPTH = 4  # tune: 1..12 int\r\n"
            "print(LR)\r\n")
    path = write(tmp_path, "train.py", text)
    program = make_program(tmp_path)
    proposal = TuneGenerator(program.generator, program).propose(ctx_for(program, [baseline_record()]))
    assert proposal.no_change_reason is None
    assert proposal.hypothesis == ("Raise LR from 0.01 to 0.02: untried so far, and it starts in the "
                                   "low part of its range 0.001..1")
    assert proposal.meta["param"] == "LR" and proposal.meta["file"] == "train.py"
    assert proposal.meta["line"] == 2
    assert (proposal.meta["from"], proposal.meta["to"], proposal.meta["step"]) == (0.01, 0.02, 0.125)
    assert proposal.meta["incumbent"] == {"train.py:LR": 0.01, "train.py:DEPTH": 4}
    assert path.read_bytes() == text.replace("LR = 0.01 ", "LR = 0.02 ").encode()


def test_propose_reads_the_work_tree_not_the_repository(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    work = tmp_path / "work"
    write(repo, "train.py", "LR = 0.01  # tune: 1e-4..1e-1 log\n")
    write(work, "train.py", "LR = 0.001  # tune: 1e-4..1e-1 log\n")
    program = make_program(repo)
    gen = TuneGenerator(program.generator, program)
    proposal = gen.propose(ctx_for(program, [baseline_record()], workdir=work))
    assert proposal.meta["from"] == 0.001
    assert (repo / "train.py").read_text() == "LR = 0.01  # tune: 1e-4..1e-1 log\n"
    assert (work / "train.py").read_text() != "LR = 0.001  # tune: 1e-4..1e-1 log\n"


def test_bad_marker_in_work_tree_is_fatal(tmp_path: Path) -> None:
    write(tmp_path, "train.py", "LR = 0.01  # tune: 1e-4..1e-1 log\n")
    program = make_program(tmp_path)
    gen = TuneGenerator(program.generator, program)
    write(tmp_path, "train.py", "LR = 7  # tune: 1e-4..1e-1 log\n")
    with pytest.raises(FatalGeneratorError, match=r"train\.py:1: LR: the value 7\.0 is outside"):
        gen.propose(ctx_for(program, [baseline_record()]))


@pytest.mark.parametrize("line, expected", [
    ("X = 1e-4  # tune: 1e-6..1e-2 log", "X = 0.0003  # tune: 1e-6..1e-2 log"),
    ("X = 3e-05  # tune: 1e-6..1e-2 log", "X = 9e-05  # tune: 1e-6..1e-2 log"),
    ("X = 4  # tune: 1..12 int", "X = 5  # tune: 1..12 int"),
    ("X = 4.0  # tune: 1..12 int", "X = 5  # tune: 1..12 int"),
    ("X = 0  # tune: 0..1", "X = 0.1  # tune: 0..1"),
    ("X = 100  # tune: 0..1000", "X = 200.0  # tune: 0..1000"),
    ("X = 64  # tune: 8..512 int log", "X = 108  # tune: 8..512 int log"),
])
def test_values_are_written_compactly(tmp_path: Path, line: str, expected: str) -> None:
    path = write(tmp_path, "train.py", line + "\n")
    program = make_program(tmp_path)
    TuneGenerator(program.generator, program).propose(ctx_for(program, [baseline_record()]))
    assert path.read_text() == expected + "\n"


def test_yaml_floats_stay_floats_for_yaml_1_1(tmp_path: Path) -> None:
    path = write(tmp_path, "conf.yaml", "lr: 3e-05  # tune: 1e-6..1e-2 log\n")
    program = make_program(tmp_path, ("conf.yaml",))
    TuneGenerator(program.generator, program).propose(ctx_for(program, [baseline_record()]))
    assert path.read_text() == "lr: 9.0e-05  # tune: 1e-6..1e-2 log\n"


def test_a_step_that_rounds_to_the_same_int_moves_one_unit(tmp_path: Path) -> None:
    path = write(tmp_path, "train.py", "N = 3  # tune: 1..5 int\n")    # 1/8 of 4 = 0.5 -> one unit
    program = make_program(tmp_path)
    proposal = TuneGenerator(program.generator, program).propose(ctx_for(program, [baseline_record()]))
    assert path.read_text() == "N = 4  # tune: 1..5 int\n"
    assert proposal.meta["to"] == 4 and isinstance(proposal.meta["to"], int)


def test_first_direction_heads_for_the_middle_of_the_range(tmp_path: Path) -> None:
    write(tmp_path, "train.py", "X = 0.9  # tune: 0..1\n")
    program = make_program(tmp_path)
    proposal = TuneGenerator(program.generator, program).propose(ctx_for(program, [baseline_record()]))
    assert proposal.hypothesis.startswith("Lower X from 0.9 to 0.8: untried so far, and it starts in "
                                          "the high part of its range 0..1")


def test_value_at_a_bound_moves_away_from_it(tmp_path: Path) -> None:
    write(tmp_path, "train.py", "X = 1  # tune: 0..1\n")
    program = make_program(tmp_path)
    history = [baseline_record(), _rec(1, "keep", "X", 0.5, 1.0, 0.5, {"train.py:X": 0.5})]
    proposal = TuneGenerator(program.generator, program).propose(ctx_for(program, history))
    assert proposal.meta["to"] < 1
    assert proposal.hypothesis.endswith("it is at its upper bound")


def test_steps_clamp_to_the_bound(tmp_path: Path) -> None:
    write(tmp_path, "train.py", "X = 0.95  # tune: 0..1\n")
    program = make_program(tmp_path)
    history = [baseline_record(), _rec(1, "keep", "X", 0.9, 0.95, 0.125, {"train.py:X": 0.9})]
    proposal = TuneGenerator(program.generator, program).propose(ctx_for(program, history))
    assert proposal.meta["to"] == 1.0


# --------------------------------------------------------------------------- learning from the ledger


def _rec(cycle: int, status: str, param: str, old: float, new: float, step: float,
         incumbent: dict[str, float], metric: float | None = 2.0, best: float = 1.0,
         file: str = "train.py") -> dict[str, Any]:
    return {"cycle": cycle, "status": status, "metric": metric, "best": best, "hypothesis": "h",
            "lesson": "", "commit": None, "parent": "c", "changed": [file],
            "gen_meta": {"param": param, "file": file, "line": 1, "from": old, "to": new,
                         "step": step, "incumbent": incumbent}}


def test_after_a_keep_the_step_doubles_in_the_same_direction(tmp_path: Path) -> None:
    write(tmp_path, "train.py", "LR = 0.02  # tune: 1e-4..1e-1 log\nDEPTH = 4  # tune: 1..12 int\n")
    program = make_program(tmp_path)
    history = [baseline_record(),
               _rec(1, "keep", "LR", 0.01, 0.02, 0.125, {"train.py:LR": 0.01, "train.py:DEPTH": 4},
                    metric=0.5, best=0.5)]
    proposal = TuneGenerator(program.generator, program).propose(ctx_for(program, history))
    assert proposal.meta["param"] == "LR" and proposal.meta["step"] == 0.25
    assert proposal.hypothesis == "Raise LR from 0.02 to 0.1: the last increase helped"


def test_two_keeps_say_so(tmp_path: Path) -> None:
    write(tmp_path, "train.py", "LR = 0.004  # tune: 1e-6..1 log\n")
    program = make_program(tmp_path)
    history = [baseline_record(),
               _rec(1, "keep", "LR", 0.001, 0.002, 0.05, {"train.py:LR": 0.001}),
               _rec(2, "keep", "LR", 0.002, 0.004, 0.1, {"train.py:LR": 0.002})]
    proposal = TuneGenerator(program.generator, program).propose(ctx_for(program, history))
    assert proposal.hypothesis.startswith("Raise LR from 0.004 to ")
    assert proposal.hypothesis.endswith(": the last two increases helped")
    assert proposal.meta["step"] == 0.2


def test_after_a_discard_the_step_halves_and_the_direction_flips(tmp_path: Path) -> None:
    write(tmp_path, "train.py", "DEPTH = 4  # tune: 1..12 int\n")
    program = make_program(tmp_path)
    history = [baseline_record(), _rec(1, "discard", "DEPTH", 4, 5, 0.125, {"train.py:DEPTH": 4})]
    proposal = TuneGenerator(program.generator, program).propose(ctx_for(program, history))
    assert proposal.hypothesis == "Lower DEPTH from 4 to 3: raising it to 5 was worse"
    assert proposal.meta["step"] == 0.0625


@pytest.mark.parametrize("status, metric, words", [
    ("crash", None, "raising it to 5 crashed the verifier"),
    ("guard_fail", None, "raising it to 5 failed a guard"),
    ("discard", 1.0, "raising it to 5 made no difference"),
])
def test_failures_are_named_in_the_hypothesis(tmp_path: Path, status: str, metric: float | None,
                                              words: str) -> None:
    write(tmp_path, "train.py", "DEPTH = 4  # tune: 1..12 int\n")
    program = make_program(tmp_path)
    history = [baseline_record(),
               _rec(1, status, "DEPTH", 4, 5, 0.125, {"train.py:DEPTH": 4}, metric=metric, best=1.0)]
    proposal = TuneGenerator(program.generator, program).propose(ctx_for(program, history))
    assert proposal.hypothesis == f"Lower DEPTH from 4 to 3: {words}"


@pytest.mark.parametrize("status", ["gen_error", "violation", "no_change"])
def test_cycles_that_measured_nothing_teach_nothing(tmp_path: Path, status: str) -> None:
    write(tmp_path, "train.py", "DEPTH = 4  # tune: 1..12 int\n")
    program = make_program(tmp_path)
    gen = TuneGenerator(program.generator, program)
    fresh = gen.choose(gen.markers, [baseline_record()])
    history = [baseline_record(), _rec(1, status, "DEPTH", 4, 5, 0.125, {"train.py:DEPTH": 4})]
    assert gen.choose(gen.markers, history) == fresh


def test_records_of_other_generators_are_ignored(tmp_path: Path) -> None:
    write(tmp_path, "train.py", "DEPTH = 4  # tune: 1..12 int\n")
    program = make_program(tmp_path)
    gen = TuneGenerator(program.generator, program)
    fresh = gen.choose(gen.markers, [baseline_record()])
    history = [baseline_record(),
               {"cycle": 1, "status": "discard", "metric": 3.0, "best": 1.0, "gen_meta": {"turns": 3}},
               {"cycle": 2, "status": "keep", "metric": 0.5, "best": 0.5},
               {"cycle": 3, "status": "discard", "gen_meta": {"param": "DEPTH", "file": "train.py",
                                                               "from": "x", "to": None, "step": 1}}]
    assert gen.choose(gen.markers, history) == fresh


def test_never_retries_a_value_measured_at_the_same_incumbent(tmp_path: Path) -> None:
    write(tmp_path, "train.py", "DEPTH = 4  # tune: 1..12 int\n")
    program = make_program(tmp_path)
    inc = {"train.py:DEPTH": 4}
    # Both neighbours were measured (and lost) from this very incumbent: nothing is left.
    history = [baseline_record(),
               _rec(1, "discard", "DEPTH", 4, 5, 0.125, inc),
               _rec(2, "discard", "DEPTH", 4, 3, 0.0625, inc)]
    proposal = TuneGenerator(program.generator, program).propose(ctx_for(program, history))
    assert proposal.no_change_reason == "tune: the only parameter converged (DEPTH at 4 ±1)"
    assert proposal.meta == {"converged": 1}


def test_a_value_measured_at_another_incumbent_may_be_tried_again(tmp_path: Path) -> None:
    write(tmp_path, "train.py", "A = 4  # tune: 1..12 int\nB = 2  # tune: 1..12 int\n")
    program = make_program(tmp_path)
    history = [baseline_record(),
               _rec(1, "discard", "A", 4, 5, 0.125, {"train.py:A": 4, "train.py:B": 1}),
               _rec(2, "keep", "B", 1, 2, 0.125, {"train.py:A": 4, "train.py:B": 1})]
    gen = TuneGenerator(program.generator, program)
    for _ in range(3):      # B's momentum first, then A: 5 is new now that B changed
        proposal = gen.propose(ctx_for(program, history))
        if proposal.meta["param"] == "A":
            break
        history.append(_rec(len(history), "discard", "B", proposal.meta["from"], proposal.meta["to"],
                            proposal.meta["step"], proposal.meta["incumbent"]))
        write(tmp_path, "train.py", "A = 4  # tune: 1..12 int\nB = 2  # tune: 1..12 int\n")
    assert proposal.meta["param"] == "A"
    assert proposal.meta["to"] == 3   # A's own lesson (5 was worse) flips its direction


def test_does_not_jump_past_a_measured_value(tmp_path: Path) -> None:
    write(tmp_path, "train.py", "LR = 0.1  # tune: 1e-4..3 log\n")
    program = make_program(tmp_path)
    history = [baseline_record(),
               _rec(1, "keep", "LR", 0.01, 0.1, 0.25, {"train.py:LR": 0.01}),
               _rec(2, "discard", "LR", 0.1, 3.0, 0.5, {"train.py:LR": 0.1})]
    proposal = TuneGenerator(program.generator, program).propose(ctx_for(program, history))
    # Flipped and halved (0.25 of 4.5 decades) would land at 0.008, past 0.01 (already measured).
    assert 0.01 < proposal.meta["to"] < 0.1
    assert proposal.hypothesis == ("Lower LR from 0.1 to 0.03: raising it to 3.0 was worse; "
                                   "a smaller step, short of 0.01 (already measured)")


def test_momentum_then_rotation(tmp_path: Path) -> None:
    write(tmp_path, "train.py", "A = 4  # tune: 1..12 int\nB = 4  # tune: 1..12 int\n")
    program = make_program(tmp_path)
    gen = TuneGenerator(program.generator, program)
    inc = {"train.py:A": 4, "train.py:B": 4}
    one_miss = [baseline_record(), _rec(1, "discard", "A", 4, 5, 0.125, inc)]
    assert gen.choose(gen.markers, one_miss).marker.name == "A"          # its other side first
    two_misses = [*one_miss, _rec(2, "discard", "A", 4, 3, 0.0625, inc)]
    assert gen.choose(gen.markers, two_misses).marker.name == "B"        # then move on


def test_deterministic_given_seed_and_history(tmp_path: Path) -> None:
    text = "".join(f"P{i} = 5  # tune: 1..10 int\n" for i in range(6))
    write(tmp_path, "train.py", text)
    firsts = {}
    for seed in (None, 0, 1, 2, 3):
        program = make_program(tmp_path, seed=seed)
        picks = {TuneGenerator(program.generator, program).choose(
            TuneGenerator(program.generator, program).markers, [baseline_record()]).marker.name
            for _ in range(3)}
        assert len(picks) == 1
        firsts[seed] = picks.pop()
    assert firsts[None] == "P0"                       # no seed: file order
    assert len(set(firsts.values())) > 1              # seeds shuffle the order


# --------------------------------------------------------------------------- whole runs


QUAD = ("LR = 0.002  # tune: 1e-5..1 log\n"
        "HIDDEN = 3  # tune: 1..32 int\n"
        "MOM = 0.0  # tune: 0..0.99\n"
        "BATCH = 64  # tune: 1..256 int log\n")


def quad(v: dict[str, float]) -> float:
    return ((math.log10(v["LR"]) + 1) ** 2 + 0.005 * (v["HIDDEN"] - 12) ** 2
            + (v["MOM"] - 0.8) ** 2 + 0.2 * (math.log2(v["BATCH"]) - 4) ** 2)


def test_converges_near_the_optimum_and_then_stops(tmp_path: Path) -> None:
    sim = Simulation(tmp_path, QUAD, quad)
    sim.run(80)
    last = sim.proposals[-1]
    assert last.no_change_reason is not None, "tune should converge well within 80 cycles"
    assert last.no_change_reason.startswith("tune: all 4 parameters converged (LR at ")
    v = values(sim.file)
    assert abs(math.log10(v["LR"]) + 1) < 0.1
    assert abs(v["HIDDEN"] - 12) <= 2 and abs(v["MOM"] - 0.8) < 0.05 and v["BATCH"] in (15, 16, 17)
    assert sim.best < 0.01
    # Once converged it keeps saying so without touching the file.
    before = sim.file.read_bytes()
    again = sim.step()
    assert again.no_change_reason == last.no_change_reason and sim.file.read_bytes() == before


@pytest.mark.parametrize("seed", [None, 0, 1, 7])
def test_invariants_over_noisy_runs(tmp_path: Path, seed: int | None) -> None:
    """Bounds, ints, log scale, one change per cycle, and no configuration measured twice."""
    noise = random.Random(seed or 0)

    def noisy(v: dict[str, float]) -> float | None:
        if v["LR"] > 0.5:
            return None                      # "diverged": the verifier crashes
        return quad(v) + noise.gauss(0, 0.05)

    sim = Simulation(tmp_path, QUAD, noisy, seed=seed)
    seen = {frozenset(values(sim.file).items())}
    for _ in range(60):
        before = values(sim.file)
        proposal = sim.step()
        if proposal.no_change_reason:
            break
        meta = proposal.meta
        candidate = {**before, meta["param"]: float(meta["to"])}
        changed = [k for k in before if candidate[k] != before[k]]
        assert changed == [meta["param"]]
        assert frozenset(candidate.items()) not in seen, f"re-measured {candidate}"
        seen.add(frozenset(candidate.items()))
        assert 1e-5 <= candidate["LR"] <= 1 and 0 <= candidate["MOM"] <= 0.99
        for name, hi in (("HIDDEN", 32), ("BATCH", 256)):
            assert candidate[name] == int(candidate[name]) and 1 <= candidate[name] <= hi
        assert isinstance(meta["to"], int) == (meta["param"] in ("HIDDEN", "BATCH"))
        assert meta["step"] >= STEP_MIN
        assert re.match(r"^(Raise|Lower) \w+ from \S+ to \S+: \S", proposal.hypothesis)


def test_the_file_around_the_markers_is_untouched_across_a_run(tmp_path: Path) -> None:
    header = '"""Docs mention # tune: markers."""\n\nimport math  # stdlib\n\n'
    footer = "\ndef f():\n    return LR * 2\t# tab\n"
    sim = Simulation(tmp_path, header + QUAD + footer, quad)
    sim.run(15)
    text = sim.file.read_text()
    assert text.startswith(header) and text.endswith(footer)
    for line, original in zip(text[len(header):-len(footer)].splitlines(), QUAD.splitlines()):
        assert line.split("  # tune:")[1] == original.split("  # tune:")[1]
        assert line.split(" = ")[0] == original.split(" = ")[0]
