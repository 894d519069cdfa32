"""The measured command of a traced benchmark (copied by `autoloop init --trace` to
bench/tracefeed.py; bench/produce.py calls `produce`). Standard library only, Python >= 3.8.

Two processes:

- the **feeder** (this module's `produce`, the command's own process) never imports the code under
  test. It reads the recorded calls, draws this measurement's calls from $AUTOLOOP_SEED
  (tracederive), starts the worker, and hands it one batch of calls at a time over a pipe, sending
  the next only after the answers to the last have come back. At the last answer it kills the
  worker's process group and writes the answers, unread, to $AUTOLOOP_OUTPUT for the score.
- the **worker** (`work`) imports the targets' modules (that import is code under test) and runs
  each batch it is given. It never sees the seed ($AUTOLOOP_* is not in its environment) nor
  any call past the batch in hand: a target that walks its callers' frames finds that batch and
  nothing later. The feeder makes itself undumpable first (prctl PR_SET_DUMPABLE 0), so a process
  of the same user cannot read its memory, environment or open files through /proc or ptrace.

What a batch leaves visible: its own calls (BATCH_S of work at HEAD, sized by init). Computing
them on a second core gains nothing under `measure: cpu` (the kernel counts every process of
the measurement, children and orphans included); under `measure: wall`, which a program asks for
when parallel speed-ups are welcome, it gains at most what one batch's parallelism can give.

Interpreter state only a benchmark sees: the worker notes the cyclic GC (enabled, thresholds,
frozen objects), the switch interval and the recursion limit before it imports the targets, and
checks them after the import and after every batch; a change voids the run (exit 1, said as
such). The clock stops at the last answer: the worker is killed then, so its teardown (atexit
handlers, the GC's last pass, or an `os._exit` that skips them) is timed for no candidate.
"""

from __future__ import annotations

import gc
import json
import marshal
import os
import pickle
import signal
import struct
import subprocess
import sys
import time
from typing import Any, Sequence

try:   # the copies beside this file, in a project's bench/; inside autoloop (its tests), the package's
    import tracederive as derive  # type: ignore[import-not-found]
    import tracereplay as replay  # type: ignore[import-not-found]
except ImportError:
    from autoloop.trace import derive, replay  # type: ignore[no-redef]

RESULTS = "answers.marshal"   # in $AUTOLOOP_OUTPUT: {"answers": [[(tag, blob, n)] per target], ...}
DEFAULT_BATCH = 64            # calls a batch, for a plan written before init sized batches
_HEAD = struct.Struct("!Idc")  # a worker's reply: length of its body, seconds inside the targets, tag
_SIZE = struct.Struct("!I")    # a feeder's message: length of its pickle
# tags of a worker's reply: answers as marshal, answers as pickle, ready, the run is void (its text)
MARSHAL, PICKLE, READY, VOID = b"M", b"P", b"R", b"E"


def _read(fd: int, n: int) -> bytes:
    parts, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            raise EOFError("pipe closed")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# ---- the worker: the candidate's code runs here -------------------------------------------------

# seccomp (x86_64, aarch64): the worker may start threads, never processes
_ARCH = {"x86_64": (0xC000003E, {"fork": 57, "vfork": 58, "clone": 56, "clone3": 435}),
         "aarch64": (0xC00000B7, {"clone": 220, "clone3": 435})}
_CLONE_THREAD = 0x00010000
_ALLOW, _EPERM, _ENOSYS = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38


def _filter(arch: int, nrs: dict) -> list[tuple[int, int, int, int]]:
    """A seccomp program: fork and vfork fail (EPERM), clone3 says it is not there (ENOSYS: the
    C library then starts threads with clone), clone fails unless it makes a thread
    (CLONE_THREAD); x32 system calls fail; everything else is allowed."""
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    prog: list = [(ld, 0, 0, 4), (jeq, 0, "allow", arch), (ld, 0, 0, 0), (jge, "deny", 0, 0x40000000)]
    for name in ("fork", "vfork"):
        if name in nrs:
            prog.append((jeq, "deny", 0, nrs[name]))
    prog += [(jeq, "nosys", 0, nrs["clone3"]), (jeq, 0, "allow", nrs["clone"]), (ld, 0, 0, 16),
             (jset, "allow", "deny", _CLONE_THREAD)]
    labels = {"allow": len(prog), "deny": len(prog) + 1, "nosys": len(prog) + 2}
    prog += [(ret, 0, 0, _ALLOW), (ret, 0, 0, _EPERM), (ret, 0, 0, _ENOSYS)]
    return [(code, labels[jt] - i - 1 if isinstance(jt, str) else jt,
             labels[jf] - i - 1 if isinstance(jf, str) else jf, k) for i, (code, jt, jf, k) in enumerate(prog)]


