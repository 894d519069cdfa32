"""What no sandbox reads: the home's credential places and the user's `sandbox.hide` paths.

The generator and every measurement see the file system read-only, the home included; a process
that also has the network (an agent CLI) could send a key it read anywhere. So the places where
tools keep credentials are hidden in every sandbox of every home autoloop runs with (`$HOME`, the
account's home in the password database, and with `sudo` the invoking user's): a folder is
replaced by an empty one, a file reads empty. A place that does not exist is skipped, and one
that is a link is hidden where it points. What a command needs from inside one (an agent CLI
installed under `~/.claude/local`) is shown again read-only by the sandbox, by path.

The list is deliberate: credentials, keys and tokens, not configuration tools need to start
(`~/.gitconfig`, `~/.config/pip`, `~/.cache`). The agent presets get a private copy of their own
state (autoloop.generators.agents), so their folders are hidden too.
"""

from __future__ import annotations

import glob
import os
import pwd
import stat
from typing import Iterable, Mapping

# Folders, relative to a home. Keys and agents: ssh, GnuPG, password stores, keyrings, the
# agent CLIs' own state (tokens; the presets get a private copy). Clouds and clusters: AWS,
# Azure, Google Cloud, DigitalOcean, Oracle, Hetzner, IBM, Alibaba, Kubernetes, Docker, Helm
# repositories with passwords, Terraform, Pulumi, rclone, Vault, 1Password, Fly.io, Kaggle,
# Hugging Face (its token; the model cache beside it stays). Code hosts: GitHub's and hub's
# CLIs, glab. Browsers and mail: profiles with cookies and saved passwords. autoloop's own
# store: the workloads `init --trace` recorded, each project's `private` outcomes among them (a
# generator of one project read another's answer keys there; a measurement is shown again the
# `data` and, for the score, the `private` paths its program names).
HOME_FOLDERS = (
    ".ssh", ".gnupg", ".password-store", ".local/share/keyrings", ".local/share/kwalletd",
    ".pki", ".claude", ".codex", ".local/share/autoloop",
    ".aws", ".azure", ".config/gcloud", ".config/doctl", ".oci", ".config/hcloud", ".bluemix",
    ".aliyun", ".kube", ".docker", ".config/helm", ".terraform.d", ".pulumi", ".config/rclone",
    ".config/op", ".fly", ".kaggle", ".config/gh", ".config/hub", ".config/glab-cli",
    ".mozilla", ".thunderbird", ".config/google-chrome", ".config/chromium",
    ".config/BraveSoftware", ".config/microsoft-edge", ".config/vivaldi", ".config/opera",
)
# Files, relative to a home: login and token files of git, package registries, databases and
# the tools above that keep them loose in the home.
HOME_FILES = (
    ".netrc", ".git-credentials", ".config/git/credentials", ".claude.json", ".pypirc", ".npmrc",
    ".yarnrc.yml", ".gem/credentials", ".cargo/credentials", ".cargo/credentials.toml",
    ".vault-token", ".pgpass", ".my.cnf", ".s3cfg", ".boto", ".databrickscfg", ".config/linode-cli",
    ".huggingface/token", ".cache/huggingface/token", ".config/huggingface/token",
)


def homes(environ: Mapping[str, str] | None = None) -> list[str]:
    """The homes autoloop runs with: `$HOME`, this account's home, and under sudo the invoking
    user's (their keys are the ones at stake). Real paths, without repeats."""
    env = os.environ if environ is None else environ
    found = [env.get("HOME", "")]
    try:
        found.append(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:
        pass
    if os.getuid() == 0 and env.get("SUDO_USER"):
        try:
            found.append(pwd.getpwnam(env["SUDO_USER"]).pw_dir)
        except KeyError:
            pass
    real = [os.path.realpath(h) for h in found if h and os.path.isabs(h)]
    return [h for h in dict.fromkeys(real) if h != "/" and os.path.isdir(h)]


def expand(patterns: Iterable[str]) -> list[str]:
    """`sandbox.hide` entries as paths: `~` expanded, `*`, `?` and `[…]` matched now (a pattern
    that matches nothing hides nothing)."""
    out: list[str] = []
    for pattern in patterns:
        full = os.path.expanduser(pattern)
        out += sorted(glob.glob(full)) if glob.has_magic(full) else [full]
    return out


def places(extra: Iterable[str] = (), environ: Mapping[str, str] | None = None) -> list[tuple[str, bool]]:
    """(real path, is a folder) of every place to hide that exists now: the defaults in each
    home, then `extra` (`sandbox.hide`)."""
    env = os.environ if environ is None else environ
    candidates = [os.path.join(h, rel) for h in homes(environ) for rel in (*HOME_FOLDERS, *HOME_FILES)]
    if os.path.isabs(env.get("XDG_DATA_HOME", "")):   # where `init --trace` keeps its store then
        candidates.append(os.path.join(env["XDG_DATA_HOME"], "autoloop"))
    found: dict[str, bool] = {}
    for path in [*candidates, *expand(extra)]:
        if not os.path.lexists(path):    # most are missing: one system call, not realpath's many
            continue
        real = os.path.realpath(path)
        if real != "/" and os.path.exists(real):
            found.setdefault(real, os.path.isdir(real))
    return list(found.items())


def outermost(hidden: Iterable[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """The places not inside another folder listed (hiding that one hides them, and leaves no
    mount point to name them)."""
    hidden = list(hidden)
    folders = [p.rstrip("/") + "/" for p, d in hidden if d]
    return [(p, d) for p, d in hidden if not any(p.startswith(f) for f in folders)]


def bwrap_args(hidden: Iterable[tuple[str, bool]]) -> list[str]:
    """bwrap arguments that hide each place: an empty tmpfs for a folder (tools that write
    there, ssh's known_hosts say, write into nothing that lasts), /dev/null for a file."""
    args: list[str] = []
    for path, folder in hidden:
        args += ["--tmpfs", path] if folder else ["--ro-bind", "/dev/null", path]
    return args


def host_sockets(skip: Iterable[str] = (), table: str = "/proc/net/unix") -> list[str]:
    """The pathname unix sockets bound on this host now (the kernel's table of this network
    namespace), as real paths, but for those under `skip`; abstract ones (`@…`) are not paths
    and go with the sandbox's own network namespace."""
    try:
        with open(table, encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return []
    roots = [r.rstrip("/") + "/" for r in skip]
    found: dict[str, None] = {}
    for path in dict.fromkeys(f[7] for f in (line.split(None, 7) for line in lines) if len(f) == 8):
        if not path.startswith("/") or any(path.startswith(r) for r in roots):
            continue
        try:
            if not stat.S_ISSOCK(os.stat(path).st_mode):
                continue
        except OSError:
            continue
        real = os.path.realpath(path)
        if not any((real + "/").startswith(r) for r in roots):
            found[real] = None
    return list(found)
