"""The tune generator: marker grammar, proposals, the study rebuilt from the ledger, workers,
seeds, and what counts as a measurement."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Any, Callable

import pytest

from autoloop.errors import ConfigError, FatalGeneratorError
from autoloop.generators.base import GenContext, Proposal
from autoloop.generators.registry import make_generator
from autoloop.generators.tune import TuneGenerator, observations, parse_markers
from autoloop.generators.tune_engine import N_STARTUP, Engine, canonical
from autoloop.program.reader import GeneratorSpec, Program, VerifierSpec


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


def values(path: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^(\w+)\s*=\s*(\S+)\s+# tune:", line)
        if m:
            try:
                out[m.group(1)] = float(m.group(2))
            except ValueError:
                out[m.group(1)] = m.group(2).strip("\"'")
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
        self.configs: list[dict[str, Any]] = [values(self.file)]
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
            self.configs.append(values(self.file))
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
    assert (m.name, m.value, m.param.lo, m.param.hi, m.param.is_int, m.param.log) == (name, value, lo, hi, is_int, log)
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
    ('ACT = "elu"  # tune: relu|tanh', "train.py:3: ACT: the value \"elu\" is not one of its choices relu|tanh"),
    ("ACT = relu  # tune: relu|relu", "train.py:3: ACT: a choice is listed twice in relu|relu"),
    ("ACT = relu  # tune: relu|a b", "train.py:3: ACT: expected `tune: A|B|C`"),
    ("ACT = relu  # tune: relu|", "train.py:3: ACT: expected `tune: A|B|C`"),
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
    assert [m.param.key for m in gen.markers] == ["pkg/a.py:A", "pkg/deep/b.py:B"]


def test_symlinked_files_are_not_tuned(tmp_path: Path) -> None:
    write(tmp_path, "real/x.py", "X = 1  # tune: 0..2\n")
    write(tmp_path, "train.py", "LR = 0.1  # tune: 0.01..1 log\n")
    (tmp_path / "link.py").symlink_to(tmp_path / "real/x.py")
    program = make_program(tmp_path, ("*.py",))
    gen = TuneGenerator(program.generator, program)
    assert [m.param.key for m in gen.markers] == ["train.py:LR"]


def test_registry_builds_tune(tmp_path: Path) -> None:
    write(tmp_path, "train.py", "LR = 0.01  # tune: 1e-4..1e-1 log\n")
    program = make_program(tmp_path)
    assert isinstance(make_generator(program.generator, program), TuneGenerator)


# --------------------------------------------------------------------------- one proposal


def test_propose_reads_the_work_tree_not_the_repository(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    work = tmp_path / "work"
    write(repo, "train.py", "LR = 0.01  # tune: 1e-4..1e-1 log\n")
    write(work, "train.py", "LR = 0.001  # tune: 1e-4..1e-1 log\n")
    program = make_program(repo)
    gen = TuneGenerator(program.generator, program)
    proposal = gen.propose(ctx_for(program, [baseline_record()], workdir=work))
    assert proposal.meta["incumbent"] == {"train.py:LR": 0.001}
    assert (repo / "train.py").read_text() == "LR = 0.01  # tune: 1e-4..1e-1 log\n"
    assert (work / "train.py").read_text() != "LR = 0.001  # tune: 1e-4..1e-1 log\n"


def test_bad_marker_in_work_tree_is_fatal(tmp_path: Path) -> None:
    write(tmp_path, "train.py", "LR = 0.01  # tune: 1e-4..1e-1 log\n")
    program = make_program(tmp_path)
    gen = TuneGenerator(program.generator, program)
    write(tmp_path, "train.py", "LR = 7  # tune: 1e-4..1e-1 log\n")
    with pytest.raises(FatalGeneratorError, match=r"train\.py:1: LR: the value 7\.0 is outside"):
        gen.propose(ctx_for(program, [baseline_record()]))




# --------------------------------------------------------------------------- categoricals


@pytest.mark.parametrize("line, value, choices, quote", [
    ('ACT = "relu"  # tune: relu|tanh|gelu', "relu", ("relu", "tanh", "gelu"), '"'),
    ("ACT = 'tanh',  # tune: relu | tanh", "tanh", ("relu", "tanh"), "'"),
    ("mode: fast  # tune: fast|slow  # a note", "fast", ("fast", "slow"), ""),
    ("BATCH = 32  # tune: 16|32|64", "32", ("16", "32", "64"), ""),
])
def test_categorical_marker_forms(line: str, value: str, choices: tuple[str, ...], quote: str) -> None:
    (m,), errors = parse_markers(line + "\n", "a.py")
    assert errors == []
    assert (m.value, m.param.choices, m.quote) == (value, choices, quote)


SPACE = ('"""A model."""\n'
         'DEPTH = 3  # tune: 1..12 int\n'
         'LR = 0.1  # tune: 1e-5..1 log\n'
         'WIDTH = 16  # tune: 8..1024 int log\n'
         'ACT = "sigmoid"  # tune: relu|tanh|gelu|sigmoid\n'
         'print(DEPTH, LR)  # not a marker\n')


def mixed(v: dict[str, Any]) -> float:
    return ((math.log10(v["LR"]) + 3) ** 2 + (v["DEPTH"] - 7) ** 2 / 9 + (math.log2(v["WIDTH"]) - 7) ** 2 / 9
            + {"relu": 0.1, "tanh": 0.3, "gelu": 0.0, "sigmoid": 1.0}[v["ACT"]])


def test_int_log_and_categorical_markers_are_all_searched_within_their_ranges(tmp_path: Path) -> None:
    sim = Simulation(tmp_path, SPACE, mixed, seed=0)
    sim.run(30)
    assert all(p.no_change_reason is None for p in sim.proposals)
    configs = sim.configs[1:]
    for c in configs:
        assert 1 <= c["DEPTH"] <= 12 and float(c["DEPTH"]).is_integer()
        assert 1e-5 <= c["LR"] <= 1
        assert 8 <= c["WIDTH"] <= 1024 and float(c["WIDTH"]).is_integer()
        assert c["ACT"] in ("relu", "tanh", "gelu", "sigmoid")
    # every dimension really moves, every categorical value gets a try, nothing is measured twice
    for key in ("DEPTH", "LR", "WIDTH", "ACT"):
        assert len({c[key] for c in configs}) > 3
    assert {c["ACT"] for c in configs} == {"relu", "tanh", "gelu", "sigmoid"}
    assert len({canonical(c) for c in sim.configs}) == len(sim.configs)
    # it learns: the best of 30 is far better than the start and than the first random points
    assert sim.best < mixed(sim.configs[0]) / 3
    assert sim.best < min(mixed(c) for c in sim.configs[1:N_STARTUP + 1])
    # the rest of the file is untouched, the quotes of the categorical kept
    lines = sim.file.read_text().splitlines()
    assert lines[0] == '"""A model."""' and lines[5] == "print(DEPTH, LR)  # not a marker"
    assert re.fullmatch(r'ACT = "(relu|tanh|gelu|sigmoid)"  # tune: relu\|tanh\|gelu\|sigmoid', lines[4])


def test_a_proposal_rewrites_only_the_values_and_says_what_and_why(tmp_path: Path) -> None:
    text = ("import math\r\n"
            "LR = 0.01   #   tune: 1e-3..1 log   \r\n"
            "DEPTH = 4  # tune: 1..12 int\r\n"
            "print(LR)\r\n")
    path = write(tmp_path, "train.py", text)
    program = make_program(tmp_path, seed=3)
    proposal = TuneGenerator(program.generator, program).propose(ctx_for(program, [baseline_record(2.5)]))
    new = path.read_bytes().decode()
    lr, depth = proposal.meta["config"]["train.py:LR"], proposal.meta["config"]["train.py:DEPTH"]
    expected = text.replace("LR = 0.01 ", f"LR = {lr!r} ").replace("DEPTH = 4 ", f"DEPTH = {depth} ")
    assert new == expected
    assert proposal.meta["incumbent"] == {"train.py:LR": 0.01, "train.py:DEPTH": 4}
    assert isinstance(depth, int) and (lr, depth) != (0.01, 4)
    changed = [c["param"] for c in proposal.meta["changes"]]
    assert proposal.hypothesis.startswith("Set ")
    for name in changed:
        assert name in proposal.hypothesis.split(":")[0]
    assert "a point of a Latin hypercube to map the space before TPE models it (1 measured so far)" \
        in proposal.hypothesis
    assert "best measured so far 2.5" in proposal.hypothesis


def test_yaml_floats_stay_floats_for_yaml_1_1(tmp_path: Path) -> None:
    yaml = pytest.importorskip("yaml")
    path = write(tmp_path, "conf.yaml", "lr: 3.0e-07  # tune: 1e-9..1e-6 log\n")
    program = make_program(tmp_path, ("conf.yaml",))
    gen = TuneGenerator(program.generator, program)
    history = [baseline_record()]
    for cycle in range(1, 6):
        proposal = gen.propose(ctx_for(program, history))
        assert isinstance(yaml.safe_load(path.read_text())["lr"], float), path.read_text()
        history.append({"cycle": cycle, "status": "discard", "metric": 2.0, "best": 1.0,
                        "gen_meta": proposal.meta})
        path.write_text("lr: 3.0e-07  # tune: 1e-9..1e-6 log\n")


# --------------------------------------------------------------------------- the study and the ledger


def test_resume_from_the_ledger_reproduces_the_study(tmp_path: Path) -> None:
    sim = Simulation(tmp_path, SPACE, mixed, seed=5)
    sim.run(12)
    ledger = json.loads(json.dumps(sim.history))      # what the JSONL ledger gives back
    seen = observations(ledger, values_by_key(sim.file))
    # the baseline first (the user's values at the baseline's metric), then each cycle's point
    assert [o.value for o in seen] == [r["metric"] for r in sim.history]
    assert [dict(o.config) for o in seen] == [r["gen_meta"]["incumbent"] for r in sim.history[1:2]] + \
        [r["gen_meta"]["config"] for r in sim.history[1:]]
    # a new process (a new generator) resuming from the ledger proposes what the original would
    before = sim.file.read_bytes()
    program = make_program(tmp_path, seed=5)
    resumed = TuneGenerator(program.generator, program).propose(ctx_for(program, ledger))
    resumed_text = sim.file.read_bytes()
    sim.file.write_bytes(before)
    original = sim.gen.propose(ctx_for(sim.program, sim.history))
    assert sim.file.read_bytes() == resumed_text != before
    assert resumed.meta == original.meta and resumed.hypothesis == original.hypothesis


def values_by_key(path: Path) -> dict[str, Any]:
    return {f"train.py:{k}": v for k, v in values(path).items()}


def test_workers_of_a_round_propose_distinct_unmeasured_points(tmp_path: Path) -> None:
    sim = Simulation(tmp_path / "main", SPACE, mixed, seed=1)
    sim.run(8)
    trees = []
    for worker in range(4):
        tree = tmp_path / f"w{worker}"
        write(tree, "train.py", sim.file.read_text())
        trees.append(tree)
    metas = []
    for worker, tree in enumerate(trees):
        gen = TuneGenerator(sim.program.generator, sim.program)      # one generator per worker
        ctx = ctx_for(sim.program, sim.history, workdir=tree)
        ctx = dataclasses.replace(ctx, env={"AUTOLOOP_WORKER": str(worker)})
        metas.append(gen.propose(ctx).meta)
    points = [canonical(m["config"]) for m in metas]
    assert len(set(points)) == 4
    measured = {canonical(c) for c in sim.configs}
    assert not measured & set(points)
    # worker 0 proposes what a single worker would
    single = sim.gen.propose(ctx_for(sim.program, sim.history))
    assert canonical(single.meta["config"]) == points[0]


def test_a_small_space_is_shared_out_and_then_exhausted(tmp_path: Path) -> None:
    path = write(tmp_path, "train.py", "N = 2  # tune: 1..3 int\n")
    program = make_program(tmp_path)
    history = [baseline_record()]
    got = []
    for worker in range(3):
        write(tmp_path / f"w{worker}", "train.py", path.read_text())
        ctx = dataclasses.replace(ctx_for(program, history, workdir=tmp_path / f"w{worker}"),
                                  env={"AUTOLOOP_WORKER": str(worker)})
        got.append(TuneGenerator(program.generator, program).propose(ctx))
    assert sorted(p.meta["config"]["train.py:N"] for p in got[:2]) == [1, 3]
    assert not got[2].finished and got[2].no_change_reason == \
        "tune: the other workers of this round take the last 2 of the 3 configurations"
    assert (tmp_path / "w2" / "train.py").read_text() == "N = 2  # tune: 1..3 int\n"
    # once they are measured, the space is exhausted: the run may stop
    for n, p in enumerate(got[:2], 1):
        history.append({"cycle": n, "status": "discard", "metric": 2.0, "best": 1.0, "gen_meta": p.meta})
    last = TuneGenerator(program.generator, program).propose(ctx_for(program, history))
    assert last.finished and last.no_change_reason == \
        "tune: all 3 configurations of the marked parameters were measured"
    assert path.read_text() == "N = 2  # tune: 1..3 int\n"


def test_the_seed_changes_the_search_and_fixes_it(tmp_path: Path) -> None:
    runs = {}
    for name, seed in (("a", 1), ("b", 2), ("c", 1), ("d", None)):
        sim = Simulation(tmp_path / name, SPACE, mixed, seed=seed)
        sim.run(10)
        runs[name] = [canonical(c) for c in sim.configs[1:]]
    assert runs["a"] == runs["c"]                       # same seed, same history: same search
    assert runs["a"][0] != runs["b"][0]                 # another seed: another search from cycle 1
    assert len(set(runs["a"]) & set(runs["b"])) == 0
    assert runs["d"] != runs["a"]


def test_the_start_is_a_latin_hypercube_of_the_seed(tmp_path: Path) -> None:
    """The points before TPE models the space cover each range evenly: one in each of N_STARTUP
    equal slices (of the log range for a log parameter, of the choices for a categorical)."""
    text = ('X = 0.5  # tune: 0..1\nY = 0.1  # tune: 0.001..10 log\n'
            f'C = "c0"  # tune: {"|".join(f"c{i}" for i in range(N_STARTUP))}\n')
    starts = []
    for seed in (1, 2):
        sim = Simulation(tmp_path / str(seed), text, lambda v: v["X"] + v["Y"], seed=seed)
        sim.run(N_STARTUP + 1)
        assert [p.meta["how"] for p in sim.proposals] == ["start"] * N_STARTUP + ["model"]
        points = sim.configs[1:N_STARTUP + 1]
        assert sorted(int(c["X"] * N_STARTUP) for c in points) == list(range(N_STARTUP))
        slices = sorted(int((math.log10(c["Y"]) + 3) / 4 * N_STARTUP) for c in points)
        assert slices == list(range(N_STARTUP))
        assert sorted(c["C"] for c in points) == [f"c{i}" for i in range(N_STARTUP)]
        starts.append(points)
    assert starts[0] != starts[1]                       # another seed, another hypercube


def rosenbrock(v: dict[str, Any]) -> float:
    return (1 - v["X"]) ** 2 + 100 * (v["Y"] - v["X"] ** 2) ** 2


def test_no_self_stop_while_the_budget_remains(tmp_path: Path) -> None:
    """The old tuner declared "converged" after 10 cycles in this valley; a float space never
    runs out, so every cycle is a new measured point, and the valley is followed down."""
    sim = Simulation(tmp_path, "X = -1.5  # tune: -2..2\nY = 1.5  # tune: -2..2\n", rosenbrock, seed=0)
    sim.run(60)
    assert len(sim.proposals) == 60
    assert not any(p.finished or p.no_change_reason for p in sim.proposals)
    assert len({canonical(c) for c in sim.configs}) == 61
    assert sim.best < 1.0 < rosenbrock(sim.configs[0])


# --------------------------------------------------------------------------- what counts as measured (issue 14 item 9)


def tune_record(cycle: int, config: dict[str, Any], incumbent: dict[str, Any], status: str,
                metric: float | None, best: float, **more: Any) -> dict[str, Any]:
    return {"cycle": cycle, "status": status, "metric": metric, "best": best,
            "gen_meta": {"config": config, "incumbent": incumbent}, **more}


def test_a_persons_skip_is_not_a_measurement_but_a_crash_is(tmp_path: Path) -> None:
    start, a, b, c = ({"train.py:X": x} for x in (0.5, 0.1, 0.9, 0.7))
    history = [baseline_record(1.0),
               tune_record(1, a, start, "discard", None, 1.0, decided_by="human"),   # skipped
               tune_record(2, b, start, "crash", None, 1.0),
               tune_record(3, c, start, "discard", 3.0, 1.0)]
    seen = observations(history, start)
    assert [(dict(o.config), o.value) for o in seen] == [(start, 1.0), (b, None), (c, 3.0)]
    # the skipped point can be proposed again: it was never measured
    write(tmp_path, "train.py", "X = 0.5  # tune: 0..1\n")
    program = make_program(tmp_path)
    gen = TuneGenerator(program.generator, program)
    engine = Engine([m.param for m in gen.markers], "minimize", None)
    # the crash scored as the worst; the user's values measured but kept out of TPE's model
    assert [o.proposed for o in seen] == [False, True, True]
    assert engine._usable(seen) == [({"train.py:X": 0.9}, 3.0), ({"train.py:X": 0.7}, 3.0)]


def test_a_kept_regression_is_not_called_best(tmp_path: Path) -> None:
    write(tmp_path, "train.py", "X = 0.9  # tune: 0..1\n")
    program = make_program(tmp_path)
    start, worse = {"train.py:X": 0.5}, {"train.py:X": 0.9}
    # a person kept X=0.9 although it measured 2.0 against the incumbent's 1.0
    history = [baseline_record(1.0),
               tune_record(1, worse, start, "keep", 2.0, 2.0, decided_by="human", recommendation="discard")]
    seen = observations(history, worse)
    assert [(dict(o.config), o.value) for o in seen] == [(start, 1.0), (worse, 2.0)]
    proposal = TuneGenerator(program.generator, program).propose(ctx_for(program, history))
    assert proposal.hypothesis.endswith("; best measured so far 1")


def test_cycles_that_measured_nothing_and_other_generators_teach_nothing() -> None:
    start = {"train.py:X": 0.5}
    history = [baseline_record(1.0)]
    for n, status in enumerate(("gen_error", "violation", "no_change"), 1):
        history.append(tune_record(n, {"train.py:X": 0.1 * n}, start, status, None, 1.0))
    history.append({"cycle": 4, "status": "discard", "metric": 0.1, "best": 1.0, "gen_meta": {"x": 1}})
    assert [(dict(o.config), o.value) for o in observations(history, start)] == [(start, 1.0)]


def test_ledgers_of_the_previous_tuner_are_read() -> None:
    start = {"train.py:LR": 0.01, "train.py:N": 4}
    old = {"param": "LR", "file": "train.py", "from": 0.01, "to": 0.02, "step": 0.125, "incumbent": start}
    history = [baseline_record(1.0), {"cycle": 1, "status": "keep", "metric": 0.5, "best": 0.5, "gen_meta": old}]
    seen = observations(history, {"train.py:LR": 0.02, "train.py:N": 4})
    assert [(dict(o.config), o.value) for o in seen] == [(start, 1.0), ({"train.py:LR": 0.02, "train.py:N": 4}, 0.5)]


def test_the_paired_rule_s_re_measurements_of_the_incumbent_are_its_value() -> None:
    """Under `accept: paired` every cycle measures the incumbent again (side A): its value is the
    median of all its samples, not the one lucky run that got it kept; a candidate's value is
    the median of its own runs."""
    start, a, b = ({"train.py:X": x} for x in (0.5, 0.1, 0.9))

    def paired(cycle: int, config: dict[str, Any], incumbent: dict[str, Any], status: str,
               batches: list[tuple[list[float], list[float]]]) -> dict[str, Any]:
        bs = [x for _, bb in batches for x in bb]
        return tune_record(cycle, config, incumbent, status, sorted(bs)[len(bs) // 2], 1.0,
                           stats={"rule": "paired", "batches": [{"a": aa, "b": bb} for aa, bb in batches]})

    history = [baseline_record(1.0),
               paired(1, a, start, "keep", [([1.0, 1.2, 1.1], [0.5, 0.4, 0.6])]),   # a: lucky?
               paired(2, b, a, "discard", [([0.9, 0.8], [1.5, 1.7]), ([0.85], [1.6])])]
    seen = observations(history, a)
    assert [dict(o.config) for o in seen] == [start, a, b]
    assert [o.value for o in seen] == pytest.approx([
        1.05,            # the baseline's 1.0 and its re-measurements 1.0 1.2 1.1
        0.7,             # its runs 0.5 0.4 0.6 (kept at 0.5), then 0.9 0.8 0.85 as the incumbent
        1.6])
    # a strict ledger (no batches) keeps each cycle's own metric, as before
    strict = [baseline_record(1.0), tune_record(1, a, start, "keep", 0.5, 0.5),
              tune_record(2, b, a, "discard", 1.6, 0.5)]
    assert [o.value for o in observations(strict, a)] == [1.0, 0.5, 1.6]
