"""The ledger (append-only JSONL) and what is rendered from it (contract §7)."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import pytest

from autoloop.errors import UsageError
from autoloop.journal.ledger import STATUSES, TSV_COLUMNS, Journal, state_dir
from autoloop.base.numbers import pct


@pytest.fixture
def journal(tmp_path: Path) -> Journal:
    return Journal(tmp_path, "t1")


def reopen(j: Journal) -> Journal:
    k = Journal(j.program_dir, j.tag)
    k.load()
    return k


def rendered(cycles: list[dict], tag: str = "t1", goal: str = "",
             finals: list[dict] | None = None) -> tuple[str, str]:
    """experiments.md and results.tsv of a fresh journal holding these records, read back."""
    with tempfile.TemporaryDirectory() as tmp:
        j = Journal(Path(tmp), tag)
        for rec in [*cycles, *(finals or [])]:
            j.append(rec)
        j.render(goal)
        return (j.experiments.read_bytes().decode("utf-8", "surrogateescape"),
                j.results.read_bytes().decode("utf-8", "surrogateescape"))


def render_tsv(cycles: list[dict]) -> str:
    return rendered(cycles)[1]


def render_experiments(cycles: list[dict], tag: str, goal: str) -> str:
    return rendered(cycles, tag, goal)[0]


def cycle(n: int, status: str = "discard", **kw) -> dict:
    rec = {"t": "cycle", "cycle": n, "status": status, "metric": 1.0 - n / 100, "best": 1.0,
           "commit": None, "hypothesis": f"hypothesis {n}", "result": f"result {n}",
           "lesson": f"lesson {n}", "changed": ["a.py"], "duration_s": 1.5, "gen": {},
           "delta_pct": None}
    rec.update(kw)
    return rec


# ---------------------------------------------------------------------------------------------
# where things live

def test_paths(tmp_path: Path, journal: Journal) -> None:
    assert journal.ledger == tmp_path / ".autoloop" / "t1" / "ledger.jsonl"
    assert journal.experiments == tmp_path / "experiments.md"
    assert journal.results == tmp_path / "results.tsv"
    assert state_dir(tmp_path, "t1") == journal.dir


# ---------------------------------------------------------------------------------------------
# append / load

def test_missing_ledger_loads_empty(journal: Journal) -> None:
    journal.load()
    assert (journal.records, journal.exists(), journal.next_cycle()) == ([], False, 0)


def test_append_then_load_round_trip(journal: Journal) -> None:
    recs = [{"t": "start", "tag": "t1"}, {"t": "begin", "cycle": 0, "parent": "abc"},
            cycle(0, "baseline", hypothesis="naïve ✓ \"quoted\" \\ back"), {"t": "end", "reason": "x"}]
    for r in recs:
        journal.append(dict(r))
    again = reopen(journal)
    assert again.records == journal.records
    assert [r["t"] for r in again.records] == ["start", "begin", "cycle", "end"]


def test_append_adds_type_first_then_timestamp(journal: Journal) -> None:
    rec = journal.append({"cycle": 1, "t": "begin"})
    assert list(rec)[:2] == ["t", "ts"] and isinstance(rec["ts"], float)


def test_each_record_is_one_line(journal: Journal) -> None:
    journal.append({"t": "cycle", "hypothesis": "two\nlines\r\nand\u2028more"})
    journal.append({"t": "end"})
    data = journal.ledger.read_bytes()
    assert data.count(b"\n") == 2 and data.endswith(b"\n")


def test_unserializable_values_become_strings(journal: Journal, tmp_path: Path) -> None:
    journal.append({"t": "start", "path": tmp_path})
    assert reopen(journal).records[0]["path"] == str(tmp_path)


def test_append_does_not_mutate_its_argument(journal: Journal) -> None:
    rec = {"t": "begin", "cycle": 1}
    journal.append(rec)
    assert rec == {"t": "begin", "cycle": 1}


def test_append_survives_a_surrogate_escaped_path(journal: Journal) -> None:
    journal.append({"t": "cycle", "cycle": 1, "status": "violation", "changed": ["\udcff.py"]})
    assert reopen(journal).records[0]["changed"]


def test_next_cycle_follows_the_last_cycle(journal: Journal) -> None:
    journal.append(cycle(0, "baseline"))
    journal.append(cycle(1))
    journal.append({"t": "begin", "cycle": 2, "parent": "x"})
    assert journal.next_cycle() == 2


def test_cycles_and_first_start(journal: Journal) -> None:
    journal.append({"t": "start", "n": 1})
    journal.append(cycle(0, "baseline"))
    journal.append({"t": "start", "n": 2})
    journal.append(cycle(1))
    assert [c["cycle"] for c in journal.cycles()] == [0, 1]
    assert journal.first_start()["n"] == 1


def test_load_replaces_memory(journal: Journal) -> None:
    journal.append({"t": "start"})
    journal.load()
    journal.load()
    assert len(journal.records) == 1


# ---------------------------------------------------------------------------------------------
# torn and corrupt ledgers

GOOD = b'{"t":"start","ts":1}\n{"t":"begin","ts":2,"cycle":0}\n'


def write_ledger(j: Journal, data: bytes) -> None:
    j.dir.mkdir(parents=True, exist_ok=True)
    j.ledger.write_bytes(data)


@pytest.mark.parametrize("tail", [
    b'{"t":"cyc',                       # torn inside a string
    b'{"t":"cycle","cycle":0,',         # torn after a comma
    b'{',
    b'\x00\x00\x00',                    # preallocated zeros
    b'{"t":"cycle"}',                   # complete JSON but no newline: the write was cut
    b'{"t":"cycle"}   ',
    b'{"t":"cy\n\n',                    # torn, then only blank lines
    b'garbage\n   \n',
])
def test_torn_last_line_is_cut(journal: Journal, tail: bytes) -> None:
    write_ledger(journal, GOOD + tail)
    journal.load()
    assert [r["t"] for r in journal.records] == ["start", "begin"]


def test_torn_last_line_is_cut_on_disk(journal: Journal) -> None:
    write_ledger(journal, GOOD + b'{"t":"cycle","cyc')
    journal.load()
    assert journal.ledger.read_bytes() == GOOD
    assert not journal.tampered()


def test_complete_json_without_newline_is_cut_on_disk(journal: Journal) -> None:
    write_ledger(journal, GOOD + b'{"t":"cycle","cycle":0}')
    journal.load()
    assert journal.ledger.read_bytes() == GOOD


def test_append_after_a_cut_starts_on_a_fresh_line(journal: Journal) -> None:
    write_ledger(journal, GOOD + b'{"t":"cycle","cycle":0}')
    journal.load()
    journal.append({"t": "end"})
    assert [r["t"] for r in reopen(journal).records] == ["start", "begin", "end"]


def test_clean_ledger_is_not_rewritten(journal: Journal) -> None:
    write_ledger(journal, GOOD)
    before = journal.ledger.stat().st_mtime_ns
    journal.load()
    assert journal.ledger.stat().st_mtime_ns == before and journal.ledger.read_bytes() == GOOD


def test_blank_lines_in_the_middle_are_ignored(journal: Journal) -> None:
    write_ledger(journal, b'{"t":"start"}\n\n   \n{"t":"end"}\n')
    journal.load()
    assert [r["t"] for r in journal.records] == ["start", "end"]


@pytest.mark.parametrize("bad,line", [
    (b'{"t":"start"}\nnot json\n{"t":"end"}\n', 2),
    (b'not json\n{"t":"end"}\n', 1),
    (b'{"t":"start"}\n{"t":"begin"}\n{"t":"cy\n{"t":"end"}\n', 3),
    (b'{"t":"start"}\n[1,2]\n{"t":"end"}\n', 2),            # JSON but not a record
    (b'{"t":"start"}\n{"no_type":1}\n{"t":"end"}\n', 2),    # a record needs "t"
    (b'{"t":"start"}\n"text"\n{"t":"end"}\n', 2),
    (b'{"t":"start"}\n\n\nxx\n{"t":"end"}\n', 4),           # line numbers count blank lines
])
def test_corrupt_middle_line_is_refused_naming_file_and_line(journal: Journal, bad: bytes, line: int) -> None:
    write_ledger(journal, bad)
    with pytest.raises(UsageError) as exc:
        journal.load()
    assert f"{journal.ledger}:{line}:" in str(exc.value)
    assert exc.value.exit_code == 2


def test_corrupt_middle_line_leaves_the_file_alone(journal: Journal) -> None:
    data = b'{"t":"start"}\nnot json\n{"t":"end"}\n'
    write_ledger(journal, data)
    with pytest.raises(UsageError):
        journal.load()
    assert journal.ledger.read_bytes() == data


# ---------------------------------------------------------------------------------------------
# tampering

def test_not_tampered_after_own_appends(journal: Journal) -> None:
    journal.append({"t": "start"})
    journal.append({"t": "end"})
    assert not journal.tampered()


def test_foreign_append_is_tampering(journal: Journal) -> None:
    journal.append({"t": "start"})
    with open(journal.ledger, "ab") as f:
        f.write(b'{"t":"cycle","cycle":5,"status":"keep"}\n')
    assert journal.tampered()


def test_same_size_edit_is_tampering(journal: Journal) -> None:
    journal.append({"t": "cycle", "status": "discard"})
    journal.ledger.write_bytes(journal.ledger.read_bytes().replace(b"discard", b"keep!!!"))
    assert journal.tampered()


def test_deleted_ledger_is_tampering(journal: Journal) -> None:
    journal.append({"t": "start"})
    journal.ledger.unlink()
    assert journal.tampered()


def test_no_ledger_and_no_records_is_not_tampering(journal: Journal) -> None:
    assert not journal.tampered()


@pytest.mark.parametrize("attack", ["append", "truncate", "delete", "rewrite"])
def test_repair_restores_exact_bytes(journal: Journal, attack: str) -> None:
    journal.append({"t": "start"})
    journal.append(cycle(0, "baseline"))
    original = journal.ledger.read_bytes()
    if attack == "append":
        with open(journal.ledger, "ab") as f:
            f.write(b"junk\n")
    elif attack == "truncate":
        journal.ledger.write_bytes(original[:10])
    elif attack == "delete":
        journal.ledger.unlink()
    else:
        journal.ledger.write_bytes(b'{"t":"start"}\n')
    assert journal.tampered()
    journal.repair()
    assert journal.ledger.read_bytes() == original and not journal.tampered()


def test_repair_when_ledger_replaced_by_a_directory(journal: Journal) -> None:
    journal.append({"t": "start"})
    original = journal.ledger.read_bytes()
    journal.ledger.unlink()
    (journal.ledger / "x").mkdir(parents=True)
    assert journal.tampered()
    journal.repair()
    assert journal.ledger.read_bytes() == original


# ---------------------------------------------------------------------------------------------
# pending cycles and intents (write-ahead)

@pytest.mark.parametrize("records,pending_cycle", [
    ([], None),
    ([{"t": "start"}], None),
    ([{"t": "begin", "cycle": 0}], 0),
    ([{"t": "begin", "cycle": 0}, cycle(0, "baseline")], None),
    ([{"t": "begin", "cycle": 0}, {"t": "abort", "cycle": 0}], None),
    ([{"t": "begin", "cycle": 3}, {"t": "abort", "cycle": 2}], 3),          # another cycle's abort
    ([{"t": "begin", "cycle": 3}, cycle(2)], 3),
    ([{"t": "begin", "cycle": 3}, cycle(3), {"t": "begin", "cycle": 4}], 4),
    ([{"t": "begin", "cycle": 4}, {"t": "intent", "cycle": 4, "commit": "c"}], 4),
    ([{"t": "begin", "cycle": 4}, {"t": "intent", "cycle": 4}, cycle(4, "keep")], None),
    ([{"t": "begin", "cycle": 4}, {"t": "abort", "cycle": 4}, {"t": "begin", "cycle": 4}], 4),
    ([{"t": "begin", "cycle": 4}, {"t": "abort", "cycle": 4}, {"t": "end"}], None),
])
def test_pending(journal: Journal, records: list, pending_cycle: int | None) -> None:
    for r in records:
        journal.append(dict(r))
    p = reopen(journal).unfinished()
    assert (p[0]["cycle"] if p else None) == pending_cycle


def test_pending_returns_the_begin_record(journal: Journal) -> None:
    journal.append({"t": "begin", "cycle": 7, "parent": "abc123"})
    assert reopen(journal).unfinished()[0]["parent"] == "abc123"


def test_intent_for_the_pending_cycle(journal: Journal) -> None:
    journal.append({"t": "begin", "cycle": 4, "parent": "p"})
    journal.append({"t": "intent", "cycle": 4, "commit": "c4", "parent": "p"})
    assert reopen(journal).intent_for(4)["commit"] == "c4"


def test_intent_of_an_earlier_attempt_does_not_count(journal: Journal) -> None:
    journal.append({"t": "begin", "cycle": 4})
    journal.append({"t": "intent", "cycle": 4, "commit": "old"})
    journal.append({"t": "abort", "cycle": 4})
    journal.append({"t": "begin", "cycle": 4})
    assert reopen(journal).intent_for(4) is None


def test_intent_for_another_cycle_is_none(journal: Journal) -> None:
    journal.append({"t": "begin", "cycle": 3})
    journal.append({"t": "intent", "cycle": 3, "commit": "c3"})
    journal.append(cycle(3, "keep"))
    journal.append({"t": "begin", "cycle": 4})
    assert reopen(journal).intent_for(4) is None


# ---------------------------------------------------------------------------------------------
# results.tsv

def parse_tsv(text: str) -> list[dict[str, str]]:
    lines = text.split("\n")
    assert lines[-1] == ""
    header = lines[0].split("\t")
    rows = []
    for ln in lines[1:-1]:
        cells = ln.split("\t")
        assert len(cells) == len(header), ln
        rows.append(dict(zip(header, cells)))
    return rows


def test_tsv_header_starts_with_the_contract_columns() -> None:
    header = render_tsv([]).split("\n")[0].split("\t")
    assert header[:5] == ["cycle", "commit", "metric", "status", "description"]
    assert tuple(header) == TSV_COLUMNS


def test_tsv_empty_is_just_the_header() -> None:
    assert render_tsv([]) == "\t".join(TSV_COLUMNS) + "\n"


def test_tsv_one_row_per_cycle_in_order() -> None:
    rows = parse_tsv(render_tsv([cycle(0, "baseline", commit="a" * 40), cycle(1), cycle(2, "crash")]))
    assert [(r["cycle"], r["status"]) for r in rows] == [("0", "baseline"), ("1", "discard"), ("2", "crash")]


@pytest.mark.parametrize("status", STATUSES)
def test_tsv_status_values(status: str) -> None:
    assert parse_tsv(render_tsv([cycle(1, status)]))[0]["status"] == status


@pytest.mark.parametrize("hyp,expected", [
    ("tab\there", "tab here"),
    ("new\nline", "new line"),
    ("crlf\r\nline", "crlf line"),
    ("cr\ronly", "cr only"),
    ("  padded  ", "padded"),
    ("many\t\t\n\nseparators", "many separators"),
    ("unicode\u2028line\u2029para\x85nel", "unicode line para nel"),
    ("vt\x0bff\x0c", "vt ff"),
    ("", ""),
    ("plain ✓ text", "plain ✓ text"),
])
def test_tsv_description_is_one_cell(hyp: str, expected: str) -> None:
    text = render_tsv([cycle(1, hypothesis=hyp, lesson=hyp)])
    row = parse_tsv(text)[0]
    assert (row["description"], row["lesson"]) == (expected, expected)
    assert len(text.splitlines()) == 2


def test_tsv_missing_metric_is_empty() -> None:
    row = parse_tsv(render_tsv([cycle(1, "crash", metric=None, best=None)]))[0]
    assert (row["metric"], row["best"]) == ("", "")


def test_tsv_commit_of_keep_and_baseline() -> None:
    rows = parse_tsv(render_tsv([cycle(0, "baseline", commit="b" * 40), cycle(1, "keep", commit="c" * 40),
                                 cycle(2, "discard", commit=None)]))
    assert rows[0]["commit"] and "b" * 7 in rows[0]["commit"]
    assert rows[1]["commit"] and "c" * 7 in rows[1]["commit"]
    assert rows[2]["commit"] == ""


def test_tsv_metric_is_a_number() -> None:
    row = parse_tsv(render_tsv([cycle(1, metric=0.125, best=0.25, delta_pct=-50.0)]))[0]
    assert (float(row["metric"]), float(row["best"]), float(row["delta_pct"])) == (0.125, 0.25, -50.0)


def test_tsv_keep_row_differs_from_the_incumbent() -> None:
    rows = parse_tsv(render_tsv([cycle(0, "baseline", metric=1.2345671, best=1.2345671),
                                 cycle(1, "keep", metric=1.2345669, best=1.2345669)]))
    assert rows[0]["metric"] != rows[1]["metric"]


def test_tsv_cost_column() -> None:
    rows = parse_tsv(render_tsv([cycle(1, gen={"cost_usd": 0.12345}), cycle(2, gen={})]))
    assert (rows[0]["cost_usd"], rows[1]["cost_usd"]) == ("0.1235", "")


# ---------------------------------------------------------------------------------------------
# experiments.md

SECTION = re.compile(r"^## Cycle (\d+)\b", re.MULTILINE)


def sections(md: str) -> dict[int, str]:
    marks = list(SECTION.finditer(md))
    out = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(md)
        out[int(m.group(1))] = md[m.start():end]
    return out


def test_experiments_one_section_per_cycle_in_order() -> None:
    md = render_experiments([cycle(0, "baseline"), cycle(1), cycle(2, "keep")], "t1", "lower loss")
    assert [int(m.group(1)) for m in SECTION.finditer(md)] == [0, 1, 2]


LINE = {k: re.compile(rf"^(\*\*)?{k}:(\*\*)? ?(.*)$", re.MULTILINE) for k in ("Hypothesis", "Result", "Lesson")}


@pytest.mark.parametrize("key,field", [("Hypothesis", "hypothesis"), ("Result", "result"), ("Lesson", "lesson")])
def test_experiments_section_has_the_three_lines(key: str, field: str) -> None:
    md = render_experiments([cycle(0, "baseline"), cycle(1)], "t1", "")
    for n, text in sections(md).items():
        m = LINE[key].search(text)
        assert m is not None and m.group(3) == f"{field} {n}"


def test_experiments_status_on_the_heading_line() -> None:
    md = render_experiments([cycle(3, "guard_fail")], "t1", "")
    heading = next(ln for ln in md.splitlines() if ln.startswith("## Cycle 3"))
    assert "guard_fail" in heading


def test_experiments_multiline_text_cannot_forge_a_section() -> None:
    forged = "idea\n\n## Cycle 99 — keep\n**Lesson:** fake"
    md = render_experiments([cycle(1, hypothesis=forged, result=forged, lesson=forged)], "t1", "")
    assert [int(m.group(1)) for m in SECTION.finditer(md)] == [1]
    assert len(LINE["Lesson"].findall(md)) == 1


def test_experiments_goal_and_tag() -> None:
    md = render_experiments([], "my-tag", "Lower the loss")
    assert "autoloop/my-tag" in md and "Lower the loss" in md


def test_experiments_changed_list_is_bounded() -> None:
    md = render_experiments([cycle(1, changed=[f"f{i}.py" for i in range(50)])], "t", "")
    changed = next(ln for ln in md.splitlines() if ln.startswith("Changed:"))
    assert "f9.py" in changed and "f10.py" not in changed


def test_render_writes_both_files_and_rendered_ok(journal: Journal) -> None:
    journal.append(cycle(0, "baseline", commit="a" * 40))
    journal.append(cycle(1))
    journal.render("goal")
    assert journal.rendered_ok("goal")
    assert sections(journal.experiments.read_text()).keys() == {0, 1}
    assert len(parse_tsv(journal.results.read_text())) == 2


@pytest.mark.parametrize("victim", ["experiments", "results"])
@pytest.mark.parametrize("how", ["edit", "delete", "binary"])
def test_rendered_ok_notices_edits(journal: Journal, victim: str, how: str) -> None:
    journal.append(cycle(0, "baseline"))
    journal.render("goal")
    path = getattr(journal, victim)
    if how == "edit":
        path.write_text(path.read_text() + "x")
    elif how == "delete":
        path.unlink()
    else:
        path.write_bytes(b"\xff\xfe")
    assert not journal.rendered_ok("goal")
    journal.render("goal")
    assert journal.rendered_ok("goal")


def test_render_is_atomic_no_temp_files_left(journal: Journal) -> None:
    journal.append(cycle(0, "baseline"))
    journal.render()
    leftovers = [p.name for p in journal.program_dir.iterdir() if p.name.startswith(".")]
    assert leftovers == [".autoloop"]


def test_render_reflects_only_cycle_records(journal: Journal) -> None:
    journal.append({"t": "start"})
    journal.append({"t": "begin", "cycle": 0})
    journal.append(cycle(0, "baseline"))
    journal.append({"t": "begin", "cycle": 1})
    journal.append({"t": "abort", "cycle": 1})
    journal.render()
    assert len(parse_tsv(journal.results.read_text())) == 1


# ---------------------------------------------------------------------------------------------
# small helpers

@pytest.mark.parametrize("old,new,p", [(None, 1, None), (1, None, None), (0, 1, None), (2, 1, -50.0),
                                       (-2, -1, 50.0), (4, 5, 25.0)])
def test_pct(old, new, p) -> None:
    assert pct(old, new) == p


def test_ledger_lines_are_json_objects_with_type(journal: Journal) -> None:
    journal.append({"t": "start"})
    journal.append(cycle(0, "baseline"))
    for line in journal.ledger.read_text().splitlines():
        assert isinstance(json.loads(line), dict) and "t" in json.loads(line)


# ---------------------------------------------------------------------------------------------
# incremental rendering, byte for byte a full render; which records are fsynced

def full_render(j: Journal, goal: str) -> tuple[bytes, bytes]:
    # a fresh journal of the same records renders every cycle at once, with no cache to go stale
    md, tsv = rendered([r for r in j.records if r["t"] in ("cycle", "final", "start")], j.tag, goal)
    enc = lambda s: s.encode("utf-8", "surrogateescape")  # noqa: E731
    return enc(md), enc(tsv)


def test_incremental_render_is_byte_identical_to_a_full_render(journal: Journal,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import random

    import autoloop.journal.ledger as jmod
    sections = []
    real_section = jmod._section
    monkeypatch.setattr(jmod, "_section", lambda c, *a: (sections.append(c["cycle"]), real_section(c, *a))[1])
    rng = random.Random(7)
    goal = "goal"
    reloads = 0
    for n in range(120):
        kind = rng.choice(["cycle", "cycle", "begin", "intent", "abort", "start", "final"])
        if kind == "cycle":
            journal.append(cycle(n, rng.choice(list(STATUSES)), hypothesis=f"h {n}\n\tmore \udcff",
                                 changed=["x.py"] * rng.randrange(13), metric=rng.choice([None, rng.random()]),
                                 delta_pct=rng.choice([None, 1.5]), gen={"cost_usd": rng.choice([None, 0.25])},
                                 stats=rng.choice([None, {"rule": "paired", "noise_pct": 0.5}])))
        elif kind == "final":
            journal.append({"t": "final", "after_cycle": n, "text": f"re-measured {n}", "a": [1.0], "b": [0.5]})
        else:
            journal.append({"t": kind, "cycle": n})
        if rng.random() < 0.1:
            goal = rng.choice(["goal", "", "another goal"])
        if rng.random() < 0.05:
            journal.load()                       # records replaced: the cache must notice
            reloads += 1
        journal.render(goal)
        rendered = (journal.experiments.read_bytes(), journal.results.read_bytes())
        n_sections = len(sections)
        assert rendered == full_render(journal, goal), n
        del sections[n_sections:]                # (the full render's own calls)
        assert journal.rendered_ok(goal)
    # each cycle's section was rendered once, plus once more after each reload: not O(cycles²)
    cycles = len(journal.cycles())
    assert cycles <= len(sections) <= cycles * (1 + reloads), (len(sections), cycles, reloads)


def test_cycles_cache_follows_appends_and_reloads(journal: Journal) -> None:
    journal.append(cycle(0, "baseline"))
    first = journal.cycles()
    first.append({"t": "cycle", "cycle": 99})    # a caller's list is its own
    journal.append({"t": "begin", "cycle": 1})
    journal.append(cycle(1))
    assert [c["cycle"] for c in journal.cycles()] == [0, 1]
    journal.load()
    assert [c["cycle"] for c in journal.cycles()] == [0, 1]
    assert journal.first_start() is None and journal.finals() == []


def test_begin_is_not_fsynced_but_the_rest_is(journal: Journal, monkeypatch: pytest.MonkeyPatch) -> None:
    import autoloop.journal.ledger as jmod
    synced: list[int] = []
    real = jmod.os.fsync
    monkeypatch.setattr(jmod.os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    journal.append({"t": "begin", "cycle": 1})
    assert synced == []
    for rec in ({"t": "intent", "cycle": 1}, cycle(1), {"t": "abort", "cycle": 2}, {"t": "start"}):
        journal.append(rec)
    assert len(synced) == 4
    assert [r["t"] for r in reopen(journal).records] == ["begin", "intent", "cycle", "abort", "start"]


def test_a_value_that_needs_more_digits_rerounds_every_row(journal: Journal) -> None:
    journal.append(cycle(0, "baseline", metric=1.0000001, best=1.0000001))
    journal.render("g")
    assert parse_tsv(journal.results.read_text())[0]["metric"] == "1"
    journal.append(cycle(1, "keep", metric=1.0000002, best=1.0000002))
    journal.render("g")
    rows = parse_tsv(journal.results.read_text())
    assert [r["metric"] for r in rows] == ["1.0000001", "1.0000002"]
    assert journal.results.read_bytes() == full_render(journal, "g")[1]


# ---------------------------------------------------------------------------------------------
# typed reading of records

def test_cycle_record_reads_a_full_record() -> None:
    from autoloop.journal.ledger import CycleRecord
    rec = cycle(3, "keep", commit="c" * 40, decided_by="human", diffstat="1 file",
                gen={"cost_usd": 0.5, "tokens_in": 10, "tokens_out": 5},
                stats={"pooled": {"change_pct": -2.0}, "holdout": {"overfit": True}, "batches": [{"n": 4}]})
    c = CycleRecord.of(rec)
    assert (c.cycle, c.status, c.metric, c.best, c.commit) == (3, "keep", 0.97, 1.0, "c" * 40)
    assert (c.hypothesis, c.lesson, c.result, c.duration_s) == ("hypothesis 3", "lesson 3", "result 3", 1.5)
    assert (c.cost_usd, c.tokens, c.by_human, c.diffstat, c.changed) == (0.5, 15, True, "1 file", ("a.py",))
    assert c.pooled == {"change_pct": -2.0} and c.holdout == {"overfit": True} and c.batches == [{"n": 4}]


def test_cycle_record_of_a_sparse_record_has_empty_values() -> None:
    from autoloop.journal.ledger import CycleRecord
    c = CycleRecord.of({"t": "cycle", "cycle": 1, "status": "crash", "gen": None, "stats": {"pooled": "x"}})
    assert (c.metric, c.best, c.commit, c.hypothesis, c.cost_usd, c.tokens) == (None, None, "", "", None, 0)
    assert c.pooled is None and c.holdout is None and c.batches == [] and not c.by_human


def test_since_last_start_counts_this_invocation_only(journal: Journal) -> None:
    from autoloop.journal.ledger import since_last_start
    for rec in ({"t": "start"}, cycle(0, "baseline"), cycle(1, "keep"), {"t": "start"},
                cycle(2, "keep"), cycle(3, "crash"), cycle(4, "keep")):
        journal.append(rec)
    assert since_last_start(journal.records) == {"crash": 1, "keep": 2}
    assert since_last_start(journal.records[:3]) == {"keep": 1}        # the baseline is not counted


def test_has_baseline_reads_without_mending(journal: Journal) -> None:
    from autoloop.journal.ledger import has_baseline
    assert not has_baseline(journal.ledger)                             # no ledger yet
    journal.append({"t": "start"})
    assert not has_baseline(journal.ledger)
    journal.append(cycle(0, "baseline"))
    with journal.ledger.open("ab") as f:
        f.write(b'{"t":"cyc')                                           # a torn last line
    before = journal.ledger.read_bytes()
    assert has_baseline(journal.ledger) and journal.ledger.read_bytes() == before
