"""`autoloop report`: one self-contained HTML file; its chart has one mark per cycle; it renders
to a non-blank page in a real (headless) browser."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from autoloop.journal.facts import facts, markdown, verifier_runs
from autoloop.commands.report import STATUS_COLORS, chart, render
from tests.scripts.e2e import make_project

PLAN = {
    1: 'hyp("lower to 30"); W("val.txt", "30")',
    2: 'hyp("try 35 <b>bold</b> & more"); W("val.txt", "35")',
    3: 'hyp("crash it"); W("val.txt", "exit")',
    4: 'hyp("guard fails"); W("val.txt", "12"); W("notes.txt", "FAIL")',
    5: 'hyp("cheat"); open("score.py", "a").write("print(\'score: -5\')\\n")',
    6: 'hyp("nothing")',
    7: 'hyp("generator error"); W("val.txt", "11"); sys.exit(1)',
    8: 'hyp("lower to 20"); W("val.txt", "20")',
}
STATUSES = ["baseline", "keep", "discard", "crash", "guard_fail", "violation", "no_change", "gen_error", "keep"]


class Marks(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.marks: list[dict[str, str]] = []
        self.scripts = 0
        self.external: list[str] = []
        self.rows: list[str] = []
        self.svg = 0
        self.texts: list[str] = []
        self._in_text = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "circle" and "mark" in (a.get("class") or "").split():
            self.marks.append(a)
        if tag == "script":
            self.scripts += 1
        if tag == "svg":
            self.svg += 1
        if tag == "tr" and (a.get("id") or "").startswith("c"):
            self.rows.append(a["id"])
        for k in ("src", "href"):
            v = a.get(k) or ""
            if v and not v.startswith("#"):
                self.external.append(v)
        if tag == "link":
            self.external.append(str(a))
        self._in_text = tag == "text" and "note" in (a.get("class") or "")

    def handle_data(self, data):
        if self._in_text:
            self.texts.append(data)

    def handle_endtag(self, tag):
        if tag == "text":
            self._in_text = False


@pytest.fixture(scope="module")
def run_project(tmp_path_factory):
    p = make_project(tmp_path_factory.mktemp("report"), PLAN)
    res = p.run("--cycles", str(len(PLAN)))
    assert res.returncode == 0, res.stderr
    assert [p.statuses()[i] for i in range(len(PLAN) + 1)] == STATUSES
    return p


@pytest.fixture(scope="module")
def report_file(run_project):
    p = run_project
    out = p.base / "report.html"
    res = p.cli("report", "program.md", "--tag", p.tag, "-o", str(out))
    assert res.returncode == 0, res.stderr
    assert str(out) in res.stdout
    return out


def test_one_mark_per_cycle_coloured_by_status(report_file):
    m = Marks()
    m.feed(report_file.read_text())
    assert len(m.marks) == len(STATUSES)
    by_cycle = {int(a["data-cycle"]): a for a in m.marks}
    assert sorted(by_cycle) == list(range(len(STATUSES)))
    for cycle, status in enumerate(STATUSES):
        assert by_cycle[cycle]["data-status"] == status
        assert by_cycle[cycle]["fill"] == STATUS_COLORS[status]


def test_self_contained_no_script_no_network(report_file):
    text = report_file.read_text()
    m = Marks()
    m.feed(text)
    assert m.scripts == 0 and m.svg == 1
    assert m.external == [], m.external
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in text
    assert "@import" not in text and "url(" not in text


def test_table_has_every_cycle_and_escapes_text(report_file):
    text = report_file.read_text()
    m = Marks()
    m.feed(text)
    assert m.rows == [f"c{i}" for i in range(len(STATUSES))]
    assert "<b>bold</b>" not in text and "&lt;b&gt;bold&lt;/b&gt;" in text
    # lessons, diffstat and the summary are there
    assert "kept: score 40.25 → 30" in text
    assert "1 file changed" in text
    for word in ("baseline", "best", "gain", "keep rate", "cost per 1% gain", "runs per hour"):
        assert word in text


def test_runs_per_hour_is_recomputed_from_the_ledger(run_project, report_file):
    """The report's verifier runs are the ledger's: the listed runs of pairs and calibrations,
    else one per measured metric."""
    records = [json.loads(line) for line in run_project.ledger_path().read_text().splitlines()]
    runs = sum(verifier_runs(r) for r in records)
    measured = sum(1 for r in records if r.get("metric") is not None)
    assert runs >= measured >= 3, records
    assert f"{runs} verifier runs" in report_file.read_text()
class Changes(HTMLParser):
    """Each row's change cell: the diff it opens to (a <details> with a <pre>), else its text."""

    def __init__(self) -> None:
        super().__init__()
        self.row: int | None = None
        self.cells: dict[int, dict[str, str]] = {}
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and (a.get("id") or "").startswith("c"):
            self.row = int(a["id"][1:])
            self.cells[self.row] = {"details": "", "pre": "", "code": ""}
        if self.row is not None and tag in ("pre", "code") or tag == "details" and "change" in (a.get("class") or ""):
            self._in = tag
            self.cells[self.row]["details"] += "yes" if tag == "details" else ""

    def handle_data(self, data):
        if self.row is not None and self._in in ("pre", "code"):
            self.cells[self.row][self._in] += data

    def handle_endtag(self, tag):
        if tag in ("pre", "code"):
            self._in = None
        if tag == "tr":
            self.row = None