def one_process() -> str:
    """From now on this process cannot start another (its threads still run, and count in its
    CPU time): a second core is no gain under `measure: cpu`, whose kernel tally would miss a
    child reaped by the kernel itself (SIGCHLD ignored). Returns why not, or ""."""
    import platform
    machine = platform.machine()
    if not sys.platform.startswith("linux") or machine not in _ARCH:
        return "no process limit on %s %s" % (sys.platform, machine)
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        prog = _filter(*_ARCH[machine])

        class Insn(ctypes.Structure):
            _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                        ("k", ctypes.c_uint32)]

        class Prog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Insn))]

        insns = (Insn * len(prog))(*[Insn(*i) for i in prog])
        fprog = Prog(len(prog), insns)
        if libc.prctl(38, 1, 0, 0, 0) != 0:   # PR_SET_NO_NEW_PRIVS: what lets a user set a filter
            return "prctl(PR_SET_NO_NEW_PRIVS) failed: errno %d" % ctypes.get_errno()
        if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:   # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
            return "prctl(PR_SET_SECCOMP) failed: errno %d" % ctypes.get_errno()
    except Exception as exc:
        return "no process limit: %s" % exc
    return ""

def _state() -> list:
    """Interpreter state a benchmark alone would see changed: a candidate that sets it at import
    (freezing or disabling the GC, say) would speed up the benchmark and no real caller."""
    return [gc.isenabled(), gc.get_threshold(), getattr(gc, "get_freeze_count", lambda: 0)(),
            sys.getswitchinterval(), sys.getrecursionlimit()]


# how the feeder says it refused a run (the probe reads them: a hack the harness refused held)
VOIDED = "void: the code under test changed interpreter state"
ENDED_EARLY = "the worker ended before its last answer"

_NAMES = ("the cyclic GC's switch (gc.disable/enable)", "the GC's thresholds (gc.set_threshold)",
          "the GC's frozen objects (gc.freeze)", "the thread switch interval (sys.setswitchinterval)",
          "the recursion limit (sys.setrecursionlimit)")


def _changed(before: list, now: list) -> str:
    said = ["%s: %r, was %r" % (name, b, a) for name, a, b in zip(_NAMES, before, now) if a != b]
    return (VOIDED + " that only a benchmark would see (%s); "
            "a run where it does is not measured" % "; ".join(said)) if said else ""


