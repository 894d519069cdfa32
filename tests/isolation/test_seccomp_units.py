"""The seccomp program's decisions, read by a small classic-BPF interpreter (the kernel's rules for
the few instructions it uses), for each architecture and entry point; and, in a real sandbox, that
the kernel takes the program and decides the same."""

from __future__ import annotations

import errno
import os
import shutil
import struct
import subprocess
import sys

import pytest

from autoloop.isolation import seccomp as sc

AF_INET, AF_UNIX, AF_NETLINK = 2, 1, 16
SOCK_DGRAM, SOCK_RAW = 2, 3
SOCK_NONBLOCK, SOCK_CLOEXEC = 0o4000, 0o2000000


def run_bpf(prog: bytes, nr: int, arch: int, args: tuple[int, ...] = ()) -> int:
    """What the filter returns for one system call (struct seccomp_data laid out as the kernel does)."""
    full = (list(args) + [0] * 6)[:6]
    data = struct.pack("=iIQ6Q", nr, arch, 0, *full)
    insns = [struct.unpack("=HBBI", prog[i:i + 8]) for i in range(0, len(prog), 8)]
    a, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        pc += 1
        if code == 0x20:                      # ld [k]
            a = struct.unpack_from("=I", data, k)[0]
        elif code == 0x54:                    # and #k
            a &= k
        elif code == 0x15:                    # jeq #k
            pc += jt if a == k else jf
        elif code == 0x05:                    # ja
            pc += k
        elif code == 0x06:                    # ret #k
            return k
        else:
            raise AssertionError(f"unexpected instruction {code:#x}")


PROG = sc.program()
ARCHES = {
    "x86_64": (sc.AUDIT_ARCH_X86_64, 0),
    "x32": (sc.AUDIT_ARCH_X86_64, sc.X32_SYSCALL_BIT),
    "i386": (sc.AUDIT_ARCH_I386, 0),
    "aarch64": (sc.AUDIT_ARCH_AARCH64, 0),
    "arm": (sc.AUDIT_ARCH_ARM, 0),
}


@pytest.mark.parametrize("name", ARCHES)
def test_socket_calls_are_judged_by_family_and_type(name):
    arch, bit = ARCHES[name]
    n = sc.ARCHES[arch]

    def decide(nr, *args):
        return run_bpf(PROG, nr | bit, arch, args)

    assert decide(n.socket, AF_UNIX, 1) == sc.DENY
    assert decide(n.socket, AF_UNIX | (0xFFFFFFFF << 32), 1) == sc.DENY   # the kernel reads an int
    for family in (AF_INET, 10, AF_NETLINK):
        assert decide(n.socket, family, 1) == sc.RET_ALLOW
    for kind in (1, 5, 1 | SOCK_CLOEXEC, 5 | SOCK_NONBLOCK | SOCK_CLOEXEC):      # stream, seqpacket
        assert decide(n.socketpair, AF_UNIX, kind) == sc.RET_ALLOW
    for kind in (SOCK_DGRAM, SOCK_DGRAM | SOCK_CLOEXEC, SOCK_RAW):   # could sendto() any named socket
        assert decide(n.socketpair, AF_UNIX, kind) == sc.DENY
    assert decide(n.socketpair, AF_INET, SOCK_DGRAM) == sc.RET_ALLOW  # the kernel refuses it itself
    assert decide(n.io_uring_setup, 8, 0) == sc.NO_URING
    if n.socketcall is not None:
        assert decide(n.socketcall, 1, 0) == sc.DENY
    for other in (0, 1, 2, 42, 49, 200, 300):       # read, write, open, connect, bind, …
        if other not in (n.socket, n.socketpair, n.socketcall):
            assert decide(other, AF_UNIX, 1) == sc.RET_ALLOW


def test_an_unknown_architecture_is_refused_everything():
    for arch in (0, 0xC00000F3, 0x80000016):    # none, riscv64, s390x
        assert run_bpf(PROG, 0, arch) == sc.FOREIGN
    assert sc.FOREIGN == sc.RET_ERRNO | errno.EPERM and sc.DENY == sc.RET_ERRNO | errno.EACCES


def test_machines_with_a_filter():
    assert sc.supported("x86_64") and sc.supported("aarch64")
    assert not sc.supported("riscv64") and not sc.supported("ppc64le")


def test_sealed_opens_the_filter_for_bwrap_only():
    argv = ["/usr/bin/bwrap", "--ro-bind", "/", "/", "--", "/bin/sh", "-c", "echo --"]
    out = sc.sealed(argv)
    if not sc.supported():
        assert out == argv
        return
    assert out[:2] == ["/bin/sh", "-c"] and out[4] == sc.filter_file()
    rest = out[5:]
    assert rest[rest.index("--") - 2:rest.index("--")] == ["--seccomp", str(sc.FD)]
    assert rest[rest.index("--"):] == argv[argv.index("--"):]


@pytest.mark.skipif(shutil.which("bwrap") is None or not sc.supported(), reason="needs bubblewrap on x86_64/aarch64")
def test_the_kernel_decides_as_the_interpreter():
    probe = """
import socket, errno
def t(fn):
    try:
        fn().close()
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
print(t(lambda: socket.socket(socket.AF_UNIX)), t(lambda: socket.socket()),
      t(lambda: socket.socketpair()[0]), t(lambda: socket.socketpair(type=socket.SOCK_SEQPACKET)[0]),
      t(lambda: socket.socketpair(type=socket.SOCK_DGRAM)[0]))
"""
    argv = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid",
            "--unshare-net", "--", sys.executable, "-c", probe]
    res = subprocess.run(sc.sealed(argv), capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["EACCES", "ok", "ok", "ok", "EACCES"]


def test_a_filter_file_removed_under_us_is_made_again():
    if not sc.supported():
        pytest.skip("no filter for this machine")
    first = sc.filter_file()
    os.unlink(first)
    again = sc.filter_file()
    assert again is not None and open(again, "rb").read() == sc.program()


def test_a_filter_file_changed_under_us_is_written_again_and_none_is_left_per_process(tmp_path):
    """One file per user and filter, outside every sandbox's /tmp: a process killed with -9
    leaves no folder of its own behind (`autoloop clean` and `doctor` would count it)."""
    if not sc.supported():
        pytest.skip("no filter for this machine")
    path = sc.filter_file()
    assert path is not None and os.path.basename(os.path.dirname(path)) == f"autoloop-filters-{os.getuid()}"
    with open(path, "wb") as f:
        f.write(b"\x06\x00\x00\x00\x00\x00\xff\x7f")   # a filter that allows everything
    again = sc.filter_file()   # this process's file again, written anew (or one in the test's own temp folder)
    assert again is not None and open(again, "rb").read() == sc.program()
    out = subprocess.run([sys.executable, "-c", "from autoloop.isolation import seccomp as sc; "
                          "import os; print(sc.filter_file()); os._exit(0)"],
                         capture_output=True, text=True, timeout=60)
    other = out.stdout.strip()   # this test's own temp folder (the one above was this process's first)
    assert os.path.basename(other) == os.path.basename(path) and open(other, "rb").read() == sc.program()
    assert not [p for p in os.listdir(os.path.dirname(os.path.dirname(other))) if p.startswith("autoloop-seccomp-")]
