"""A FileStore and a MemoryStore driven by the same random operations must stay alike.

Crashes are modelled two ways for the FileStore:
- process crash: the object is dropped without flush or close. The page cache survives a process
  crash, so everything written is still there: the FileStore must come back with exactly the log it
  had. The MemoryStore's crash() loses the unflushed tail, so the FileStore must be a superset of it;
  the FileStore is then truncated to the MemoryStore's end (allowed: no committed entry is above it)
  and the two go on in lockstep.
- power loss: as above, and then every segment file is put back to its content when it was last
  synced: data segments at the last flush, index segments at the last checkpoint (flush syncs only
  data; recovery rebuilds the index past the checkpoint's anchor). Segments created since are zeros
  (their allocation was fsynced), segments deleted stay deleted (the deletion was fsynced), spare
  segments are zeros. This is one legal outcome of losing everything not fdatasync'd. The
  recovered log must be a prefix of the log as it was at the last flush (nothing unsynced survives)
  and must contain the MemoryStore's surviving log (everything flushed survives, except what a
  truncation since removed).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from store_helpers import bounds_of, log_of, small_config, state_of

from quorumlog.entry import HEADER_SIZE, MAGIC_CONFIG, MAGIC_NOOP, MAGIC_NORMAL
from quorumlog.errors import InvalidArgumentError, StoreError
from quorumlog.store import MemoryStore, place
from quorumlog.store.file_store import FileStore
from quorumlog.store.reader import drop_control

CFG = small_config(data_segment_bytes=16 * 1024, index_segment_bytes=32 * 16, max_body_bytes=4096)
ALL = (1 << 30, 1 << 40)

body_size = st.sampled_from([0, 1, 17, 300, 1500, 3000, 4000, 4096]) | st.integers(0, 4096)
sizes = st.lists(body_size, min_size=1, max_size=12)
magics = st.sampled_from([MAGIC_NORMAL, MAGIC_NORMAL, MAGIC_NORMAL, MAGIC_NOOP, MAGIC_CONFIG])


def _bodies(sizes: list[int], salt: int, magic: int = MAGIC_NORMAL) -> list[bytes]:
    """Bodies of `sizes`; one only for a CONFIG append, which holds exactly one."""
    if magic == MAGIC_CONFIG:
        sizes = sizes[:1]
    return [bytes((salt + i + j) % 251 for j in range(n)) for i, n in enumerate(sizes)]


def _files(directory: str, subs: tuple[str, ...] = ("data", "index")) -> dict[str, bytes]:
    """The store's files and their bytes. The filler thread makes the next segment ahead and unlinks it
    again when a truncation overtook it, so a file listed may be gone when opened: it is not there."""
    out = {}
    for sub in subs:
        d = os.path.join(directory, sub)
        for name in os.listdir(d):
            try:
                with open(os.path.join(d, name), "rb") as f:
                    out[os.path.join(d, name)] = f.read()
            except FileNotFoundError:
                continue
    return out


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="qlstate")
        self.dir = os.path.join(self.tmp, "s")
        self.mem = MemoryStore(CFG)
        self.fs = FileStore(self.dir, CFG)
        self.salt = 0
        self.synced_files: dict[str, bytes] = {}
        self._snapshot()

    # -- helpers ---------------------------------------------------------------------------------
    def _snapshot(self, subs: tuple[str, ...] = ("data", "index")) -> None:
        """Record what is durable: the files synced now, and the log as of the last data sync."""
        self.synced_files.update(_files(self.dir, subs))
        if "data" in subs:
            self.synced_log = log_of(self.fs)

    def _prune_snapshot(self) -> None:
        present = set(_files(self.dir))
        self.synced_files = {p: b for p, b in self.synced_files.items() if p in present}

    def _drop_fs(self) -> None:
        """Stop without flushing or closing: only the file descriptors (and the lock) go."""
        self.fs.abandon()

    def _log(self, store: Any) -> list[Any]:
        return log_of(store)

    def _resync_after_crash(self) -> None:
        mem_log = self._log(self.mem)
        fs_log = self._log(self.fs)
        assert fs_log[:len(mem_log)] == mem_log
        assert self.fs.committed_index == self.mem.committed_index
        if self.fs.end_index > self.mem.end_index:
            self.fs.truncate_after(self.mem.end_index)

    # -- rules -----------------------------------------------------------------------------------
    @rule(sizes=sizes, dterm=st.integers(0, 2), magic=magics)
    def append(self, sizes: list[int], dterm: int, magic: int) -> None:
        self.salt += 1
        bodies = _bodies(sizes, self.salt, magic)
        term = self.mem.end_term + dterm
        a = self.mem.append(bodies, term, magic)
        b = self.fs.append(bodies, term, magic)
        assert a == b

    @precondition(lambda self: self.mem.end_term > 0)
    @rule()
    def append_lower_term(self) -> None:
        for s in (self.mem, self.fs):
            with pytest.raises(InvalidArgumentError):
                s.append([b"x"], s.end_term - 1)

    @rule(sizes=sizes, dterm=st.integers(0, 2), magic=magics, chunk=st.integers(1, 5))
    def follower_append(self, sizes: list[int], dterm: int, magic: int, chunk: int) -> None:
        leader = MemoryStore(CFG)
        leader.reset(*bounds_of(self.mem))
        if self.mem.end_index >= self.mem.begin_index:
            leader.append_encoded(self.mem.read_raw(self.mem.begin_index, *ALL)[0])
        self.salt += 1
        leader.append(_bodies(sizes, self.salt, magic), leader.end_term + dterm, magic)
        start = self.mem.end_index + 1
        while start <= leader.end_index:
            raw, n = leader.read_raw(start, chunk, 1 << 20)
            assert self.mem.append_encoded(raw) == start + n - 1
            assert self.fs.append_encoded(raw) == start + n - 1
            start += n
        assert self._log(self.mem) == self._log(leader)

    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        lo = self.mem.begin_index - 2
        idx = data.draw(st.integers(lo, self.mem.end_index + 1))
        if idx < self.mem.committed_index or idx < self.mem.begin_index - 1:
            for s in (self.mem, self.fs):
                with pytest.raises(StoreError):
                    s.truncate_after(idx)
        else:
            self.mem.truncate_after(idx)
            self.fs.truncate_after(idx)
        self._prune_snapshot()

    @rule(data=st.data())
    def expire(self, data: st.DataObject) -> None:
        safe = data.draw(st.integers(self.mem.begin_index - 1, self.mem.end_index))
        assert self.mem.expire(safe, 1e12) == self.fs.expire(safe, 1e12)  # every segment is old then
        self._prune_snapshot()
        self._snapshot(("index",))  # expiry checkpoints, which syncs the index

    @rule(gap=st.integers(0, 3), skip=st.integers(0, 3 * CFG.data_segment_bytes), dterm=st.integers(0, 2),
          chain=st.integers(0, (1 << 32) - 1))
    def reset(self, gap: int, skip: int, dterm: int, chain: int) -> None:
        """A log reset to a leader's begin: past our committed index, anywhere past our end."""
        begin = self.mem.committed_index + 1 + gap
        pos = place(self.mem.write_pos + skip, HEADER_SIZE, CFG.data_segment_bytes)  # where an entry can start
        args = (begin, pos, chain, self.mem.end_term + dterm)
        self.mem.reset(*args)
        self.fs.reset(*args)
        self._prune_snapshot()
        self._snapshot()  # the empty log is durable

    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        idx = data.draw(st.integers(max(-1, self.mem.committed_index - 1), self.mem.end_index + 2))
        self.mem.set_committed(idx)
        self.fs.set_committed(idx)

    @rule()
    def flush(self) -> None:
        assert self.mem.flush() == self.fs.flush() == self.mem.end_index
        self._snapshot(("data",))

    @rule()
    def checkpoint(self) -> None:
        self.mem.checkpoint()
        self.fs.checkpoint()
        self._snapshot(("index",))

    @rule()
    def reopen(self) -> None:
        self.mem.close()
        self.fs.close()
        self.fs = FileStore(self.dir, CFG)
        self._snapshot()  # close flushed everything

    @rule()
    def process_crash(self) -> None:
        before = self._log(self.fs)
        self.mem.crash()
        self._drop_fs()
        self.fs = FileStore(self.dir, CFG)
        assert self._log(self.fs) == before  # the page cache kept every write
        self._snapshot()  # recovery synced what it found
        self._resync_after_crash()

    @rule()
    def power_loss(self) -> None:
        self.mem.crash()
        self._drop_fs()
        self._prune_snapshot()
        for path, now in _files(self.dir).items():
            with open(path, "r+b") as f:
                f.write(self.synced_files.get(path, bytes(len(now))))
        self.fs = FileStore(self.dir, CFG)
        fs_log = self._log(self.fs)
        synced = [e for e in self.synced_log if e[0] >= self.fs.begin_index]  # expiry may have moved the begin
        assert fs_log == synced[:len(fs_log)], "a write that was never synced survived"
        self._snapshot()
        self._resync_after_crash()

    @rule(data=st.data(), include_control=st.booleans())
    def read(self, data: st.DataObject, include_control: bool) -> None:
        if self.mem.end_index < self.mem.begin_index:
            return
        start = data.draw(st.integers(self.mem.begin_index, self.mem.end_index))
        count = data.draw(st.integers(0, 20))
        nbytes = data.draw(st.integers(0, 20000))
        assert self.mem.read(start, count, nbytes, include_control) == \
            self.fs.read(start, count, nbytes, include_control)
        raw, n = self.fs.read_raw(start, count, nbytes)
        assert self.mem.read_raw(start, count, nbytes) == (raw, n)
        for store in (self.mem, self.fs):
            parts, m = store.read_raw_parts(start, count, nbytes, include_control)
            assert (b"".join(parts), m) == (raw if include_control else drop_control(raw), n)
        assert self.mem.get(start) == self.fs.get(start)

    # -- checks ----------------------------------------------------------------------------------
    @invariant()
    def same_state(self) -> None:
        assert state_of(self.mem) == state_of(self.fs)
        assert bounds_of(self.mem) == bounds_of(self.fs)
        assert self.mem.term_at(self.mem.begin_index - 1) == self.fs.term_at(self.fs.begin_index - 1)
        assert self.mem.durable_index == self.fs.durable_index
        assert self.mem.damage is None and self.fs.damage is None

    @invariant()
    def same_log(self) -> None:
        mem_log = self._log(self.mem)
        assert mem_log == self._log(self.fs)
        if mem_log:
            b = self.mem.begin_index
            assert self.mem.read_raw(b, *ALL) == self.fs.read_raw(b, *ALL)
            assert [self.fs.term_at(e[0]) for e in mem_log] == [e[1] for e in mem_log]

    @invariant()
    def same_configs(self) -> None:
        """Both track the same CONFIG entries: those of the log, and at most one kept below its begin."""
        configs = self.mem.configs
        assert configs == self.fs.configs
        begin = self.mem.begin_index
        held = [(e[0], e[1], e[4]) for e in self._log(self.mem) if e[3] == MAGIC_CONFIG]
        assert [c for c in configs if c[0] >= begin] == held
        assert sum(c[0] < begin for c in configs) <= 1

    def teardown(self) -> None:
        try:
            self.fs.close()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)


StoreMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_file_and_memory_store_agree = StoreMachine.TestCase
