"""The seccomp filter of the generator's sandbox: no unix socket of the host is reachable.

A pathname unix socket is reached by path lookup, so a read-only bind of `/` shows every daemon's
socket, wherever it lies and whenever it was made (Landlock has no right for it on the kernels we
run on: its ABI 6 scopes abstract sockets only, which the network namespace already closes). The
filter makes `socket(AF_UNIX, …)` fail with EACCES, so no unix socket can be made in the sandbox
to connect anywhere. `socketpair` stays, for the stream and seqpacket types that node/libuv,
asyncio and multiprocessing pipes use: such a pair is born connected and cannot be pointed
elsewhere. A datagram pair could (`sendto` with an address), so it is refused too. io_uring,
which makes sockets without the `socket` system call, answers ENOSYS (its users fall back).

One classic BPF program, written here with `struct` (no libseccomp), for x86_64 (with its i386
and x32 entry points: `socketcall` multiplexes every socket call behind a pointer the filter
cannot read, so it is refused) and aarch64 (with 32-bit ARM). Any other architecture a process
presents is refused outright. bwrap loads it (`--seccomp FD`) after it has set the sandbox up.
"""

from __future__ import annotations

import atexit
import errno
import hashlib
import os
import platform
import stat
import struct
import tempfile
from pathlib import Path
from typing import NamedTuple

from autoloop.base.walk import remove_tree, temp_dir

AF_UNIX = 1
SOCK_STREAM, SOCK_SEQPACKET = 1, 5
SOCK_TYPE_MASK = 0xF     # the type without SOCK_NONBLOCK / SOCK_CLOEXEC

AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_I386 = 0x40000003
AUDIT_ARCH_AARCH64 = 0xC00000B7
AUDIT_ARCH_ARM = 0x40000028
X32_SYSCALL_BIT = 0x40000000

RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
DENY = RET_ERRNO | errno.EACCES
NO_URING = RET_ERRNO | errno.ENOSYS
FOREIGN = RET_ERRNO | errno.EPERM

# classic BPF opcodes (linux/filter.h)
_LD_ABS_W, _ALU_AND_K, _JEQ_K, _JA, _RET_K = 0x20, 0x54, 0x15, 0x05, 0x06
# struct seccomp_data: nr, arch, instruction_pointer, args[6] (64-bit each; the low half first on
# the little-endian machines we build for)
_NR, _ARCH = 0, 4


def _arg(i: int) -> int:
    return 16 + 8 * i


class Numbers(NamedTuple):
    """The numbers of one architecture's entry points the filter looks at (None: it has none)."""
    socket: int
    socketpair: int
    io_uring_setup: int
    socketcall: int | None
    mask: int = 0xFFFFFFFF     # x86_64: the x32 bit cleared, so x32 calls are judged alike


ARCHES: dict[int, Numbers] = {
    AUDIT_ARCH_X86_64: Numbers(41, 53, 425, None, mask=0xFFFFFFFF & ~X32_SYSCALL_BIT),
    AUDIT_ARCH_I386: Numbers(359, 360, 425, 102),
    AUDIT_ARCH_AARCH64: Numbers(198, 199, 425, None),
    AUDIT_ARCH_ARM: Numbers(281, 288, 425, 102),
}
_NATIVE = {"x86_64": AUDIT_ARCH_X86_64, "amd64": AUDIT_ARCH_X86_64, "aarch64": AUDIT_ARCH_AARCH64,
           "arm64": AUDIT_ARCH_AARCH64}


class _Asm:
    """Instructions with forward jumps to labels, resolved when the program is packed."""

    def __init__(self) -> None:
        self.code: list[tuple[int, object, object, int]] = []
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def op(self, code: int, k: int = 0, jt: object = 0, jf: object = 0) -> None:
        self.code.append((code, jt, jf, k))

    def pack(self) -> bytes:
        out = b""
        for at, (code, jt, jf, k) in enumerate(self.code):
            def rel(target: object) -> int:
                if isinstance(target, int):
                    return target
                off = self.labels[str(target)] - at - 1
                if not 0 <= off <= 255:
                    raise ValueError(f"jump to {target} out of reach")
                return off
            if code == _JA:   # an unconditional jump takes its offset in k
                k, jt, jf = rel(jt), 0, 0
            out += struct.pack("=HBBI", code, rel(jt), rel(jf), k)
        return out


