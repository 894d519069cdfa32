"""Step 2 (autoloop.engine.steps.generate): the generator edits its worker's tree; its hypothesis, its
error and the prompt it was given are the cycle's, with secrets redacted."""

from __future__ import annotations

from tests.engine_fixture import engine  # noqa: F401 (fixture)


def test_generate_edits_the_tree_and_records_the_hypothesis(engine):
    e = engine({"*": 'W("val.txt", "39"); hyp("lower it by one")'})
    c = e.round(upto="generate").cycles[0]
    assert (e.tree / "val.txt").read_text() == "39"
    assert c.proposal.hypothesis == "lower it by one" and c.gen_error is None
    rec = e.project.record(c.n)
    assert rec["prompt"] == (c.log_dir / "prompt.md").read_text()
    assert rec["env"]["AUTOLOOP_CYCLE"] == str(c.n) and "AUTOLOOP_WORKER" not in rec["env"]


def test_a_failing_generator_is_a_gen_error_not_an_exception(engine):
    e = engine({"*": 'W("val.txt", "1"); sys.exit(3)'})
    c = e.round(upto="generate").cycles[0]
    assert c.gen_error is not None and "3" in c.gen_error


def test_a_secret_in_the_hypothesis_is_redacted(engine, monkeypatch):
    secret = "sk-ant-" + "Q" * 40
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    e = engine({"*": f'hyp("use key {secret}")'})
    c = e.round(upto="generate").cycles[0]
    assert secret not in c.proposal.hypothesis


def test_each_worker_of_a_round_edits_its_own_tree(engine):
    e = engine({"*": 'W("val.txt", str(30 + cycle)); hyp(f"worker {os.environ[\'AUTOLOOP_WORKER\']}")'},
               extra="parallel: {workers: 2}")
    rnd = e.round(k=2, upto="generate")
    a, b = rnd.cycles
    assert a.tree.path != b.tree.path
    assert (a.tree.path / "val.txt").read_text() == str(30 + a.n)
    assert (b.tree.path / "val.txt").read_text() == str(30 + b.n)
    assert [c.proposal.hypothesis for c in rnd.cycles] == ["worker 0", "worker 1"]
    assert "Parallel round: 2 workers" in (b.log_dir / "prompt.md").read_text()
