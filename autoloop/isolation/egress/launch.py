"""Starts one bwrap sandbox whose only way out is the egress proxy (run as a script: standard
library only, `python -I -S launch.py CONTROL TOKEN PORT BWRAP ARGS...`).

bwrap gets `--info-fd` (it writes the sandbox's pid) and `--block-fd` (the sandbox waits there
before it runs the command). Meanwhile a forked child of this single-threaded process enters the
sandbox's user namespace (when bwrap made one) and network namespace, makes a socket listening on
127.0.0.1:PORT there and hands it over SCM_RIGHTS to the proxy in autoloop's process, which
answers on the control connection. Only then is the sandbox let go. A socket keeps the namespace
it was made in: the proxy accepts connections from inside and dials out from the host, and
nothing else in the sandbox's namespace leads anywhere. The control connection stays open while
the sandbox runs; its end tells the proxy to close the listener. Exit status: bwrap's, or 125
with a line on stderr when the way out could not be made (nothing ran)."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
SETUP_FAILED = 125
_BIND_WAIT_S = 5.0   # bwrap brings the sandbox's loopback up just after it wrote its pid


def _setns(path: str, kind: int) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if ctypes.CDLL(None, use_errno=True).setns(fd, kind) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns {path}: {os.strerror(err)}")
    finally:
        os.close(fd)


def listen_inside(pid: int, port: int) -> socket.socket:
    """A socket listening on 127.0.0.1:`port` in the network namespace of `pid`. Call it in a
    single-threaded process that may leave its own namespaces (a forked child)."""
    mine, theirs = (os.stat(f"/proc/{p}/ns/user") for p in ("self", str(pid)))
    if (mine.st_dev, mine.st_ino) != (theirs.st_dev, theirs.st_ino):
        _setns(f"/proc/{pid}/ns/user", CLONE_NEWUSER)
    _setns(f"/proc/{pid}/ns/net", CLONE_NEWNET)
    deadline = time.monotonic() + _BIND_WAIT_S
    while True:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
            sock.listen(128)
            return sock
        except OSError:
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.002)


def _hand_over(control: socket.socket, pid: int, port: int, token: bytes) -> None:
    child = os.fork()
    if child == 0:
        code = 0
        try:
            sock = listen_inside(pid, port)
            socket.send_fds(control, [b"L" + token], [sock.fileno()])
        except BaseException as exc:   # noqa: BLE001 - said on stderr, the parent fails closed
            sys.stderr.write(f"autoloop: cannot make the sandbox's way to the proxy: {exc}\n")
            code = 1
        os._exit(code)
    _, status = os.waitpid(child, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise OSError("the listener inside the sandbox could not be made")
    answer = control.recv(4096)
    if not answer.startswith(b"ok"):
        raise OSError("the egress proxy refused the sandbox: " + (answer.decode(errors="replace").strip()
                                                                  or "it closed the connection"))


def main(argv: list[str]) -> int:
    control_name, token, port, bwrap, args = argv[0], argv[1].encode(), int(argv[2]), argv[3], argv[4:]
    control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        control.connect("\0" + control_name)
    except OSError as exc:
        sys.stderr.write(f"autoloop: the egress proxy is not running ({exc}); nothing was started\n")
        return SETUP_FAILED
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    proc = subprocess.Popen([bwrap, "--info-fd", str(info_w), "--block-fd", str(block_r), *args],
                            pass_fds=(info_w, block_r))
    os.close(info_w)
    os.close(block_r)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda n, _f: proc.send_signal(n))
    try:
        with os.fdopen(info_r, "rb") as f:
            info = f.read()   # bwrap closes it once written
        pid = int(json.loads(info)["child-pid"])
        _hand_over(control, pid, port, token)
    except (OSError, ValueError, KeyError) as exc:
        proc.kill()
        proc.wait()
        sys.stderr.write(f"autoloop: cannot start the sandbox with its only way out through the egress "
                         f"proxy: {exc}\n")
        return SETUP_FAILED
    os.write(block_w, b"x")
    os.close(block_w)
    code = proc.wait()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
