"""What the egress proxy costs an agent: the latency it adds to one API request and the speed
at which it streams a response, through the real path (a client inside a bubblewrap sandbox with
the network on, its only way out the proxy's listener in its namespace) next to the same client
talking to the same loopback server directly from the host, rounds interleaved so both sides
see the same load.

    python benchmarks/proxy.py [--rounds 5] [--requests 200] [--mb 256]

A request is a new connection each time (what an SDK without keep-alive pays; with keep-alive
the tunnel's cost is paid once): `tunnel` is CONNECT then the request (HTTPS through a proxy),
`forward` is a plain request with an absolute URI. Prints per side the median and 90th
percentile of a request, the added median, the streaming speed and the ratio of each.
Targets (issue 37): ≤ 5 ms added per request, ≥ 50 MB/s streamed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autoloop.base.specs import SandboxSpec  # noqa: E402
from autoloop.isolation.sandbox import Bwrap  # noqa: E402

CLIENT = r'''
import json, socket, sys, time
mode, port, n, big = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
where = ("127.0.0.1", port) if mode == "direct" else ("127.0.0.1", 3128)

def read_all(s):
    got = 0
    buf = bytearray(1 << 20)
    while (k := s.recv_into(buf)):
        got += k
    return got

def request(path, how):
    s = socket.create_connection(where)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if how == "tunnel":
        s.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += s.recv(4096)
        assert head.startswith(b"HTTP/1.1 200"), head
    target = f"http://127.0.0.1:{port}{path}" if how == "forward" else path
    s.sendall(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    got = read_all(s)
    s.close()
    return got

out = {}
hows = ["direct"] if mode == "direct" else ["tunnel", "forward"]
for how in hows:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        request("/small", how)
        times.append(time.perf_counter() - t)
    t = time.perf_counter()
    got = request(f"/big/{big}", how)
    out[how] = {"times": times, "mbps": got / (time.perf_counter() - t) / 1e6}
print(json.dumps(out))
'''


def serve() -> socket.socket:
    """A loopback HTTP server: /small answers 2 bytes, /big/N streams N bytes."""
    srv = socket.create_server(("127.0.0.1", 0), backlog=256)
    chunk = b"x" * (1 << 20)

    def handle(c: socket.socket) -> None:
        with c:
            head = b""
            while b"\r\n\r\n" not in head:
                part = c.recv(4096)
                if not part:
                    return
                head += part
            path = head.split(b" ")[1].decode()
            size = int(path.rsplit("/", 1)[1]) if "/big/" in path else 2
            c.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n".encode())
            if size == 2:
                c.sendall(b"ok")
                return
            left = size
            while left > 0:
                c.sendall(chunk[:min(left, len(chunk))])
                left -= len(chunk)

    def loop() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(c,), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()
    return srv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--starts", type=int, default=15)
    a = ap.parse_args()
    srv = serve()
    port = srv.getsockname()[1]
    box = Bwrap(SandboxSpec(kind="bwrap", network=True, hosts=(f"127.0.0.1:{port}",)))
    box.probe()
    box.start_egress()
    work = Path(tempfile.mkdtemp(prefix="autoloop-bench-proxy-"))
    script = work / "client.py"
    script.write_text(CLIENT)
    args = [str(port), str(a.requests), str(a.mb << 20)]
    res: dict[str, dict[str, list[float]]] = {h: {"times": [], "mbps": []} for h in ("direct", "tunnel", "forward")}
    for _ in range(a.rounds):
        runs = [[sys.executable, str(script), "direct", *args],
                box.argv([sys.executable, str(script), "proxy", *args], workdir=work, label="bench")]
        for argv in runs:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=600)
            if out.returncode != 0:
                sys.exit(f"client failed: {out.stderr[-2000:]}")
            for how, r in json.loads(out.stdout).items():
                res[how]["times"] += r["times"]
                res[how]["mbps"].append(r["mbps"])
    srv.close()
    base = statistics.median(res["direct"]["times"]) * 1e3
    base_mbps = statistics.median(res["direct"]["mbps"])
    print(f"{a.rounds} rounds x {a.requests} requests (new connection each), {a.mb} MB streamed per round; "
          f"{os.cpu_count()} CPUs; client in the sandbox for the proxy sides")
    print(f"{'path':<8} {'median ms':>10} {'p90 ms':>8} {'added ms':>9} {'MB/s':>8} {'vs direct':>10}")
    for how, r in res.items():
        times = sorted(r["times"])
        med, p90 = statistics.median(times) * 1e3, times[int(len(times) * 0.9)] * 1e3
        mbps = statistics.median(r["mbps"])
        print(f"{how:<8} {med:>10.3f} {p90:>8.3f} {med - base:>9.3f} {mbps:>8.0f} {mbps / base_mbps:>9.2f}x")
    # what a sandbox start costs with the way to the proxy made (the launcher, the listener
    # handed over) next to one without the network
    starts: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(a.starts):
        for net in (False, True):
            argv = box.argv(["/bin/true"], workdir=work, network=net, label="bench")
            t = time.perf_counter()
            subprocess.run(argv, check=True, timeout=60)
            starts[net].append(time.perf_counter() - t)
    off, on = (statistics.median(starts[n]) * 1e3 for n in (False, True))
    print(f"sandbox start (median of {a.starts}): no network {off:.1f} ms, network through the proxy "
          f"{on:.1f} ms (+{on - off:.1f} ms, once per generator run or measurement step)")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
