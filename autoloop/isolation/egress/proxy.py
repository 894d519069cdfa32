"""The egress proxy: threads in autoloop's own process, in the host's network namespace. A
sandbox's launcher (autoloop.isolation.egress.launch) hands it a listening socket made inside the
sandbox's namespace; every connection accepted there is an HTTP request for the proxy: CONNECT
host:port (a tunnel) or a plain request with an absolute URI (forwarded, `Connection: close`).
Each target is decided by the sandbox's Policy before any packet leaves; refusals get a 403 and
are counted per sandbox label and host:port."""

from __future__ import annotations

import os
import secrets
import socket
import threading
from collections import Counter
from dataclasses import dataclass, field

from urllib.parse import urlsplit

from autoloop.isolation.egress.policy import Decision, Policy, Resolver, system_resolve

PORT = 3128              # inside every sandbox's own namespace: nothing else is there
_HEAD_LIMIT = 64 << 10
_BUFFER = 256 << 10
_CONNECT_TIMEOUT_S = 30.0
_HOP = {"proxy-connection", "proxy-authorization", "connection", "keep-alive"}


@dataclass
class Lease:
    """One sandbox's use of the proxy: what it may reach, and what it was refused."""
    policy: Policy
    label: str
    key: str = "sandbox.hosts"      # where the user widens it, said in a refusal
    refused: Counter[str] = field(default_factory=Counter)
    allowed: Counter[str] = field(default_factory=Counter)
    done: bool = False        # its sandbox has ended


class EgressProxy:
    def __init__(self, resolve: Resolver = system_resolve) -> None:
        self.resolve = resolve
        self.name = f"autoloop-egress-{os.getpid()}-{secrets.token_hex(8)}"   # abstract: no file
        self._leases: dict[bytes, Lease] = {}
        self._lock = threading.Lock()
        self._control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._control.bind("\0" + self.name)
        self._control.listen(64)
        self._closed = False
        threading.Thread(target=self._serve_control, name="egress-control", daemon=True).start()

    def lease(self, policy: Policy, label: str, key: str = "sandbox.hosts") -> bytes:
        """A token for one sandbox launch (passed to its launcher)."""
        token = secrets.token_hex(16).encode()
        with self._lock:
            self._leases[token] = Lease(policy, label, key)
        return token

    def take(self, label: str) -> dict[str, int]:
        """host:port → refusals, most first, summed over the sandboxes of `label` (a cycle's log
        folder, "verifier"), counted afresh from now; the leases of sandboxes gone are forgotten."""
        out: Counter[str] = Counter()
        with self._lock:
            for token, lease in list(self._leases.items()):
                if lease.label == label:
                    out.update(lease.refused)
                    lease.refused.clear()
                    if lease.done:
                        del self._leases[token]
        return dict(out.most_common())

    def close(self) -> None:
        self._closed = True
        try:
            self._control.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._control.close()

    # ---- the launchers' control connections ------------------------------------------------------

    def _serve_control(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._control.accept()
            except OSError:
                return
            threading.Thread(target=self._adopt, args=(conn,), name="egress-lease", daemon=True).start()

    def _adopt(self, conn: socket.socket) -> None:
        listener: socket.socket | None = None
        lease: Lease | None = None
        with conn:
            try:
                creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
                uid = int.from_bytes(creds[4:8], "little")
                if uid != os.geteuid():
                    return   # another user's process found the name: nothing for it
                msg, fds, _, _ = socket.recv_fds(conn, 1024, 1)
                if not fds:
                    return
                listener = socket.socket(fileno=fds[0])
                for extra in fds[1:]:
                    os.close(extra)
                with self._lock:
                    lease = self._leases.get(msg[1:]) if msg.startswith(b"L") else None
                if lease is None:
                    conn.sendall(b"no: unknown sandbox\n")
                    return
                threading.Thread(target=self._accept, args=(listener, lease), name="egress-listen",
                                 daemon=True).start()
                conn.sendall(b"ok\n")
                conn.recv(1)   # until the launcher ends: its sandbox is gone
            except OSError:
                pass
            finally:
                if lease is not None:
                    lease.done = True
                if listener is not None:
                    try:
                        listener.shutdown(socket.SHUT_RDWR)   # wakes its accept
                    except OSError:
                        pass
                    listener.close()

    def _accept(self, listener: socket.socket, lease: Lease) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(client, lease), name="egress-conn", daemon=True).start()

    # ---- one request ---------------------------------------------------------------------------

    def _handle(self, client: socket.socket, lease: Lease) -> None:
        upstream: socket.socket | None = None
        try:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            head, rest = _read_head(client)
            if head is None:
                return
            line, _, headers = head.partition(b"\r\n")
            try:
                method, target, version = line.decode("latin-1").split(" ")
            except ValueError:
                client.sendall(_answer(400, "not an HTTP request"))
                return
            if method == "CONNECT":
                host, port = _split_authority(target, 443)
            else:
                parts = urlsplit(target)
                if parts.scheme != "http" or not parts.hostname:
                    client.sendall(_answer(400, "a proxy request names an absolute http:// URI"))
                    return
                host, port = parts.hostname, parts.port or 80
            decision = lease.policy.decide(host, port, self.resolve) if port else Decision(False, host, 0,
                                                                                          reason="bad port")
            if not decision.allowed:
                with self._lock:
                    lease.refused[decision.target] += 1
                client.sendall(_answer(403, f"autoloop refused {decision.target}: {decision.reason}; "
                                            f"add it to {lease.key} if it is needed"))
                return
            upstream = _dial(decision)
            with self._lock:
                lease.allowed[decision.target] += 1
            if method == "CONNECT":
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                if rest:
                    upstream.sendall(rest)
            else:
                path = parts.path or "/"
                path += f"?{parts.query}" if parts.query else ""
                kept = [h for h in headers.split(b"\r\n") if h and
                        h.split(b":", 1)[0].strip().lower().decode("latin-1") not in _HOP]
                upstream.sendall(b"\r\n".join([f"{method} {path} {version}".encode("latin-1"), *kept,
                                               b"Connection: close", b"", b""]) + rest)
            _pump(client, upstream)
        except OSError as exc:
            try:
                client.sendall(_answer(502, f"autoloop's proxy could not connect: {exc}"))
            except OSError:
                pass
        finally:
            client.close()
            if upstream is not None:
                upstream.close()


