"""The four ways an installation records that it points into a source checkout, each found."""

from __future__ import annotations

import json
import os
from pathlib import Path

from autoloop.editable import pointers


def test_every_kind_of_editable_record_is_found(tmp_path: Path) -> None:
    site, repo = tmp_path / "site", tmp_path / "repo"
    (repo / "src" / "pkg").mkdir(parents=True)
    site.mkdir()
    (site / "__editable__.a-1.0.pth").write_text(f"# comment\nimport os\n{repo / 'src'}\n")
    (site / "__editable___b_1_0_finder.py").write_text(
        f"MAPPING: dict[str, str] = {{'pkg': {str(repo / 'src' / 'pkg')!r}}}\nNAMESPACES = {{}}\n")
    (site / "c.egg-link").write_text(f"{repo}\n.\n")
    dist = site / "d-1.0.dist-info"
    dist.mkdir()
    (dist / "direct_url.json").write_text(json.dumps({"url": f"file://{repo}", "dir_info": {"editable": True}}))
    other = site / "e-1.0.dist-info"
    other.mkdir()
    (other / "direct_url.json").write_text(json.dumps({"url": f"file://{repo}", "dir_info": {}}))
    (site / "relative.pth").write_text("somewhere\n")
    found = {(w.name, t) for w, t in pointers(site)}
    real = os.path.realpath
    assert (("__editable__.a-1.0.pth", real(repo / "src")) in found
            and ("__editable___b_1_0_finder.py", real(repo / "src" / "pkg")) in found
            and ("c.egg-link", real(repo)) in found
            and ("direct_url.json", real(repo)) in found)
    # a non-editable direct_url and an `import` line point nowhere; a relative line is the site's
    assert ("relative.pth", real(site / "somewhere")) in found
    assert len(found) == 5, found
