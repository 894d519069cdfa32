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

# Few and light imports: this runs once per sandbox with the network on, and Python's
# `socket`, `json` and `subprocess` modules would double its start.
import _socket
import struct
import ctypes
import os
import signal
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


def listen_inside(pid: int, port: int) -> _socket.socket:
    """A socket listening on 127.0.0.1:`port` in the network namespace of `pid`. Call it in a
    single-threaded process that may leave its own namespaces (a forked child)."""
    mine, theirs = (os.stat(f"/proc/{p}/ns/user") for p in ("self", str(pid)))
    if (mine.st_dev, mine.st_ino) != (theirs.st_dev, theirs.st_ino):
        _setns(f"/proc/{pid}/ns/user", CLONE_NEWUSER)
    _setns(f"/proc/{pid}/ns/net", CLONE_NEWNET)
    deadline = time.monotonic() + _BIND_WAIT_S
    while True:
        sock = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        try:
            sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
            sock.listen(128)
            return sock
        except OSError:
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.002)


def _hand_over(control: _socket.socket, pid: int, port: int, token: bytes) -> None:
    child = os.fork()
    if child == 0:
        code = 0
        try:
            sock = listen_inside(pid, port)
            control.sendmsg([b"L" + token], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, struct.pack("i", sock.fileno()))])
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


def _child_pid(info: bytes) -> int:
    """bwrap's --info-fd JSON: {"child-pid": N, ...} (read without the json module)."""
    after = info.split(b'"child-pid"', 1)[1].lstrip(b" \t\n:")
    return int(after[:len(after) - len(after.lstrip(b"0123456789"))])


def _start(argv: list[str], keep: tuple[int, ...]) -> int:
    for fd in keep:
        os.set_inheritable(fd, True)
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    return pid


def main(argv: list[str]) -> int:
    control_name, token, port, bwrap, args = argv[0], argv[1].encode(), int(argv[2]), argv[3], argv[4:]
    control = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        control.connect("\0" + control_name)
    except OSError as exc:
        sys.stderr.write(f"autoloop: the egress proxy is not running ({exc}); nothing was started\n")
        return SETUP_FAILED
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    pid = _start([bwrap, "--info-fd", str(info_w), "--block-fd", str(block_r), *args], (info_w, block_r))
    os.close(info_w)
    os.close(block_r)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda n, _f: os.kill(pid, n))
    try:
        with os.fdopen(info_r, "rb") as f:
            info = f.read()   # bwrap closes it once written
        _hand_over(control, _child_pid(info), port, token)
    except (OSError, ValueError, IndexError) as exc:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        sys.stderr.write(f"autoloop: cannot start the sandbox with its only way out through the egress "
                         f"proxy: {exc}\n")
        return SETUP_FAILED
    os.write(block_w, b"x")
    os.close(block_w)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            return os.waitstatus_to_exitcode(status) % 256 if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
        except InterruptedError:
            continue


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
