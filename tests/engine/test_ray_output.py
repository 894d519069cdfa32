"""What comes back of $AUTOLOOP_OUTPUT from a Ray node (executor: ray with verifier.score):
ray_task.produce run here as a plain generator (no Ray needed) and rayfetch.unpack on what it
yields. Only regular files and folders travel, within parallel.max_output_mb; what a process
writes after the verifier has ended is not in it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from autoloop.engine import rayfetch
from autoloop.engine.ray_task import CHUNK_BYTES, RemoteReply, produce
from autoloop.process import proc
from tests.engine.test_ray_task import archive

PY = sys.executable


def _produce(tmp_path: Path, code: str, limit: int = 16 << 20) -> tuple[RemoteReply, Path | str]:
    """produce() on a tree holding `code` as out.py; its output unpacked into tmp_path/got."""
    items = list(produce(archive({"out.py": code}), [proc.Step("verifier", f"{PY} out.py", 30, False)],
                         {}, 1 << 16, None, None, False, (), None, limit))
    reply = items[0]
    assert isinstance(reply, RemoteReply)
    assert all(isinstance(c, bytes) and len(c) <= CHUNK_BYTES for c in items[1:])
    if reply.output is None or reply.output.odd is not None:
        return reply, reply.output.odd if reply.output else "no output"
    tar = tmp_path / "got.tar"
    tar.write_bytes(b"".join(items[1:]))   # small here; the driver writes chunk by chunk
    assert tar.stat().st_size == reply.output.size
    got = tmp_path / "got"
    got.mkdir()
    why = rayfetch.unpack(tar, got, limit)
    return reply, why or got


WRITE = "import os\nfrom pathlib import Path\nout = Path(os.environ['AUTOLOOP_OUTPUT'])\n"


def test_files_and_folders_come_back(tmp_path):
    reply, got = _produce(tmp_path, WRITE + "(out / 'sub').mkdir()\n(out / 'sub' / 'p.csv').write_text('0.5\\n')\n"
                                            "(out / 'a.txt').write_bytes(b'x' * 5_000_000)\n")
    assert isinstance(got, Path), got
    assert (got / "sub" / "p.csv").read_text() == "0.5\n"
    assert (got / "a.txt").stat().st_size == 5_000_000
    assert reply.output is not None and reply.output.files == 2


def test_a_link_is_refused(tmp_path):
    _, why = _produce(tmp_path, WRITE + "os.symlink('/etc/hostname', out / 'p.csv')\n")
    assert why == "holds p.csv, not a regular file or folder"


def test_more_than_the_limit_is_refused_naming_the_key(tmp_path):
    _, why = _produce(tmp_path, WRITE + "(out / 'big').write_bytes(b'x' * 3_000_000)\n", limit=2 << 20)
    assert isinstance(why, str) and "more than parallel.max_output_mb (2)" in why, why


def test_what_is_written_after_the_verifier_ended_is_not_there(tmp_path):
    late = (WRITE + "import subprocess\n(out / 'p.csv').write_text('first')\n"
            "subprocess.Popen([sys.executable, '-c', 'import time, sys; time.sleep(1); "
            "open(sys.argv[1], \"w\").write(\"late\")', str(out / 'p.csv')], start_new_session=True)\n")
    _, got = _produce(tmp_path, "import sys\n" + late)
    assert isinstance(got, Path), got
    assert (got / "p.csv").read_text() == "first"


def test_a_failed_verifier_sends_nothing(tmp_path):
    items = list(produce(archive({"out.py": "raise SystemExit(3)"}), [proc.Step("verifier", f"{PY} out.py", 30, False)],
                         {}, 1 << 16, None, None, False, (), None, 1 << 20))
    assert len(items) == 1 and isinstance(items[0], RemoteReply) and items[0].output is None
    assert not items[0].runs[-1].result.ok


@pytest.mark.parametrize("name", ["../escape", "/abs"])
def test_unpack_keeps_every_member_inside(tmp_path, name):
    import io
    import tarfile

    tar = tmp_path / "t.tar"
    with tarfile.open(tar, "w") as t:
        info = tarfile.TarInfo(name)
        info.size = 1
        t.addfile(info, io.BytesIO(b"x"))
    (tmp_path / "into").mkdir()
    assert "not a regular file or folder inside it" in (rayfetch.unpack(tar, tmp_path / "into", 1 << 20) or "")


class FakeRay:
    """ray.wait/get/cancel over a plain iterator of values (a generator task's items); an
    exception among them is raised by get, as Ray raises a lost node's error there."""

    def __init__(self) -> None:
        self.cancelled = False

    def wait(self, refs, timeout=None):
        return refs, []

    def get(self, ref):
        if isinstance(ref, BaseException):
            raise ref
        return ref

    def cancel(self, ref):
        self.cancelled = True


def _reply(size: int):
    from autoloop.engine.ray_task import Output

    return RemoteReply("node", [], "id", Output(size, 1))


def _tar_of(tmp_path: Path, text: str) -> bytes:
    import tarfile

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "p.csv").write_text(text)
    with tarfile.open(tmp_path / "src.tar", "w") as t:
        t.add(tmp_path / "src" / "p.csv", arcname="p.csv")
    return (tmp_path / "src.tar").read_bytes()


def test_receive_writes_chunk_by_chunk_and_unpacks(tmp_path):
    data = _tar_of(tmp_path, "0.5\n")
    chunks = [data[i:i + 1000] for i in range(0, len(data), 1000)]
    out = tmp_path / "out"
    reply = rayfetch.receive(FakeRay(), iter([_reply(len(data)), *chunks]), out, 1 << 20, lambda: False)
    assert isinstance(reply, RemoteReply) and reply.output is not None and reply.output.odd is None
    assert (out / "p.csv").read_text() == "0.5\n"
    assert not (tmp_path / "out.tar").exists()


def test_receive_refuses_more_than_announced_and_stops_the_task(tmp_path):
    data = _tar_of(tmp_path, "0.5\n")
    ray = FakeRay()
    reply = rayfetch.receive(ray, iter([_reply(len(data) - 1), data]), tmp_path / "out", 1 << 20, lambda: False)
    assert isinstance(reply, RemoteReply) and "more than the" in (reply.output.odd or "")
    assert ray.cancelled


def test_a_lost_node_while_the_output_streams_propagates(tmp_path):
    """The executor turns Ray's error into NodeLost: the measurement runs again elsewhere."""
    data = _tar_of(tmp_path, "0.5\n")

    class NodeDiedError(Exception):
        pass

    with pytest.raises(NodeDiedError):
        rayfetch.receive(FakeRay(), iter([_reply(len(data)), data[:100], NodeDiedError("gone")]), tmp_path / "out",
                         1 << 20, lambda: False)
    assert not (tmp_path / "out.tar").exists()


def test_receive_empties_the_folder_of_an_earlier_output(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "p.csv").write_text("an earlier measurement's")
    assert rayfetch.receive(FakeRay(), iter(["why"]), out, 1 << 20, lambda: False) == "why"
    assert list(out.iterdir()) == []


def test_receive_stops_when_cancelled(tmp_path):
    from autoloop.errors import Interrupted

    with pytest.raises(Interrupted):
        rayfetch.receive(FakeRay(), iter([_reply(10)]), tmp_path / "out", 1 << 20, lambda: True)