def test_each_row_opens_to_its_change(report_file):
    m = Changes()
    m.feed(report_file.read_text())
    for n, status in enumerate(STATUSES):
        cell = m.cells[n]
        if status in ("baseline", "no_change"):
            assert cell == {"details": "", "pre": "", "code": ""}, (n, cell)
            continue
        # kept, discarded, crashed, guard_fail, a reverted violation, a failed generator's change
        assert cell["details"] and cell["pre"].startswith("diff --git"), (n, cell)
        assert cell["code"] == f"autoloop show {n} --tag t1"
    assert "+print('score: -5')" in m.cells[5]["pre"] and "+11" in m.cells[7]["pre"].splitlines()


def test_a_diff_too_long_or_missing_names_the_command_instead(run_project, monkeypatch):
    from autoloop.commands import report

    p = run_project
    recs = [json.loads(line) for line in p.ledger_path().read_text().splitlines()]
    cycles = [r for r in recs if r["t"] == "cycle"]
    cycles[2] = {**cycles[2], "change": "f" * 40}          # a commit this repository does not have
    monkeypatch.setattr(report, "DIFF_LINES", 10)          # the one-line changes fit, the two-file one not
    changes = report.changes_of(p.repo, "t1", cycles)
    assert changes[1].text and changes[1].text.startswith("diff --git")
    assert changes[2] == report.Diff(None, "its commit is not in this repository")
    assert changes[4].text is None and "not embedded" in changes[4].why
    assert 0 not in changes and 6 not in changes
    html = report.render(facts(recs, tag="t1", goal="g", metric="score", direction="minimize"),
                         generated="now", changes=changes)
    row4 = html.split('<tr id="c4">')[1].split("</tr>")[0]
    assert "<pre" not in row4 and "autoloop show 4 --tag t1" in row4 and "not embedded" in row4


def test_kept_points_are_annotated_with_their_hypothesis(report_file):
    m = Marks()
    m.feed(report_file.read_text())
    assert m.texts == ["lower to 30", "lower to 20"]


def test_running_best_is_a_step_line(run_project):
    p = run_project
    recs = [json.loads(line) for line in p.ledger_path().read_text().splitlines()]
    svg = chart([r for r in recs if r["t"] == "cycle"], "score", "minimize")
    path = svg.split('class="best"')[0].rsplit('<path d="', 1)[1].split('"')[0]
    pts = [tuple(map(float, s.split(","))) for s in path.lstrip("M").split(" L")]
    # steps: every segment is horizontal or vertical, and the line only goes down (minimize)
    for (x1, y1), (x2, y2) in zip(pts, pts[1:]):
        assert x1 == x2 or y1 == y2
        assert y2 >= y1 - 1e-9      # SVG y grows downwards: lower metric = larger y


def test_default_output_and_latest_tag(run_project):
    p = run_project
    res = p.cli("report")
    assert res.returncode == 0, res.stderr
    assert (p.repo / ".autoloop" / p.tag / "report.html").exists()
    # the checkout stays clean: the report is in autoloop's excluded folder
    from tests.scripts.e2e import git
    assert git(p.repo, "status", "--porcelain", env=p.env) == ""


def test_markdown_format(run_project):
    p = run_project
    res = p.cli("report", "--format", "markdown")
    assert res.returncode == 0
    assert res.stdout.startswith("### autoloop run `t1`")
    assert "| baseline | score = 40.25 |" in res.stdout
    assert "lower to 20" in res.stdout


