"""Black-box: a scripted generator with `sandbox: {kind: bwrap, network: true}` reaches what is
listed through autoloop's egress proxy and nothing else: not a service on the host's loopback,
not an abstract unix socket, not a listener on a loopback address that is not listed (refused by
the proxy, counted in the ledger, said in the lesson and `autoloop log`). Real bwrap, real
processes, traffic only to loopback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
from pathlib import Path
from typing import Iterator

import pytest

from autoloop.errors import ConfigError
from tests.isolation.test_sandbox import PROBLEM
from tests.scripts.e2e import PY, make_project

pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=PROBLEM or "")

PROBES = '''
import socket
res = {}
def attempt(name, fn):
    try:
        res[name] = fn() or "ok"
    except Exception as e:
        res[name] = type(e).__name__
def via_proxy(request):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
    s.sendall(request.encode())
    data = b""
    while (chunk := s.recv(65536)):
        data += chunk
    return data.decode(errors="replace")
api, other, abstract = os.environ["E2E_API"], os.environ["E2E_OTHER"], os.environ["E2E_ABSTRACT"]
attempt("direct", lambda: socket.create_connection(("127.0.0.1", int(api)), timeout=2).close())
def unix():
    s = socket.socket(socket.AF_UNIX)
    s.connect("\\0" + abstract)
attempt("abstract", unix)
attempt("other", lambda: via_proxy(f"CONNECT 127.0.0.2:{other} HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n").splitlines()[0])
attempt("api", lambda: via_proxy(f"GET http://127.0.0.1:{api}/ping HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"))
res["env"] = os.environ.get("HTTPS_PROXY", "")
(OUT / "gen" / "probes.json").write_text(json.dumps(res))
W("val.txt", "30")
hyp("probed the network")
'''


def _serve(sock: socket.socket, answer: bytes) -> None:
    def loop() -> None:
        try:
            while True:
                conn, _ = sock.accept()
                with conn:
                    conn.recv(65536)
                    conn.sendall(answer)
        except OSError:   # closed at the end
            pass

    threading.Thread(target=loop, daemon=True).start()


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    base = tmp_path_factory.mktemp("egress")
    gen = base / "out" / "gen"
    gen.mkdir(parents=True)
    api = socket.create_server(("127.0.0.1", 0))
    other = socket.create_server(("127.0.0.2", 0))
    abstract = socket.socket(socket.AF_UNIX)
    name = f"autoloop-test-{os.getpid()}-{id(base)}"
    abstract.bind("\0" + name)
    abstract.listen(4)
    _serve(api, b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\npong")
    _serve(other, b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nleaked")
    _serve(abstract, b"leaked")
    port = api.getsockname()[1]
    p = make_project(base, {}, records_in=gen,
                     extra=f"sandbox: {{kind: bwrap, network: true, writable: [{gen}], "
                           f"hosts: ['127.0.0.1:{port}']}}")
    p.set_plan({1: PROBES})
    p.env.update(E2E_API=str(port), E2E_OTHER=str(other.getsockname()[1]), E2E_ABSTRACT=name)
    res = p.run("--cycles", "1")
    probes = json.loads((gen / "probes.json").read_text()) if (gen / "probes.json").exists() else {}
    yield p, res, probes, other.getsockname()[1]
    for s in (api, other, abstract):
        s.close()


def test_only_the_listed_host_is_reached_through_the_proxy(probed):
    p, res, probes, other = probed
    assert res.returncode == 0, res.stdout + res.stderr
    assert probes["env"] == "http://127.0.0.1:3128"
    assert probes["api"].startswith("HTTP/1.1 200 OK") and probes["api"].endswith("pong"), probes
    assert probes["direct"] == "ConnectionRefusedError", probes    # the host's loopback is not there
    # abstract sockets belong to a namespace; the seccomp filter refuses the unix socket even sooner
    assert probes["abstract"] in ("ConnectionRefusedError", "PermissionError"), probes
    assert probes["other"] == "HTTP/1.1 403 Forbidden", probes     # not listed: refused by the proxy


def test_refusals_are_counted_in_the_ledger_the_lesson_and_the_log(probed):
    p, res, probes, other = probed
    ledger = [json.loads(line) for line in p.ledger_lines() if line.strip()]
    cycle = [r for r in ledger if r.get("t") == "cycle" and r["cycle"] == 1][0]
    assert cycle["blocked"] == {f"127.0.0.2:{other}": 1}
    assert f"Blocked 127.0.0.2:{other} once: add it to sandbox.hosts if the agent needs it." in cycle["lesson"]
    log = p.cli("log", "program.md", "--tag", p.tag, "--wide")
    assert f"⊘ generator blocked: 127.0.0.2:{other} ×1" in log.stdout, log.stdout + log.stderr


def test_no_egress_proxy_fails_closed_before_the_first_cycle(tmp_path, monkeypatch):
    from autoloop.isolation import sandbox
    from autoloop.program.reader import parse_program

    text = ("---\ngoal: g\nallowed: [a.py]\nverifier: {command: echo, metric: m, direction: minimize}\n"
            "generator: {kind: claude}\nsandbox: bwrap\n---\n")
    program = parse_program(text, tmp_path / "program.md", tmp_path)

    def broken(self: object) -> None:
        raise OSError("Address already in use")

    monkeypatch.setattr(sandbox.EgressProxy, "__init__", broken)
    with pytest.raises(ConfigError, match=r"program.md:6: sandbox: autoloop's egress proxy cannot start: "
                                          r"Address already in use; sandbox: none runs without a sandbox"):
        sandbox.probed(program)


def test_a_launcher_that_cannot_reach_the_proxy_runs_nothing(tmp_path):
    from autoloop.isolation.egress import launch

    marker = tmp_path / "ran"
    res = subprocess.run([PY, "-I", "-S", launch.__file__, "no-such-proxy", "t", "3128", "bwrap", "--ro-bind", "/", "/",
                          "--", "/bin/sh", "-c", f"touch {marker}"], capture_output=True, text=True, timeout=60)
    assert res.returncode == launch.SETUP_FAILED and "egress proxy is not running" in res.stderr
    assert not marker.exists()
    assert Path(launch.__file__).read_text().count("import autoloop") == 0   # runs before autoloop is importable


def test_a_measurement_refused_by_the_proxy_is_told_which_key():
    from autoloop.isolation.failures import failure_hint

    said = "urllib.error.HTTPError: Tunnel connection failed: 403 autoloop refused pypi.org:443: not in the allowlist"
    assert failure_hint(said, network=True) == ("autoloop's egress proxy refused pypi.org:443; add it to "
                                                "verifier.hosts if the measurement needs it")
    hint = failure_hint("socket.gaierror: [Errno -3] Temporary failure in name resolution", network=True)
    assert hint is not None and "only through autoloop's egress proxy" in hint


def test_the_lesson_says_what_was_blocked_in_sentences():
    from autoloop.engine.hints import blocked_lesson, with_sentences

    said = blocked_lesson({"pypi.org:443": 3, "a:1": 1, "b:2": 2, "c:3": 9}, "sandbox.hosts")
    assert said == ("Blocked pypi.org:443 three times, a:1 once, b:2 twice (+1 more): add it to sandbox.hosts "
                    "if the agent needs it.")
    assert with_sentences("kept: score 5 → 3", said, "") == f"kept: score 5 → 3. {said}"
    assert with_sentences("", blocked_lesson({"x:1": 4}, "verifier.hosts")) == \
        "Blocked x:1 4 times: add it to verifier.hosts if the verifier needs it."
    assert blocked_lesson({}, "sandbox.hosts") == ""
