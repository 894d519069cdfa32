"""The egress proxy's protocol, with its listener handed over from the host's own namespace (the
launcher does the same from inside a sandbox; tests/isolation/test_egress.py runs that path).
Loopback only."""

from __future__ import annotations

import socket
import threading
from typing import Iterator

import pytest

from autoloop.base.hosts import parse_entry
from autoloop.isolation.egress.policy import policy
from autoloop.isolation.egress.proxy import EgressProxy


class Upstream:
    """A loopback server that records the request it got and answers `answer`."""

    def __init__(self, answer: bytes) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.got: list[bytes] = []
        threading.Thread(target=self._serve, args=(answer,), daemon=True).start()

    def _serve(self, answer: bytes) -> None:
        try:
            while True:
                conn, _ = self.sock.accept()
                with conn:
                    data = b""
                    while b"\r\n\r\n" not in data:
                        data += conn.recv(65536)
                    self.got.append(data)
                    conn.sendall(answer)
        except OSError:
            pass


@pytest.fixture
def proxy() -> Iterator[EgressProxy]:
    px = EgressProxy()
    yield px
    px.close()


def _listen_for(px: EgressProxy, token: bytes) -> tuple[socket.socket, tuple[str, int], bytes]:
    """Hand the proxy a listener as a launcher does; (control connection, its address, answer)."""
    listener = socket.create_server(("127.0.0.1", 0))
    control = socket.socket(socket.AF_UNIX)
    control.connect("\0" + px.name)
    socket.send_fds(control, [b"L" + token], [listener.fileno()])
    answer = control.recv(100)
    address = listener.getsockname()
    listener.close()   # the proxy holds its own copy
    return control, address, answer


def _ask(address: tuple[str, int], request: bytes) -> bytes:
    with socket.create_connection(address, timeout=10) as s:
        s.sendall(request)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data


def test_a_plain_request_is_forwarded_in_origin_form_and_closed(proxy):
    up = Upstream(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi")
    token = proxy.lease(policy([parse_entry(f"127.0.0.1:{up.port}")]), "cycle-1")
    control, address, answer = _listen_for(proxy, token)
    assert answer == b"ok\n"
    said = _ask(address, f"GET http://127.0.0.1:{up.port}/v1/x?y=1 HTTP/1.1\r\nHost: a\r\n"
                         "Proxy-Connection: keep-alive\r\nConnection: keep-alive\r\n\r\n".encode())
    assert said.endswith(b"\r\n\r\nhi")
    head = up.got[0].decode()
    assert head.startswith("GET /v1/x?y=1 HTTP/1.1\r\n") and "Host: a\r\n" in head
    # one host per connection: a kept-alive connection cannot be turned to another host
    assert "Connection: close\r\n" in head and "keep-alive" not in head.lower()
    assert proxy.take("cycle-1") == {}
    control.close()
    up.sock.close()


def test_refusals_are_counted_per_label_and_taken_once(proxy):
    token = proxy.lease(policy([parse_entry("127.0.0.1:1")]), "cycle-2", "sandbox.hosts")
    control, address, _ = _listen_for(proxy, token)
    for _ in range(3):
        said = _ask(address, b"CONNECT 127.0.0.2:443 HTTP/1.1\r\n\r\n")
        assert said.startswith(b"HTTP/1.1 403 Forbidden")
        assert b"autoloop refused 127.0.0.2:443: not in the allowlist" in said and b"sandbox.hosts" in said
    said = _ask(address, b"CONNECT [fe80::1]:80 HTTP/1.1\r\n\r\n")   # decided, never dialled
    assert said.startswith(b"HTTP/1.1 403")
    assert proxy.take("cycle-3") == {}
    assert proxy.take("cycle-2") == {"127.0.0.2:443": 3, "[fe80::1]:80": 1}
    assert proxy.take("cycle-2") == {}
    control.close()


def test_what_is_not_a_proxy_request_gets_a_400(proxy):
    control, address, _ = _listen_for(proxy, proxy.lease(policy([]), "x"))
    assert _ask(address, b"GET /relative HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert _ask(address, b"nonsense\r\n\r\n").startswith(b"HTTP/1.1 400")
    control.close()


def test_an_unknown_sandbox_gets_no_service(proxy):
    _, _, answer = _listen_for(proxy, b"not-a-lease")
    assert answer.startswith(b"no: unknown sandbox")
