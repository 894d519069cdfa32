"""What an installed program needs to start inside a sandbox that hides its folder: real
layouts (an npm prefix's .bin symlink, a venv made by `python -m venv`, `#!/usr/bin/env`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from autoloop.process.executables import installation_root, needed_paths


def _npm_prefix(tmp_path: Path) -> tuple[Path, Path]:
    # The layout `npm install --prefix P pkg` makes: .bin/x -> ../pkg/bin/x.js, a node script.
    prefix = tmp_path / "prefix"
    pkg = prefix / "node_modules" / "@scope" / "tool"
    (pkg / "bin").mkdir(parents=True)
    (pkg / "node_modules" / "dep").mkdir(parents=True)
    script = pkg / "bin" / "tool.js"
    script.write_text("#!/usr/bin/env node\nconsole.log('hi')\n")
    script.chmod(0o755)
    bin_dir = prefix / "node_modules" / ".bin"
    bin_dir.mkdir()
    (bin_dir / "tool").symlink_to("../@scope/tool/bin/tool.js")
    node_home = tmp_path / "node" / "bin"
    node_home.mkdir(parents=True)
    (tmp_path / "node" / "lib").mkdir()
    node = node_home / "node"
    node.write_text("#!/bin/sh\n")
    node.chmod(0o755)
    return bin_dir / "tool", node_home


def test_npm_bin_symlink_needs_its_package_folder_and_node(tmp_path: Path) -> None:
    link, node_home = _npm_prefix(tmp_path)
    got = needed_paths(link, path_env=str(node_home))
    modules = tmp_path / "prefix" / "node_modules"
    assert link in got and link.parent in got
    assert Path(os.path.realpath(link)) in got
    assert modules in got                      # the whole prefix's node_modules, not the nested one
    assert node_home / "node" in got           # the `env node` PATH finds
    assert tmp_path / "node" in got            # and its installation (bin + lib)


def test_venv_script_needs_the_venv_and_its_interpreter(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    script = venv / "bin" / "tool"
    script.write_text(f"#!{venv / 'bin' / 'python'}\nimport sys\n")
    script.chmod(0o755)
    got = needed_paths(script)
    assert venv in got                         # pyvenv.cfg + lib/…/site-packages
    assert venv / "bin" / "python" in got
    real_python = Path(os.path.realpath(venv / "bin" / "python"))
    assert real_python in got                  # what the venv's python symlink resolves to


def test_system_programs_have_no_installation_root_to_bind() -> None:
    # /usr is visible read-only in the sandbox already; binding it again would be pointless
    assert installation_root(Path("/usr/bin/env")) is None


def test_missing_or_odd_executables_give_what_exists(tmp_path: Path) -> None:
    assert needed_paths(tmp_path / "nope") == [tmp_path]
    loop = tmp_path / "loop"
    loop.write_text(f"#!{loop}\n")             # its own interpreter: the depth bound ends it
    loop.chmod(0o755)
    assert needed_paths(loop) == [loop, tmp_path]
    env_only = tmp_path / "envonly"
    env_only.write_text("#!/usr/bin/env\n")
    assert needed_paths(env_only, path_env="") == [env_only, tmp_path]
