"""The four ways an installation records that it points into a source checkout, each found."""

from __future__ import annotations

import json
import os
from pathlib import Path

from autoloop.isolation.editable import pointers


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


def test_only_installations_that_reach_an_allowed_path_count(tmp_path: Path) -> None:
    """An editable install the generator cannot change (autoloop's own package, beside a
    quickstart whose allowed file is elsewhere) measures nothing wrong; one whose folder holds an
    allowed path, or the root on sys.path, would measure the checkout instead of the candidate."""
    from autoloop.isolation.editable import _reaches

    assert not _reaches("autoloop", ["examples/quickstart/train.py"])
    assert not _reaches("src/other", ["src/pkg/**"])
    assert _reaches("src/pkg", ["src/pkg/core.py"])
    assert _reaches("src", ["src/pkg/**"])
    assert _reaches("src/pkg/sub", ["src/pkg/**"])
    assert _reaches("", ["train.py"])                 # a .pth naming the checkout's root
    assert _reaches("pkg", ["**/*.py"])               # a wildcard at the top reaches everywhere
    assert _reaches("mod.py", ["mod.py"])             # a finder mapping one module file