def test_unknown_tag_is_usage_error(run_project):
    res = run_project.cli("report", "--tag", "nope")
    assert res.returncode == 2 and "no run 'nope'" in res.stderr


def test_gain_ci_is_shown_when_the_ledger_has_one():
    recs = [
        {"t": "cycle", "cycle": 0, "status": "baseline", "metric": 10.0, "best": 10.0, "commit": "a" * 40},
        {"t": "cycle", "cycle": 1, "status": "keep", "metric": 9.0, "best": 9.0, "commit": "b" * 40,
         "hypothesis": "h", "stats": {"change_ci_pct": [-12.0, -8.0]}, "gen": {"cost_usd": 0.5}},
        {"t": "end", "gain_ci_pct": [-12.5, -7.5], "gain_ci_level": 0.95},
    ]
    f = facts(recs, tag="x", goal="g", metric="m", direction="minimize")
    assert f.gain_ci_pct == (-12.5, -7.5)
    assert f.kept[0].ci_pct == (-12.0, -8.0)
    assert f.cost_per_pct == pytest.approx(0.05)
    html = render(f, generated="now")
    assert "95% CI -12.50% … -7.50%" in html
    assert "-10.00% [-12.00% … -8.00%]" in markdown(f)


def test_markdown_kept_changes_give_their_intervals_real_coverage():
    """A paired keep decided after a few pairs has an interval covering less than 95%, and one
    decided after one pair none at all: the kept-changes table says which."""
    def keep(n: int, ci: list[float], level: float) -> dict:
        return {"t": "cycle", "cycle": n, "status": "keep", "metric": 9.0 - n, "best": 9.0 - n,
                "commit": str(n) * 40, "hypothesis": f"h{n}",
                "stats": {"pooled": {"n": 3 if level else 1, "change_pct": -5.0, "change_ci_pct": ci,
                                     "ci_level": level, "median_a": 10.0 - n}}}
    recs = [{"t": "cycle", "cycle": 0, "status": "baseline", "metric": 10.0, "best": 10.0, "commit": "a" * 40},
            keep(1, [-9.0, -1.0], 0.75), keep(2, [-99.0, -99.0], 0.0)]
    md = markdown(facts(recs, tag="x", goal="g", metric="m", direction="minimize"))
    row1 = next(ln for ln in md.splitlines() if ln.startswith("| 1 |"))
    row2 = next(ln for ln in md.splitlines() if ln.startswith("| 2 |"))
    assert "[75% CI -9.00% … -1.00%]" in row1
    assert "[" not in row2 and "-99.00%" not in row2


def test_empty_run_renders():
    f = facts([], tag="x", goal="", metric="m", direction="maximize")
    html = render(f, generated="now")
    assert "<svg" in html and "class=\"mark" not in html


# ---- a real browser ---------------------------------------------------------------------------------


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Decode an 8-bit RGB/RGBA PNG (what Chromium writes) into rows of raw pixels."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            w, h, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6)
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, bpp, rows


def screenshot(html: Path, png: Path, size: str = "1200,1100") -> None:
    browser = _chromium()
    if browser is None:
        pytest.skip("Chromium is not installed (apt-get install -y chromium; .ci/run installs it)")
    profile = png.parent / "chromium-profile"
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--no-first-run", "--hide-scrollbars", f"--user-data-dir={profile}", f"--window-size={size}",
           f"--screenshot={png}", html.as_uri()]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "HOME": str(png.parent)})
    assert png.exists(), res.stderr[-2000:]


def test_renders_in_headless_chromium_and_is_not_blank(report_file, tmp_path):
    png = tmp_path / "shot.png"
    screenshot(report_file, png)
    w, bpp, rows = _png_pixels(png.read_bytes())
    assert w == 1200 and len(rows) == 1100
    colors: set[bytes] = set()
    non_bg = 0
    for row in rows[::4]:
        for x in range(0, len(row), bpp * 4):
            px = row[x:x + 3]
            colors.add(px)
            if px not in (b"\xf8\xfa\xfc", b"\xff\xff\xff"):
                non_bg += 1
    assert len(colors) > 50, len(colors)            # text, dots, lines: not a blank page
    assert non_bg > 2000, non_bg
    # the status colours of the chart's dots are on the page
    want = {bytes.fromhex(STATUS_COLORS[s][1:]) for s in ("keep", "baseline", "crash")}
    seen = {row[x:x + 3] for row in rows for x in range(0, len(row), bpp)}
    assert want <= seen, [c.hex() for c in want - seen]