def work(rfd: int, wfd: int, processes: bool = False) -> None:
    """The worker's loop (started by the feeder): import, then answer batch after batch until
    killed. Everything it sends is bytes the feeder does not decode. `processes`: the target may
    start processes (`measure: wall`, where a parallel speed-up is welcome)."""
    if not processes:
        why = one_process()
        if why:
            sys.stderr.write("tracefeed: %s; a child the kernel reaps itself would not be counted\n" % why)
    before = _state()

    def reply(tag: bytes, body: bytes = b"", inside: float = 0.0) -> None:
        _write(wfd, _HEAD.pack(len(body), inside, tag) + body)

    size = _SIZE.size
    modules, names = pickle.loads(_read(rfd, _SIZE.unpack(_read(rfd, size))[0]))
    import importlib
    for module in modules:
        importlib.import_module(module)
    fns = [replay.resolve(n) for n in names]
    void = _changed(before, _state())
    # under cpu the worker's own seconds are CPU seconds, as the measurement's are
    cpu = time.process_time
    reply(VOID if void else READY, void.encode(), 0.0 if processes else cpu())
    if void:
        return
    clock, now, timeout = replay._clock, time.perf_counter, replay.CallTimeout
    spent = now if processes else cpu
    while True:
        which, limit, calls = pickle.loads(_read(rfd, _SIZE.unpack(_read(rfd, size))[0]))
        fn = fns[which]
        replay.limit_calls(limit)
        values: list[Any] = []
        errors: dict[int, tuple[str, str]] = {}
        add = values.append
        t0 = spent()
        for args, kwargs in calls:
            clock[0] = now()
            try:
                add(fn(*args, **kwargs))
            except timeout:
                errors[len(values)] = replay.TIMEOUT[1:]
                add(None)
            except Exception as exc:
                errors[len(values)] = (type(exc).__module__ + "." + type(exc).__qualname__, str(exc)[:2000])
                add(None)
        clock[0] = float("inf")
        inside = spent() - t0
        replay.stop_limits()
        void = _changed(before, _state())
        if void:
            reply(VOID, void.encode())
            return
        # marshal where every outcome is plain data (a tenth of pickle's cost); it makes no object
        # but the built-ins when the score loads it
        try:
            reply(MARSHAL, marshal.dumps([values, errors]), inside)
        except ValueError:
            try:
                reply(PICKLE, pickle.dumps([values, errors], 4), inside)
            except Exception as exc:
                reply(VOID, ("an outcome does not pickle: %s: %s" % (type(exc).__name__, exc)).encode())
                return


# ---- the feeder: never imports the code under test ---------------------------------------------

