"""Regenerate every transcript the documentation quotes from the quickstart, and the report image,
from one fresh run: the quickstart's files as committed at HEAD, in a new repository, then

    autoloop doctor examples/quickstart/program.md
    autoloop run examples/quickstart/program.md --tag demo --cycles 20
    autoloop log examples/quickstart/program.md
    autoloop report examples/quickstart/program.md      (rendered by headless Chromium)

Each quoted transcript sits between `<!-- transcript: NAME … -->` and `<!-- /transcript -->` in
docs/quickstart.md, docs/install.md, docs/reference/commands.md and README.md; docs/report.png is the screenshot.
The clone's path is shown as ~/autoloop, the journal's relative to it. `--check` changes nothing and
exits 1 when a quoted transcript's numbers or statuses differ from the fresh run's (times and
commit hashes differ from run to run and are not compared); tests/test_docs_transcripts.py does the same.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = (ROOT / "docs" / "quickstart.md", ROOT / "docs" / "install.md", ROOT / "docs" / "reference" / "commands.md",
         ROOT / "README.md")
IMAGE = ROOT / "docs" / "report.png"
PROGRAM = "examples/quickstart/program.md"
BLOCK = re.compile(r"(<!-- transcript: ([\w-]+)[^\n]*-->\n```text\n)(.*?)(```\n<!-- /transcript -->)", re.S)
# what differs from one run of the same search to the next: durations and commits
_VARYING = [re.compile(p) for p in (r"\b\d+(?:\.\d+)?s\b", r"\b\d+m\d+s\b", r"\[[^\]]*verifier runs?[^\]]*\]",
                                    r"\b[0-9a-f]{12}\b", r"\d+(?:\.\d+)? s\b")]


def _env(home: Path, tmp: Path) -> dict[str, str]:
    """A fresh machine's: its own home, and its own temp folder, so that what other autoloop
    processes left in the shared one (a test suite's killed runs) is not in doctor's transcript."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOLOOP_", "GIT_", "CI"))}
    env.update(HOME=str(home), TMPDIR=str(tmp), NO_COLOR="1", COLUMNS="120", GIT_AUTHOR_NAME="autoloop docs",
               GIT_AUTHOR_EMAIL="docs@localhost", GIT_COMMITTER_NAME="autoloop docs",
               GIT_COMMITTER_EMAIL="docs@localhost")
    return env


def quickstart(work: Path) -> dict[str, str]:
    """Run the quickstart in a fresh repository under `work`; every quotable output by name, and
    the report's HTML path under `report-html`."""
    repo, home, tmp = work / "repo", work / "home", work / "tmp"
    repo.mkdir(parents=True)
    home.mkdir()
    tmp.mkdir()
    env = _env(home, tmp)
    files = subprocess.run(["git", "archive", "HEAD", "examples/quickstart"], cwd=ROOT, capture_output=True,
                           check=True).stdout
    subprocess.run(["tar", "-x"], cwd=repo, input=files, check=True)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "the quickstart"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True)

    def autoloop(*args: str) -> str:
        res = subprocess.run([sys.executable, "-m", "autoloop", *args], cwd=repo, env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=1800)
        if res.returncode != 0:
            raise RuntimeError(f"autoloop {' '.join(args)} exited {res.returncode}:\n{res.stdout[-3000:]}")
        # paths as they read in any clone: relative to the repository, or under ~/autoloop
        return res.stdout.replace(f"{repo}/", "").replace(str(repo), "~/autoloop")

    doctor = autoloop("doctor", PROGRAM)
    run = autoloop("run", PROGRAM, "--tag", "demo", "--cycles", "20")
    log = autoloop("log", PROGRAM)
    report = work / "report.html"
    autoloop("report", PROGRAM, "-o", str(report))
    return {"quickstart-doctor": doctor.rstrip("\n") + "\n", "quickstart-run": run.rstrip("\n") + "\n",
            "quickstart-log": log.rstrip("\n") + "\n", "quickstart-run-short": _short(run),
            "report-html": str(report)}


def _short(run: str) -> str:
    """The run's transcript for the README: the baseline, cycle 2 (a discard, as an example), the
    keeps and the last lines; "…" for the cycles between."""
    out: list[str] = []
    for line in run.rstrip("\n").splitlines():
        m = re.match(r"cycle\s+(\d+)\s+(\S+)", line)
        if m and ("measuring" in line or "end-of-run" in line):
            continue
        if m and m.group(2) not in ("baseline", "keep") and m.group(1) != "2":
            if out and out[-1] != "…":
                out.append("…")
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def normalised(text: str) -> list[str]:
    """What two runs of the quickstart must agree on: every number (values, changes, counts) and
    every status, in order, without what changes from run to run (durations and commits) or from
    machine to machine in wording."""
    for pattern in _VARYING:
        text = pattern.sub("…", text)
    return re.findall(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?%?|\b(?:baseline|keep|discard|crash|guard_fail|violation"
                      r"|no_change|gen_error|ok|warn|FAIL)\b", text)


def quoted(page: Path) -> dict[str, str]:
    return {m.group(2): m.group(3) for m in BLOCK.finditer(page.read_text(encoding="utf-8"))}


def write(page: Path, outputs: dict[str, str]) -> None:
    text = BLOCK.sub(lambda m: m.group(1) + outputs[m.group(2)] + m.group(4), page.read_text(encoding="utf-8"))
    page.write_text(text, encoding="utf-8")


def screenshot(html: Path, png: Path) -> None:
    browser = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
    if browser is None:
        raise SystemExit("Chromium is needed for the report's screenshot (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--no-first-run", "--disable-background-networking", f"--user-data-dir={profile}",
                        "--window-size=1200,1000", f"--screenshot={png}", html.as_uri()],
                       capture_output=True, timeout=120, env={**os.environ, "HOME": profile}, check=True)


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="autoloop-docs-") as work:
        outputs = quickstart(Path(work))
        if "--check" in argv:
            stale = [f"{page.name}: {name}" for page in PAGES for name, text in quoted(page).items()
                     if normalised(text) != normalised(outputs[name])]
            if stale:
                print("differs from a fresh run: " + ", ".join(stale), file=sys.stderr)
                return 1
            return 0
        for page in PAGES:
            write(page, outputs)
        screenshot(Path(outputs["report-html"]), IMAGE)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