def _read_head(sock: socket.socket) -> tuple[bytes | None, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > _HEAD_LIMIT:
            return None, b""
        chunk = sock.recv(65536)
        if not chunk:
            return None, b""
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _split_authority(text: str, default: int) -> tuple[str, int]:
    if text.startswith("["):
        host, _, port = text[1:].partition("]")
        port = port.lstrip(":")
    else:
        host, _, port = text.rpartition(":") if ":" in text else (text, "", "")
    return host, int(port) if port.isdigit() else (default if not port else 0)


def _dial(decision: Decision) -> socket.socket:
    last: OSError | None = None
    for addr in decision.addresses:   # only the addresses the policy checked
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(_CONNECT_TIMEOUT_S)
        try:
            sock.connect((addr, decision.port))
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError as exc:
            sock.close()
            last = exc
    raise last or OSError(f"no address for {decision.target}")


def _answer(code: int, text: str) -> bytes:
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[code]
    body = (text + "\n").encode()
    return (f"HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode() + body


def _pump(a: socket.socket, b: socket.socket) -> None:
    """Copy both ways until both sides are done (a half-close is passed on)."""
    other = threading.Thread(target=_copy, args=(b, a), name="egress-down", daemon=True)
    other.start()
    _copy(a, b)
    other.join()


def _copy(src: socket.socket, dst: socket.socket) -> None:
    buf = bytearray(_BUFFER)
    view = memoryview(buf)
    try:
        while True:
            n = src.recv_into(buf)
            if not n:
                break
            dst.sendall(view[:n])
    except OSError:
        pass
    finally:
        _shut(dst, socket.SHUT_WR)


def _shut(sock: socket.socket, how: int) -> None:
    try:
        sock.shutdown(how)
    except OSError:
        pass