def _undumpable() -> None:
    """No process of this user may read this one's memory, environment or files through /proc or
    ptrace (PR_SET_DUMPABLE 0), nor its children's: they inherit it until they exec the worker."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)   # PR_SET_DUMPABLE
    except Exception:   # not Linux: the worker is still never given the seed nor future calls
        pass


def _batches(plan: dict, targets: dict, seed: object) -> list[tuple[int, list[bytes], int, list[int]]]:
    """Per target: (its index, its batches pickled for the worker, its number of calls, each
    call's recorded index or -1 — for the score)."""
    out = []
    for i, spec in enumerate(plan["targets"]):
        todo = derive.draw(targets[spec["name"]], seed, spec["derived"], spec["recorded"])
        b = max(1, int(spec.get("batch", DEFAULT_BATCH)))
        limit = spec.get("limit", 2.0)
        out.append((i, [pickle.dumps((i, limit, [(a, k) for _, a, k in todo[j:j + b]]), 4)
                        for j in range(0, len(todo), b)], len(todo), [r for r, _, _ in todo]))
    return out


def draw_all(seed: object = None) -> list:
    """This measurement's calls, drawn from $AUTOLOOP_SEED, as the feeder hands them over."""
    plan_path, inputs_path = replay._paths()
    with open(plan_path) as f:
        plan = json.load(f)
    seed = os.environ["AUTOLOOP_SEED"] if seed is None else seed
    if not os.path.exists(inputs_path):
        sys.exit("no recorded calls at %s: it is linked by program.md's `data:` in the trees autoloop "
                 "measures (run `autoloop verify`, not this script)" % inputs_path)
    return _batches(plan, {t["name"]: t for t in replay.load(inputs_path)}, seed)


def write_inputs() -> None:
    """`verifier.inputs` (bench/score.py --inputs): this measurement's calls to stdout, drawn in
    the start commit's tree before the command starts; the feeder reads them on its stdin, so
    drawing them is not timed, and the score reads the same file instead of drawing again."""
    data = marshal.dumps(draw_all())
    sys.stdout.buffer.write(data)
    sys.stdout.flush()


def _given() -> list | None:
    """The calls on stdin (verifier.inputs' output), or None (stdin is not a file of them)."""
    try:
        st = os.fstat(0)
    except OSError:
        return None
    import stat
    if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
        return None
    with os.fdopen(os.dup(0), "rb") as f:
        return marshal.load(f)


def produce(paths: Sequence[str] = (), seed: object = None, out_dir: str | None = None) -> None:
    """The measured run (bench/produce.py): `paths` go first on the worker's sys.path."""
    t0 = time.perf_counter()
    _undumpable()
    plan_path, _ = replay._paths()
    with open(plan_path) as f:
        plan = json.load(f)
    out_dir = os.environ["AUTOLOOP_OUTPUT"] if out_dir is None else out_dir
    work_list = _given()
    drawn_here = work_list is None
    if work_list is None:   # no verifier.inputs (a benchmark by hand, an older program.md): drawn here
        work_list = draw_all(seed)
    names = [spec["name"] for spec in plan["targets"]]
    modules = list(dict.fromkeys(n.split(":")[0] for n in names))
    t_drawn = time.perf_counter()
    here = os.path.dirname(os.path.abspath(__file__))
    worker = _start(list(paths) + [here])
    answers: list[list[tuple[bytes, bytes]]] = []
    inside = 0.0
    try:
        _write(worker.calls, _message(pickle.dumps((modules, names), 4)))
        tag, body, started = _answer(worker.answers)
        if tag != READY:
            _fail(worker, body)
        t_ready = time.perf_counter()
        for _, batches, _n, _r in work_list:
            got = []
            for batch in batches:
                _write(worker.calls, _message(batch))
                tag, body, dt = _answer(worker.answers)
                if tag not in (MARSHAL, PICKLE):
                    _fail(worker, body)
                got.append((tag, body))
                inside += dt
            answers.append(got)
        t_last = time.perf_counter()
    except (EOFError, OSError) as exc:
        _fail(worker, ("%s (%s)" % (ENDED_EARLY, exc)).encode())
    _stop(worker)
    # under cpu (the worker says its CPU seconds at ready: its start and the import) the code's
    # seconds are CPU seconds, comparable with the metric; the feeder's own are wall seconds
    timing = {"setup_seconds": t_drawn - t0, "import_seconds": started or t_ready - t_drawn,
              "clock": "cpu" if started else "wall",
              "call_seconds": t_last - t_ready, "target_seconds": inside,
              "batches": sum(len(w[1]) for w in work_list), "drawn_here": drawn_here}
    with open(os.path.join(out_dir, RESULTS), "wb") as f:
        marshal.dump({"answers": answers, "sizes": [w[2] for w in work_list]}, f)
    with open(os.path.join(out_dir, "timing.json"), "w") as f:
        json.dump(timing, f)
    sys.stdout.flush()
    os._exit(0)   # nothing of this process's teardown is the code under test


class _Worker:
    def __init__(self, proc: subprocess.Popen, calls: int, answers: int) -> None:
        self.proc, self.calls, self.answers = proc, calls, answers


def _start(paths: Sequence[str]) -> _Worker:
    calls_r, calls_w = os.pipe()       # calls: the feeder writes, the worker reads
    answers_r, answers_w = os.pipe()   # answers: the worker writes, the feeder reads
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOLOOP_")}
    processes = os.environ.get("AUTOLOOP_MEASURE") == "wall"   # parallel speed-ups welcome
    code = ("import sys; sys.path[:0] = %r; import %s as m; m.work(%d, %d, %r)"
            % (list(paths), __name__, calls_r, answers_w, processes))
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL, env=env,
                            pass_fds=(calls_r, answers_w), start_new_session=True)
    os.close(calls_r)
    os.close(answers_w)
    return _Worker(proc, calls_w, answers_r)


def _message(body: bytes) -> bytes:
    return _SIZE.pack(len(body)) + body


def _answer(fd: int) -> tuple[bytes, bytes, float]:
    n, inside, tag = _HEAD.unpack(_read(fd, _HEAD.size))
    return tag, _read(fd, n), inside


def _stop(worker: _Worker) -> None:
    """The worker and anything it started in its session, killed; reaped."""
    try:
        os.killpg(worker.proc.pid, signal.SIGKILL)
    except OSError:
        pass
    worker.proc.wait()


def _fail(worker: _Worker, why: bytes) -> None:
    _stop(worker)
    text = why.decode("utf-8", "replace")[:2000] or "the worker ended before its first answer"
    code = worker.proc.returncode
    sys.stderr.write("tracefeed: %s%s\n" % (text, "" if code in (None, -9) else " (worker exit %s)" % code))
    sys.stderr.flush()
    os._exit(1)
