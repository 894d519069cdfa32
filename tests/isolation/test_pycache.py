"""autoloop's own bytecode cache (autoloop.isolation.pycache): what it holds is compiled by autoloop from
the sources themselves, checked-hash, so nothing a measurement wrote into its prefix is ever
read by the next one, and a stale entry is recompiled by Python rather than used. Real
interpreters, real files; and a run through the CLI where every cycle's candidate module is
what the verifier measures."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from autoloop.isolation.pycache import ProvenCache
from tests.scripts.e2e import kill_marked, make_project

PY = sys.executable


def _python(prefix: Path, src_dir: Path, code: str) -> str:
    """What Python prints running `code` in `src_dir` with this bytecode prefix."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPYCACHEPREFIX"] = str(prefix)
    out = subprocess.run([PY, "-c", code], cwd=src_dir, env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def _import_value(prefix: Path, src_dir: Path) -> str:
    """What `import helper; print(helper.VALUE)` prints with this bytecode prefix."""
    return _python(prefix, src_dir, "import helper; print(helper.VALUE)")


def _helper(tmp_path: Path, value: str) -> tuple[Path, Path]:
    """src/helper.py setting VALUE: (its folder, the file)."""
    src_dir = tmp_path / "src"
    src_dir.mkdir()
    src = src_dir / "helper.py"
    src.write_text(f"VALUE = {value!r}\n")
    return src_dir, src


def _seeded(cache: ProvenCache, prefix: Path, step: str = "the verifier") -> Path:
    """A new bytecode prefix, seeded for `step` as a measurement's is."""
    prefix.mkdir()
    cache.seed(prefix, step)
    return prefix


def _cache(tmp_path: Path) -> ProvenCache:
    cache = ProvenCache(tmp_path / "cache", [PY], {"PATH": os.environ.get("PATH", "")})
    assert cache.usable
    return cache


def _pyc_rel(src: Path) -> str:
    tag = sys.implementation.cache_tag
    return f"{str(src.parent).lstrip('/')}/{src.stem}.{tag}.pyc"


def test_learnt_bytecode_is_compiled_from_the_source_not_copied(tmp_path: Path) -> None:
    src_dir, src = _helper(tmp_path, "real")
    cache = _cache(tmp_path)
    prefix = _seeded(cache, tmp_path / "m1")
    assert _import_value(prefix, src_dir) == "real"
    # a measurement plants bytecode for helper in its own prefix: an unchecked-hash pyc that
    # says something else (Python would trust it over the source)
    planted = prefix / _pyc_rel(src)
    code = compile("VALUE = 'planted'\n", str(src), "exec")
    import marshal
    planted.write_bytes(importlib.util.MAGIC_NUMBER + b"\x01\x00\x00\x00" + b"\0" * 8 + marshal.dumps(code))
    assert _import_value(prefix, src_dir) == "planted"          # the attack is real
    assert cache.learn(prefix) >= 1       # helper, and the standard library a start imports
    kept = (tmp_path / "cache" / _pyc_rel(src)).read_bytes()
    assert kept[4:8] == b"\x03\x00\x00\x00"                   # checked-hash (PEP 552)
    assert kept[8:16] == importlib.util.source_hash(src.read_bytes())
    assert b"planted" not in kept
    assert _import_value(_seeded(cache, tmp_path / "m2"), src_dir) == "real"


def test_a_stale_entry_is_recompiled_not_used(tmp_path: Path) -> None:
    src_dir, src = _helper(tmp_path, "one")
    cache = _cache(tmp_path)
    p1 = _seeded(cache, tmp_path / "m1")
    assert _import_value(p1, src_dir) == "one"
    assert cache.learn(p1) >= 1
    src.write_text("VALUE = 'two'\n")      # same size; mtime does not matter to a checked pyc
    p2 = _seeded(cache, tmp_path / "m2")
    assert _import_value(p2, src_dir) == "two"
    assert cache.learn(p2) == 1            # Python rewrote it; the cache compiles the new bytes
    p3 = _seeded(cache, tmp_path / "m3")
    assert _import_value(p3, src_dir) == "two"
    assert cache.learn(p3) == 0            # nothing new: the seeded copy was used as it was


def test_each_step_starts_with_the_bytecode_it_needed_and_no_more(tmp_path: Path) -> None:
    """A guard that imports much and a verifier that imports little: the verifier's prefix is
    not filled with the guard's modules at every run (copying them all cost more than the run
    saved), and what a step needs later is learnt then."""
    src_dir, _ = _helper(tmp_path, "real")
    (src_dir / "big.py").write_text("import helper\nVALUE = 'big'\n")
    cache = _cache(tmp_path)
    runs = iter(range(100))

    def run(step: str, module: str) -> set[str]:
        """The step imports `module` in a fresh prefix seeded for it; what the seed held."""
        prefix = _seeded(cache, tmp_path / f"m{next(runs)}", step)
        held = {f.name.split(".")[0] for f in prefix.rglob("*.pyc")}
        _python(prefix, src_dir, f"import {module}")
        cache.learn(prefix)
        return held

    assert run("guard 'tests'", "big") == set()                # nothing learnt yet
    # a step's first run gets the whole cache (it is as fast as after any other step)...
    assert {"big", "helper"} <= run("the verifier", "helper")
    assert {"big", "helper"} <= run("guard 'tests'", "big")
    # ...and from then on what it read or wrote (where the file system keeps no access times,
    # what it wrote: its second run compiles what it read once more)
    run("the verifier", "helper")
    held = run("the verifier", "helper")
    assert "helper" in held and "big" not in held, held
    run("the verifier", "big")                                 # the verifier's code changed
    assert {"big", "helper"} <= run("the verifier", "helper")


def test_a_fifo_named_like_a_source_does_not_block_the_cache(tmp_path: Path) -> None:
    """A measurement writes bytecode for a source that a candidate then turns into a FIFO (in a
    place it may write): learning from it reads nothing that blocks and compiles nothing."""
    import threading

    src_dir, src = _helper(tmp_path, "real")
    cache = _cache(tmp_path)
    first = _seeded(cache, tmp_path / "m1")
    _import_value(first, src_dir)
    assert cache.learn(first) >= 1          # the cache holds helper, compiled from the source
    prefix = _seeded(cache, tmp_path / "m2", "the score")
    planted = prefix / _pyc_rel(src)
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_bytes(b"written by the measurement")
    src.unlink()
    os.mkfifo(src)
    got: list[int] = []
    learner = threading.Thread(target=lambda: got.append(cache.learn(prefix)), daemon=True)
    learner.start()
    learner.join(60)
    assert not learner.is_alive(), "learning blocked on a FIFO"
    assert got == [0]


def test_every_cycle_measures_its_own_candidate_module(tmp_path: Path) -> None:
    """The verifier imports a module the generator edits each cycle: with bytecode carried
    from measurement to measurement, each cycle still measures exactly its candidate."""
    values = ["30", "35", "20", "25", "10"]
    plan = {i + 1: f'W("src/model.py", "SCORE = {v}\\n")' for i, v in enumerate(values)}
    p = make_project(tmp_path, plan, files={"src/model.py": "SCORE = 40.25\n",
                                            "score.py": "import sys\nsys.path.insert(0, 'src')\n"
                                                        "import model\nprint(f'score: {model.SCORE}')\n"},
                     guards=False)
    # PYTHONDONTWRITEBYTECODE=1 as many container images set it (and tests/scripts/e2e.py does):
    # a measurement writes its bytecode into its own prefix all the same, so the cache learns
    assert p.env["PYTHONDONTWRITEBYTECODE"] == "1"
    res = p.run("--cycles", str(len(values)))
    kill_marked(p.env)
    assert res.returncode == 0, res.stderr
    rows = p.rows()
    assert [(r["status"], float(r["metric"])) for r in rows] == [
        ("baseline", 40.25), ("keep", 30.0), ("discard", 35.0), ("keep", 20.0), ("discard", 25.0), ("keep", 10.0)]
    learnt = [f.name for f in Path(p.env["XDG_CACHE_HOME"]).glob("autoloop/worktrees/*/*.scratch/pycache-warm/**/*.pyc")]
    assert any(name.startswith("model.") for name in learnt), learnt


PLANT_GUARD = '''\
import importlib.util, marshal, os, sys
# the guard runs the candidate's code: it may leave bytecode for a module the verifier imports
path = os.path.abspath("src/model.py")
pyc = importlib.util.cache_from_source(path)
os.makedirs(os.path.dirname(pyc), exist_ok=True)
code = compile("SCORE = -1000\\n", path, "exec")
with open(pyc, "wb") as f:   # unchecked-hash: Python would trust it over the source
    f.write(importlib.util.MAGIC_NUMBER + b"\\x01\\x00\\x00\\x00" + b"\\0" * 8 + marshal.dumps(code))
'''


def test_bytecode_a_guard_leaves_is_not_read_by_the_verifier(tmp_path: Path) -> None:
    p = make_project(tmp_path, {1: 'W("src/model.py", "SCORE = 30\\n")'},
                     files={"src/model.py": "SCORE = 40.25\n", "plant.py": PLANT_GUARD,
                            "score.py": "import sys\nsys.path.insert(0, 'src')\n"
                                        "import model\nprint(f'score: {model.SCORE}')\n"},
                     guards=False, extra=f"guards:\n  - {{name: plant, command: {PY} plant.py}}")
    # `autoloop verify` (and so `doctor --probe`, which measures through it) as a run does
    verify = p.cli("verify")
    assert verify.returncode == 0 and "40.25" in verify.stdout and "-1000" not in verify.stdout, verify.stdout
    res = p.run("--cycles", "1")
    kill_marked(p.env)
    assert res.returncode == 0, res.stderr
    assert [(r["status"], float(r["metric"])) for r in p.rows()] == [("baseline", 40.25), ("keep", 30.0)]


def _imported(tmp_path: Path, body: str, *flags: str) -> Path:
    """A module imported once by a real interpreter (which writes its bytecode); that file."""
    (tmp_path / "helper.py").write_text(body)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    subprocess.run([PY, *flags, "-c", "import helper"], cwd=tmp_path, env=env, check=True)
    opt = ".opt-1" if "-O" in flags else ""
    return tmp_path / "__pycache__" / f"helper.{sys.implementation.cache_tag}{opt}.pyc"


def test_bytecode_an_import_wrote_is_recognised(tmp_path: Path) -> None:
    from autoloop.isolation.pycache import written_by_import
    pyc = _imported(tmp_path, "def f(x):\n    assert x\n    return [i * 2 for i in range(x)]\nVALUE = f(3)\n")
    assert written_by_import(pyc)
    optimized = _imported(tmp_path, (tmp_path / "helper.py").read_text(), "-O")
    assert optimized.is_file() and written_by_import(optimized)


def test_bytecode_that_is_not_the_source_is_a_change(tmp_path: Path) -> None:
    """Planted code behind a header that matches the source, a stale file, and a file for a
    source that is not there are all refused."""
    import importlib.util
    import marshal
    from autoloop.isolation.pycache import written_by_import
    pyc = _imported(tmp_path, "VALUE = 1\n")
    header = pyc.read_bytes()[:16]
    pyc.write_bytes(header + marshal.dumps(compile("VALUE = 2\n", "helper.py", "exec")))
    assert not written_by_import(pyc)

    pyc.write_bytes(header + marshal.dumps(compile("VALUE = 1\n", "helper.py", "exec", dont_inherit=True)))
    assert written_by_import(pyc)       # the control: the same bytes an import writes pass
    (tmp_path / "helper.py").write_text("VALUE = 10\n")   # the source moved on: the header is stale
    assert not written_by_import(pyc)

    orphan = pyc.with_name(f"gone.{sys.implementation.cache_tag}.pyc")
    orphan.write_bytes(importlib.util.MAGIC_NUMBER + bytes(12) + marshal.dumps(compile("", "x", "exec")))
    assert not written_by_import(orphan)


def test_the_score_and_the_inputs_start_from_the_bytecode_cache_and_teach_it(tmp_path: Path) -> None:
    """verifier.score and verifier.inputs run in prefixes of their own: seeded from autoloop's
    cache like a measurement's, and what they compile is learnt (before, every score compiled
    its imports anew each run). `fractions` and `statistics` are imported by them alone."""
    produce = ("import os, sys\nsys.stdin.read()\n"
               "open(os.path.join(os.environ['AUTOLOOP_OUTPUT'], 'val'), 'w').write(open('val.txt').read())\n")
    check = ("import fractions, os\nv = open(os.path.join(os.environ['AUTOLOOP_OUTPUT'], 'val')).read()\n"
             "print(f'score: {float(fractions.Fraction(v.strip()))}')\n")
    draw = "import statistics\nprint(statistics.mean([1, 2]))\n"
    p = make_project(tmp_path, {1: 'W("val.txt", "30")', 2: 'W("val.txt", "35")'},
                     files={"produce.py": produce, "check.py": check, "draw.py": draw}, guards=False,
                     verifier=f"{{py}} produce.py\n  score: {PY} check.py\n  inputs: {PY} draw.py")
    res = p.run("--cycles", "2")
    kill_marked(p.env)
    assert res.returncode == 0, res.stderr
    assert [(r["status"], float(r["metric"])) for r in p.rows()] == [("baseline", 40.25), ("keep", 30.0),
                                                                     ("discard", 35.0)]
    learnt = {f.name.split(".")[0] for f in
              Path(p.env["XDG_CACHE_HOME"]).glob("autoloop/worktrees/*/*.scratch/pycache-warm/**/*.pyc")}
    assert {"fractions", "statistics"} <= learnt, sorted(learnt)


def test_measurements_outside_a_run_share_one_warm_cache(tmp_path: Path, monkeypatch) -> None:
    """`doctor --probe` measures one project 20 to 60 times through verify_head: with a WarmCache
    each measurement starts from what the ones before it needed (checked-hash, compiled by
    autoloop from the sources), so only the first compiles `fractions`; unsandboxed, where a
    planted tree's code could rewrite that cache for the next, none is made."""
    from autoloop.engine.verify_head import check, verify_head
    from autoloop.isolation import pycache
    from autoloop.isolation.pycache import WarmCache
    from autoloop.program.reader import load_program

    compiled: list[int] = []
    learn = pycache.ProvenCache.learn

    def counting(self: ProvenCache, prefix: Path) -> int:
        compiled.append(n := learn(self, prefix))
        return n

    monkeypatch.setattr(pycache.ProvenCache, "learn", counting)
    guard = "import fractions\nprint(fractions.Fraction(1, 2))\n"
    for sandbox in ("auto", "none"):
        p = make_project(tmp_path / sandbox, files={"guard.py": guard},
                         extra=f"sandbox: {sandbox}\n" if sandbox == "none" else "")
        for key, value in p.env.items():
            monkeypatch.setenv(key, value)
        program = load_program(p.repo / "program.md")
        ws, head = check(program)
        warm = WarmCache([PY], os.environ)
        compiled.clear()
        results = [verify_head(program, ws, head, record_reads=False, bytecode=warm) for _ in range(3)]
        assert all(r.measurement.guards_ok and r.measurement.metric == 40.25 for r in results)
        if sandbox == "none":
            assert compiled == [], compiled    # no cache made, nothing learnt
            continue
        # learnt after each step (the guard, then the verifier) of each of the three measurements:
        # the first measurement's steps compile what each imports (the verifier's own modules,
        # pathlib, once no editable finder imports it into every Python), the later ones nothing
        assert len(compiled) == 6 and compiled[0] > 0 and not any(compiled[2:]), compiled
        cached = [f for f in warm._cache.root.rglob("fractions.*.pyc")] if warm._cache else []
        assert cached and cached[0].read_bytes()[4:8] == b"\x03\x00\x00\x00", cached   # checked-hash
