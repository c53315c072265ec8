"""flush() in a worker thread while the owner appends and truncates (as the node server runs it)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_helpers import body, small_config

from quorumlog.store.file_store import FileStore
from quorumlog.store.vfs import OsFiles


class GatedSync(OsFiles):
    """fdatasync waits at a gate, so a test can act while a flush is in the middle of its sync."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.armed = False

    def fdatasync(self, fd: int) -> None:
        if self.armed:
            self.armed = False
            self.entered.set()
            assert self.release.wait(10), "test did not release the gated fdatasync"
        super().fdatasync(fd)


def test_truncation_during_a_flush_is_not_undone_by_it(tmp_path: Path) -> None:
    files = GatedSync()
    s = FileStore(tmp_path / "s", small_config(), files=files)
    try:
        s.append([body(i, 40) for i in range(10)], 1)
        s.flush()
        s.append([body(i, 40) for i in range(10, 20)], 1)  # entries 10..19, not yet durable
        files.armed = True
        flusher = threading.Thread(target=s.flush)
        flusher.start()
        assert files.entered.wait(10)
        # While the flush syncs what it captured (end 19), a new leader's entries replace 12..19.
        s.truncate_after(11)
        s.append([b"replacement"], 2)
        files.release.set()
        flusher.join(10)
        assert not flusher.is_alive()
        # The flush covered entries up to 19 of the old log; entry 12 of term 2 was written after it
        # began, so it must not count as durable.
        assert s.durable_index <= 11
        assert s.flush() == 12
        assert s.get(12).body == b"replacement" and s.term_at(12) == 2
    finally:
        files.release.set()
        s.close()


def test_appends_during_a_flush_are_covered_by_the_next_one(tmp_path: Path) -> None:
    files = GatedSync()
    s = FileStore(tmp_path / "s", small_config(), files=files)
    try:
        s.append([body(0, 40)], 1)
        files.armed = True
        flusher = threading.Thread(target=s.flush)
        flusher.start()
        assert files.entered.wait(10)
        s.append([body(1, 40)], 1)  # written while the sync runs: not covered by it
        files.release.set()
        flusher.join(10)
        assert s.durable_index == 0
        assert s.flush() == 1
    finally:
        files.release.set()
        s.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(st.integers(0, 300), min_size=1, max_size=12), min_size=1, max_size=12),
       cut=st.integers(0, 200), reads=st.lists(st.tuples(st.integers(0, 150), st.integers(1, 40),
                                                         st.integers(1, 6000)), max_size=12))
def test_read_raw_of_recent_batches_equals_a_read_from_disk(tmp_path_factory: pytest.TempPathFactory,
                                                             batches: list[list[int]], cut: int,
                                                             reads: list[tuple[int, int, int]]) -> None:
    """The leader serves its last batches from memory; what it returns must be what the disk holds."""
    d = tmp_path_factory.mktemp("s")
    s = FileStore(d, small_config())
    n = 0
    for sizes in batches:
        s.append([body(n + k, size) for k, size in enumerate(sizes)], 1)
        n += len(sizes)
    if cut < s.end_index:  # a truncation drops what the memory holds
        s.truncate_after(cut)
        s.append([body(i, 50) for i in range(3)], 2)
    live = [s.read_raw(start, count, nbytes) for start, count, nbytes in reads]
    s.close()
    s = FileStore(d, small_config())
    try:
        assert live == [s.read_raw(start, count, nbytes) for start, count, nbytes in reads]
    finally:
        s.close()
