"""Every page of the built site, opened in headless Chromium at 1280 px (three also dark): no console
error (the fonts are not fetched at all, so no blocked-font error is excused either), no request to
any host but the local server the site is served from, and no code block or table wider than its
box. Skips, saying why, where Chromium is missing (.ci/run installs it)."""

from __future__ import annotations

import functools
import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs_browser import Browser, chromium

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[str], Path]]:
    """The site built into a temp folder and served on 127.0.0.1 (a page's search worker and
    fetches need http, not file://); its URL, the path of every page, and the served folder."""
    pytest.importorskip("material", reason="mkdocs-material is in the test extra")
    if chromium() is None:
        pytest.skip("Chromium is not installed (apt-get install -y chromium; .ci/run installs it)")
    out = tmp_path_factory.mktemp("site")
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)], cwd=ROOT,
                         capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1",
                                                              "HOME": str(out.parent)})
    assert res.returncode == 0, res.stderr
    handler = functools.partial(_Quiet, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    pages = sorted(str(p.parent.relative_to(out)).replace(".", "") + "/" for p in out.rglob("index.html")
                   if "assets" not in p.parts and "search" not in p.parts)
    try:
        yield f"http://127.0.0.1:{server.server_port}/", pages, out
    finally:
        server.shutdown()
        thread.join()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.mark.slow   # the site built, every page rendered in headless Chromium
def test_every_page_opens_without_errors_or_fetches_and_fits(site: tuple[str, list[str], Path], tmp_path: Path) -> None:
    base, pages, _ = site
    assert len(pages) >= 25, pages
    problems = []
    # the dark scheme is the same page in other colours: three pages say it loads, in a profile
    # of its own (Material keeps the scheme a profile first saw)
    for dark, some in ((False, pages), (True, pages[:3])):
        with Browser(tmp_path / f"profile-{dark}") as browser:
            for page in some:
                report = browser.open(base + page.lstrip("/"), dark=dark)
                where = f"{page} ({'dark' if dark else 'light'})"
                assert report.scheme == ("slate" if dark else "default"), (where, report.scheme)
                problems += [f"{where}: {e}" for e in report.errors]
                problems += [f"{where}: fetched {u}" for u in report.external]
                problems += [f"{where}: wider than its box: {o}" for o in report.overflowing]
    assert not problems, "\n".join(problems)


def test_the_browser_check_sees_errors_fetches_and_overflow(site: tuple[str, list[str], Path], tmp_path: Path) -> None:
    """The same check on a page made to fail each way: a console error, a web font, a code line
    that cannot wrap in a Material-styled box."""
    base, _, served = site
    bad = served / "bad.html"
    bad.write_text('<html><head><link rel="stylesheet" href="https://fonts.googleapis.com/css?family=Roboto">'
                   '</head><body><div class="md-content"><pre style="width:100px;overflow:auto;white-space:pre">'
                   '<code style="display:block;overflow:auto;width:100px;white-space:pre">' + "x" * 300 + '</code></pre></div>'
                   '<script>console.error("planted")</script></body></html>')
    with Browser(tmp_path / "profile") as browser:
        report = browser.open(base + "bad.html")
    assert any("planted" in e for e in report.errors), report.errors
    assert report.external == ["https://fonts.googleapis.com/css?family=Roboto"]
    assert report.overflowing, report



PHONE = 390   # px: a small phone held upright


@pytest.mark.slow   # the widest pages rendered in headless Chromium at a phone's width
def test_on_a_phone_wide_tables_scroll_inside_their_box_not_the_page(site: tuple[str, list[str], Path],
                                                                       tmp_path: Path) -> None:
    """At 390 px the pages with the widest tables and code do not scroll sideways: a table wider
    than the screen scrolls inside its own box (docs/stylesheets/extra.css)."""
    base, pages, _ = site
    wide = ["trust/hacks/", "contributing/code-map/", "contributing/tests/", "contributing/performance/",
            "contributing/trial/", "reference/program/", "reference/commands/", "how-to/troubleshooting/",
            "install/", "tutorial/", "glossary/"]
    assert set(wide) <= set(p.lstrip("/") for p in pages), sorted(pages)
    problems = []
    with Browser(tmp_path / "profile", width=PHONE, height=800) as browser:
        for page in wide:
            report = browser.open(base + page)
            problems += [f"{page}: {e}" for e in report.errors]
            if report.page_width > PHONE:
                problems.append(f"{page}: the page is {report.page_width} px wide at {PHONE} px")
    assert not problems, "\n".join(problems)
