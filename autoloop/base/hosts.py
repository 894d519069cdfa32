"""Allowlist entries for the sandboxes' egress (`sandbox.hosts`, `verifier.hosts`, a preset's API
hosts, a base URL's host), parsed and normalised; decided in autoloop.isolation.egress.policy."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

IP = ipaddress.IPv4Address | ipaddress.IPv6Address
# A name the user lists without a port: the web's two.
DEFAULT_PORTS = (443, 80)


class BadHost(ValueError):
    """A `sandbox.hosts` / `verifier.hosts` entry that is no host, host:port or *.domain."""


@dataclass(frozen=True)
class Rule:
    host: str                  # lower case, no trailing dot; an address in its compressed form
    ports: tuple[int, ...]
    wildcard: bool = False     # `*.example.com`: any name below example.com (not itself)
    why: str = ""              # where it came from: "claude's API", "sandbox.hosts", a URL's variable

    def matches(self, host: str, port: int) -> bool:
        if port not in self.ports:
            return False
        return host.endswith("." + self.host) if self.wildcard else host == self.host

    def __str__(self) -> str:
        name = ("*." if self.wildcard else "") + (f"[{self.host}]" if ":" in self.host else self.host)
        return name + ":" + ",".join(map(str, self.ports))


def normal_host(host: str) -> str:
    host = host.strip().lower().rstrip(".")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    literal = address(host)
    return str(literal) if literal is not None else host


def address(host: str) -> IP | None:
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None


def parse_entry(text: str, why: str = "sandbox.hosts") -> Rule:
    """`host`, `host:port`, `*.domain`, `*.domain:port`, `[v6]:port` or an address."""
    raw = text.strip()
    if not raw or any(c.isspace() for c in raw) or "/" in raw:
        raise BadHost(f"{text!r} is not a host, host:port or *.domain")
    host, ports = raw, DEFAULT_PORTS
    if raw.startswith("["):
        end = raw.find("]")
        if end < 0:
            raise BadHost(f"{text!r}: an IPv6 address in [] needs its closing ]")
        host, rest = raw[1:end], raw[end + 1:]
        if rest:
            ports = (_port(rest[1:] if rest.startswith(":") else "x", text),)
    elif raw.count(":") == 1:
        host, port = raw.split(":")
        ports = (_port(port, text),)
    wildcard = host.startswith("*.")
    if wildcard:
        host = host[2:]
    host = normal_host(host)
    literal = address(host)
    if not host or "*" in host or (literal is None and not all(_label(p) for p in host.split("."))):
        raise BadHost(f"{text!r} is not a host, host:port or *.domain")
    if wildcard and (literal is not None or "." not in host):
        raise BadHost(f"{text!r}: a wildcard names the names below a domain (*.example.com)")
    return Rule(host, ports, wildcard, why)


def _label(part: str) -> bool:
    return 0 < len(part) <= 63 and all(c.isalnum() or c in "-_" for c in part)


def _port(text: str, entry: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise BadHost(f"{entry!r}: the port must be a number from 1 to 65535")
    return int(text)


def url_rule(url: str, why: str) -> Rule | None:
    """The host:port a base URL sends to (None: no URL with a host)."""
    try:
        parts = urlsplit(url.strip())
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host or parts.scheme not in ("http", "https", "ws", "wss"):
        return None
    default = 443 if parts.scheme in ("https", "wss") else 80
    return Rule(normal_host(host), (port or default,), False, why)