def program() -> bytes:
    """The filter, as bwrap reads it: packed `struct sock_filter` entries."""
    a = _Asm()
    a.op(_LD_ABS_W, _ARCH)
    for arch in ARCHES:
        a.op(_JEQ_K, arch, jt=f"arch{arch:x}")
    a.op(_RET_K, FOREIGN)
    for arch, n in ARCHES.items():
        a.label(f"arch{arch:x}")
        a.op(_LD_ABS_W, _NR)
        if n.mask != 0xFFFFFFFF:
            a.op(_ALU_AND_K, n.mask)
        a.op(_JEQ_K, n.socket, jt="socket")
        a.op(_JEQ_K, n.socketpair, jt="socketpair")
        a.op(_JEQ_K, n.io_uring_setup, jt="uring")
        if n.socketcall is not None:
            a.op(_JEQ_K, n.socketcall, jt="deny")
        a.op(_RET_K, RET_ALLOW)
    a.label("socket")
    a.op(_LD_ABS_W, _arg(0))
    a.op(_JEQ_K, AF_UNIX, jt="deny", jf="allow")
    a.label("socketpair")
    a.op(_LD_ABS_W, _arg(0))
    a.op(_JEQ_K, AF_UNIX, jf="allow")
    a.op(_LD_ABS_W, _arg(1))
    a.op(_ALU_AND_K, SOCK_TYPE_MASK)
    a.op(_JEQ_K, SOCK_STREAM, jt="allow")
    a.op(_JEQ_K, SOCK_SEQPACKET, jt="allow")
    a.label("deny")
    a.op(_RET_K, DENY)
    a.label("uring")
    a.op(_RET_K, NO_URING)
    a.label("allow")
    a.op(_RET_K, RET_ALLOW)
    return a.pack()


def supported(machine: str | None = None) -> bool:
    """Whether the filter knows this machine's system call numbers."""
    return _NATIVE.get((machine or platform.machine()).lower()) is not None


_FILE: list[str] = []


def filter_file() -> str | None:
    """The filter in a file, for bwrap to read on a descriptor; None on a machine it does not know
    (see `supported`). One file per user and filter, named by its content, in a 0700 folder of
    the temp directory that no sandbox sees (each has its own /tmp): a process killed with -9
    leaves nothing behind, and a file found changed is written again before use."""
    if not supported():
        return None
    data = program()
    if _FILE and _holds(Path(_FILE[0]), data):
        return _FILE[0]
    _FILE.clear()
    folder = _shared_folder()
    if folder is None:   # a temp directory we cannot trust: a folder of this process's own
        folder = temp_dir("seccomp")
        atexit.register(remove_tree, folder, quiet=True)
    path = folder / f"unix-sockets-{hashlib.sha256(data).hexdigest()[:16]}.bpf"
    if not _holds(path, data):
        part = folder / f".{path.name}.{os.getpid()}"
        part.write_bytes(data)
        os.replace(part, path)
    _FILE.append(str(path))
    return _FILE[0]


def _holds(path: Path, data: bytes) -> bool:
    try:
        return path.read_bytes() == data
    except OSError:
        return False


def _shared_folder() -> Path | None:
    """`autoloop-filters-UID` in the temp directory: made 0700 if missing, used only if it is a
    real folder (not a link) of this user that nobody else can write."""
    folder = Path(tempfile.gettempdir()) / f"autoloop-filters-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(folder)
    except OSError:
        return None
    ok = stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022
    return folder if ok else None


# bwrap reads the filter on descriptor 3, opened by a shell that then becomes bwrap (the
# process runner closes every other descriptor it has)
FD = 3
_OPEN_AND_EXEC = f'f=$1; shift; exec "$@" {FD}<"$f"'


def sealed(argv: list[str]) -> list[str]:
    """`argv` (bwrap's, with its `--` before the command) with the filter loaded before the
    command starts; unchanged where there is no filter for this machine."""
    path = filter_file()
    if path is None:
        return argv
    cut = argv.index("--")
    return ["/bin/sh", "-c", _OPEN_AND_EXEC, "sh", path, *argv[:cut], "--seccomp", str(FD), *argv[cut:]]
