"""What a sandboxed run's failure says: that bubblewrap stopped on a host that changed under its
set-up (`stale`: the command never ran, start it again), or what to set for a measurement that
wanted a writable path or the network (`failure_hint`)."""

from __future__ import annotations

import os
import re

from autoloop.base.walk import under
from autoloop.process.logfile import read_regular
from autoloop.process.proc import ProcResult

# bwrap's words when it cannot make a mount point (setup_newroot in bubblewrap.c)
_NO_MOUNT_POINT = ("Can't mkdir parents for", "Can't create file at", "Can't mkdir")


def stale(argv: list[str], res: ProcResult) -> bool:
    """Whether bwrap stopped before the command ran, unable to make the mount point of a path
    `argv` hides (a host socket, a daemon's, a credential file or folder) that is gone from the host
    now: the host changed between the line's making and bwrap's set-up (a service removed its
    socket's folder), which is no failure of the command's; proc.run_wrapped starts it again. A
    command can print bwrap's words, but not remove such a path: none is under a writable bind."""
    if res.exit_code != 1:   # bwrap's die()
        return False
    first = read_regular(res.stderr_path, 4096).decode("utf-8", "replace").split("\n", 1)[0]
    opts = argv[:argv.index("--")] if "--" in argv else argv   # bwrap's, not the command's words
    writable = [opts[i + 2] for i, a in enumerate(opts[:-2]) if a == "--bind"]
    hidden = [opts[i + 2] for i, a in enumerate(opts[:-2]) if a == "--ro-bind" and opts[i + 1] == "/dev/null"]
    hidden += [opts[i + 1] for i, a in enumerate(opts[:-1]) if a == "--tmpfs"]   # a hidden folder
    for path in hidden:
        if (any(first.startswith(f"bwrap: {verb} {path}:") for verb in _NO_MOUNT_POINT)
                and not os.path.lexists(path) and not any(under(path, w) for w in writable)):
            return True
    return False


_REFUSED = re.compile(r"autoloop refused (\S+):")
_READ_ONLY = re.compile(r"Read-only file system|EROFS|\[Errno 30\]")
_NO_NETWORK = re.compile(r"Temporary failure in name resolution|Name or service not known|"
                         r"Could not resolve host|Network is unreachable|getaddrinfo|"
                         r"\[Errno -[23]\]|\[Errno 101\]|No address associated with hostname")


def failure_hint(output: str, *, network: bool) -> str | None:
    """What to set when a sandboxed measurement failed for want of a writable path or the
    network (read from the tail of its output), or None."""
    m = _READ_ONLY.search(output)
    if m is not None:
        line = next((ln for ln in output.splitlines() if m.group(0) in ln), "")
        path = re.search(r"'(/[^']+)'", line) or re.search(r"(/[^\s:'\"]+)", line)
        where = f" ({path.group(1)})" if path else ""
        return ("the measurement sandbox keeps everything but the verification tree and its temp "
                f"folder read-only{where}; if the command must write there, add the path to "
                "sandbox.writable")
    if not network and _NO_NETWORK.search(output):
        return "the measurement sandbox has no network; set verifier.network: true if it needs one"
    refused = _REFUSED.search(output)
    if network and refused:
        return f"autoloop's egress proxy refused {refused.group(1)}; add it to verifier.hosts if the measurement needs it"
    if network and _NO_NETWORK.search(output):
        return ("the measurement reaches the network only through autoloop's egress proxy (HTTPS_PROXY): "
                "a tool that ignores the proxy variables cannot resolve names or connect")
    return None
