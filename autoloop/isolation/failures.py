"""What a sandboxed measurement's failure says: what to set when it wanted a writable path or
the network (`failure_hint`)."""

from __future__ import annotations

import re

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
