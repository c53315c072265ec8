"""The store directory's lock: a second process is refused before it changes anything."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from store_helpers import body, log_of, small_config

from quorumlog.errors import CorruptCommittedError, StoreLockedError
from quorumlog.store.file_store import FileStore

CFG = small_config(data_segment_bytes=16 * 1024, index_segment_bytes=32 * 16, max_body_bytes=4096)

# A second process: opens the store, says "ready" (or what refused it), waits for a line, closes.
CHILD = """
import sys
from quorumlog.config import StoreConfig
from quorumlog.errors import StoreLockedError
from quorumlog.store.file_store import FileStore

cfg = StoreConfig(data_segment_bytes=16 * 1024, index_segment_bytes=32 * 16, max_body_bytes=4096)
try:
    s = FileStore(sys.argv[1], cfg)
except StoreLockedError as e:
    print(f"locked pid={e.pid} {e}", flush=True)
    sys.exit(3)
s.data.wait_filled(30)  # the segment made ahead, before the parent compares the files
s.index.wait_filled(30)
print("ready", flush=True)
sys.stdin.readline()
s.close()
print("closed", flush=True)
"""


def spawn(directory: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", CHILD, str(directory)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under the store directory, by relative path."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def make_store(directory: Path) -> list:
    s = FileStore(directory, CFG)
    s.save_vote(2, "n1")
    for i in range(30):
        s.append([body(i, 900)], 2)
    s.set_committed(20)
    log = log_of(s)
    s.close()
    return log


def test_second_process_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    d = tmp_path / "s"
    log = make_store(d)
    child = spawn(d)
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "ready"
        assert (d / "lock").read_text().strip() == str(child.pid)
        # What recovery would change if it ran: a spare segment to unlink and garbage past the end to zero.
        (d / "data" / f"{10 * CFG.data_segment_bytes:020d}.spare").write_bytes(b"\x01" * 100)
        last = log[-1]
        seg = d / "data" / f"{last[2] - last[2] % CFG.data_segment_bytes:020d}"
        with open(seg, "r+b") as f:
            f.seek((last[2] + 48 + len(last[4])) % CFG.data_segment_bytes + 5)
            f.write(b"\x77" * 40)
        before = snapshot(d)
        with pytest.raises(StoreLockedError) as info:
            FileStore(d, CFG)
        assert info.value.pid == child.pid
        assert str(d) in str(info.value) and f"pid {child.pid}" in str(info.value)
        assert snapshot(d) == before, "the refused open changed files"
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "closed"
        assert child.wait(10) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    s = FileStore(d, CFG)  # the lock is free again
    try:
        assert log_of(s) == log and (d / "lock").read_text().strip() == str(os.getpid())
    finally:
        s.close()


def test_holder_in_this_process_refuses_a_second_process(tmp_path: Path) -> None:
    d = tmp_path / "s"
    make_store(d)
    s = FileStore(d, CFG)
    assert s.data.wait_filled(30) and s.index.wait_filled(30)  # (the filler settled: files compare)
    before = snapshot(d)
    child = spawn(d)
    out, _ = child.communicate("", timeout=30)
    assert child.returncode == 3, out
    assert f"locked pid={os.getpid()} " in out and str(d) in out
    assert snapshot(d) == before
    s.close()
    child = spawn(d)
    out, _ = child.communicate("\n", timeout=30)
    assert child.returncode == 0 and "ready" in out and "closed" in out


def test_a_killed_holder_releases_the_lock(tmp_path: Path) -> None:
    d = tmp_path / "s"
    log = make_store(d)
    child = spawn(d)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    s = FileStore(d, CFG)
    try:
        assert log_of(s) == log
    finally:
        s.close()


def test_second_open_in_the_same_process_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "s"
    s = FileStore(d, CFG)
    with pytest.raises(StoreLockedError) as info:
        FileStore(d, CFG)
    assert info.value.pid == os.getpid()
    s.close()
    FileStore(d, CFG).close()
    s = FileStore(d, CFG)
    s.abandon()  # a crash releases it too
    FileStore(d, CFG).close()


def test_a_failed_open_releases_the_lock(tmp_path: Path) -> None:
    d = tmp_path / "s"
    log = make_store(d)
    e = log[25]  # past the anchor (committed 20), below the durable end (29): scanned, and owed
    seg = d / "data" / f"{e[2] - e[2] % CFG.data_segment_bytes:020d}"
    with open(seg, "r+b") as f:  # opening without repair fails
        f.seek(e[2] % CFG.data_segment_bytes + 50)
        f.write(b"\x00\xff")
    with pytest.raises(CorruptCommittedError):
        FileStore(d, CFG)
    s = FileStore(d, CFG, repair=True)
    try:
        assert s.damage is not None and s.damage.first_bad_index == 25
    finally:
        s.close()
