"""Which host:port a sandboxed process may reach through the egress proxy: a pure decision over
an allowlist and a resolver (the proxy resolves; the sandbox has no resolver). Nothing here
sends a packet: the tests show every refusal by calling `decide` with a fake resolver."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from autoloop.base.hosts import IP, Rule, address, normal_host

Resolver = Callable[[str, int], Sequence[str]]


@dataclass(frozen=True)
class Decision:
    allowed: bool
    host: str
    port: int
    addresses: tuple[str, ...] = ()   # where to connect: checked here, never resolved again
    reason: str = ""                  # why refused (a sentence for the agent and the log)

    @property
    def target(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def special(addr: IP) -> str | None:
    """Why an address is not the public internet (None: it is): the host's own loopback, the
    link-local range (cloud metadata at 169.254.169.254), private networks and the like."""
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return special(addr.ipv4_mapped)
    if addr.is_loopback:
        return "loopback"
    if addr.is_link_local:
        return "link-local"
    if addr.is_unspecified or addr.is_multicast or addr.is_reserved:
        return "not routable"
    if addr.is_private or (isinstance(addr, ipaddress.IPv4Address) and addr in _SHARED):
        return "private"
    return None


_SHARED = ipaddress.ip_network("100.64.0.0/10")   # carrier-grade NAT: a provider's inside


@dataclass(frozen=True)
class Policy:
    rules: tuple[Rule, ...]

    def decide(self, host: str, port: int, resolve: Resolver) -> Decision:
        """Allowed only when a rule lists host:port; an address the name resolves to (or the
        address asked for) that is loopback, link-local, private or otherwise not public is
        used only when a rule lists that very address. Resolution happens here, once: the
        proxy connects to `addresses`, so a name cannot resolve to something else later."""
        host = normal_host(host)
        if not host or not 0 < port < 65536:
            return Decision(False, host or "?", port, reason="not a host and port")
        literal = address(host)
        # an address is listed only as itself: `*.0.1` names no address
        if not any(r.matches(host, port) and not (r.wildcard and literal is not None) for r in self.rules):
            return Decision(False, host, port, reason="not in the allowlist (sandbox.hosts)")
        if literal is not None:
            return Decision(True, host, port, (host,))   # listed by address: its own choice
        try:
            found = list(dict.fromkeys(resolve(host, port)))
        except OSError as exc:
            return Decision(False, host, port, reason=f"does not resolve ({exc})")
        listed = {r.host for r in self.rules if not r.wildcard and port in r.ports}
        good, bad = [], []
        for text in found:
            addr = address(text)
            kind = "not an address" if addr is None else special(addr)
            if kind is None or str(addr) in listed:
                good.append(str(addr))
            else:
                bad.append(f"{text} ({kind})")
        if not good:
            why = f"resolves to {', '.join(bad)}, not listed by address" if bad else "does not resolve"
            return Decision(False, host, port, reason=why)
        return Decision(True, host, port, tuple(good))

    def describe(self) -> list[str]:
        return [f"{r}  ({r.why})" for r in self.rules]


def policy(rules: Iterable[Rule]) -> Policy:
    seen: dict[tuple[str, bool], Rule] = {}
    for r in rules:
        key = (r.host, r.wildcard)
        old = seen.get(key)
        seen[key] = r if old is None else Rule(r.host, tuple(dict.fromkeys(old.ports + r.ports)), r.wildcard,
                                              old.why if r.why == old.why else f"{old.why}; {r.why}")
    return Policy(tuple(seen.values()))


def system_resolve(host: str, port: int) -> list[str]:
    return [info[4][0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
