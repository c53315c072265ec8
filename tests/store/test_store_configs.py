"""LogStore.configs: the CONFIG entries both stores track, through appends (a leader's and pushed runs),
cuts, expiry, resets, reopen and crashes; FileStore's `configs` file, checked against the log at open."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from store_helpers import bounds_of, log_of, small_config

from quorumlog.entry import HEADER_SIZE, MAGIC_CONFIG, MAGIC_NOOP, MAGIC_NORMAL, pack_meta
from quorumlog.errors import DiskError, DiskFullError, InvalidArgumentError, StoreError, StoreStateError
from quorumlog.store import MemoryStore, place
from quorumlog.store.configs import FILE, ConfigLog, encode_configs, read_configs, write_configs
from quorumlog.store.file_store import FileStore
from quorumlog.store.vfs import Buffer, OsFiles

CFG = small_config(data_segment_bytes=16 * 1024, index_segment_bytes=32 * 16, max_body_bytes=4096)
SEG = CFG.data_segment_bytes
ALL = (1 << 30, 1 << 40)
LATER = time.time() + 1e7  # every segment is old then
Config = tuple[int, int, bytes]


class ConfigFaults(OsFiles):
    """Injects ENOSPC (or `err`) into the `configs` file's write (`fail_configs`), or into the first pwrite
    after it (`fail_after_configs`: the log write of the entry that the file names), in the test's thread."""

    def __init__(self) -> None:
        self.fail_configs = 0  # fail this many of the next configs writes ...
        self.pass_configs = 0  # ... after letting this many through
        self.fail_after_checkpoint = False  # fail the next configs write after the checkpoint's
        self.fail_after_configs = False
        self.err = errno.ENOSPC
        self._fail_next = False
        self.owner = threading.get_ident()
        self.configs_writes = 0

    def write_atomic(self, path: str, data: bytes) -> None:
        if os.path.basename(path) != FILE:
            super().write_atomic(path, data)
            if os.path.basename(path) == "checkpoint" and self.fail_after_checkpoint:
                self.fail_after_checkpoint = False
                self.fail_configs, self.pass_configs = 1, 0
            return
        if self.fail_configs and self.pass_configs:
            self.pass_configs -= 1
        elif self.fail_configs:
            self.fail_configs -= 1
            raise OSError(self.err, "injected configs write failure")
        super().write_atomic(path, data)
        self.configs_writes += 1
        if self.fail_after_configs:
            self.fail_after_configs = False
            self._fail_next = True

    def pwrite(self, fd: int, data: Buffer | list[Buffer], offset: int) -> None:
        if self._fail_next and threading.get_ident() == self.owner:
            self._fail_next = False
            raise OSError(self.err, "injected log write failure")
        super().pwrite(fd, data, offset)


def _cfg_body(i: int, n: int = 20) -> bytes:
    return (f"members-{i};" * (n // 10 + 1)).encode()[:n]


def configs_in(store: Any) -> list[Config]:
    """The CONFIG entries the log holds, read back."""
    return [(e[0], e[1], e[4]) for e in log_of(store) if e[3] == MAGIC_CONFIG]


class Kinds:
    """Open a MemoryStore or a FileStore (CFG) and reopen it the same way; closes every one at the end."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.opened: list[FileStore] = []

    def open(self, kind: str, name: str = "s", **kwargs: Any) -> Any:
        if kind == "memory":
            return MemoryStore(CFG)
        s = FileStore(self.tmp / name, CFG, **kwargs)
        self.opened.append(s)
        return s

    def reopen(self, s: Any, name: str = "s", **kwargs: Any) -> Any:
        s.close()
        if isinstance(s, MemoryStore):
            return s
        return self.open("file", name, **kwargs)

    def close_all(self) -> None:
        for s in self.opened:
            try:
                s.close()
            except Exception:
                s.abandon()


@pytest.fixture
def kinds(tmp_path: Path) -> Iterator[Kinds]:
    k = Kinds(tmp_path)
    yield k
    k.close_all()


both = pytest.mark.parametrize("kind", ["memory", "file"])


# -- appends ------------------------------------------------------------------------------------------------
@both
def test_leader_appends_track_config_entries(kinds: Kinds, kind: str) -> None:
    s = kinds.open(kind)
    assert s.configs == ()
    s.append([b"a", b"b"], 1)
    s.append([_cfg_body(1)], 1, MAGIC_CONFIG)
    s.append([b"c"], 1, MAGIC_NOOP)
    s.append([b"d"] * 3, 2)
    s.append([_cfg_body(2, 300)], 3, MAGIC_CONFIG)
    want = ((2, 1, _cfg_body(1)), (7, 3, _cfg_body(2, 300)))
    assert s.configs == want == tuple(configs_in(s))
    s = kinds.reopen(s)
    assert s.configs == want


@both
@pytest.mark.parametrize("bodies, metas", [([], None), ([b"x", b"y"], None), ([b"x"], {0: pack_meta(1, 0, 1, 0)})],
                         ids=["none", "two", "metadata"])
def test_config_append_holds_one_body_without_metadata(kinds: Kinds, kind: str, bodies: list[bytes],
                                                       metas: dict[int, bytes] | None) -> None:
    s = kinds.open(kind)
    s.append([_cfg_body(0)], 1, MAGIC_CONFIG)
    before = (s.end_index, s.write_pos, s.configs)
    with pytest.raises(InvalidArgumentError):
        s.append(bodies, 1, MAGIC_CONFIG, metas)
    assert (s.end_index, s.write_pos, s.configs) == before
    with pytest.raises(InvalidArgumentError):  # the term check stands for a CONFIG append too
        s.append([b"x"], 0, MAGIC_CONFIG)
    assert s.configs == before[2]


@st.composite
def leader_ops(draw: st.DrawFn) -> list[tuple[str, Any]]:
    """A leader's appends: normal batches (some with producer metadata), NOOPs and CONFIG entries, of sizes
    that make the runs cross segment ends."""
    ops: list[tuple[str, Any]] = []
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["normal", "normal", "meta", "noop", "config"]))
        dterm = draw(st.integers(0, 1))
        if kind == "config":
            ops.append((kind, (dterm, draw(st.integers(0, 4096)))))
        else:
            ops.append((kind, (dterm, draw(st.lists(st.sampled_from([0, 5, 300, 2000, 4000]), min_size=1,
                                                    max_size=6)))))
    return ops


def build_leader(ops: list[tuple[str, Any]]) -> MemoryStore:
    leader = MemoryStore(CFG)
    for n, (kind, (dterm, arg)) in enumerate(ops):
        term = leader.end_term + dterm + (1 if leader.end_term == 0 else 0)
        if kind == "config":
            leader.append([bytes([n % 251]) * arg], term, MAGIC_CONFIG)
        elif kind == "noop":
            leader.append([b""] * len(arg), term, MAGIC_NOOP)
        else:
            bodies = [bytes([(n + j) % 251]) * size for j, size in enumerate(arg)]
            metas = {0: pack_meta(7, n, len(bodies), 0)} if kind == "meta" else None
            leader.append(bodies, term, MAGIC_NORMAL, metas)
    return leader


def push(leader: Any, followers: list[Any], chunk: int) -> None:
    start = followers[0].end_index + 1
    while start <= leader.end_index:
        raw, n = leader.read_raw(start, chunk, 1 << 20)
        for f in followers:
            assert f.append_encoded(raw) == start + n - 1
        start += n


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=leader_ops(), chunk=st.integers(1, 40), metas=st.booleans())
def test_pushed_runs_track_config_entries(ops: list[tuple[str, Any]], chunk: int, metas: bool) -> None:
    leader = build_leader(ops)
    want = configs_in(leader)
    assert list(leader.configs) == want
    d = tempfile.mkdtemp(prefix="qlcfg")
    try:
        fs = FileStore(os.path.join(d, "s"), CFG)
        mem = MemoryStore(CFG)
        if metas:  # the run with its metadata, as a follower writes pushed entries
            start = 0
            while start <= leader.end_index:
                raw, n = leader.read_raw(start, chunk, 1 << 20)
                assert fs.append_encoded_metas(raw)[0] == mem.append_encoded_metas(raw)[0] == start + n - 1
                start += n
        else:
            push(leader, [fs, mem], chunk)
        assert list(mem.configs) == list(fs.configs) == want
        fs.close()
        fs = FileStore(os.path.join(d, "s"), CFG)
        assert list(fs.configs) == want
        fs.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)


# -- cuts, expiry, reset ----------------------------------------------------------------------------------
@both
def test_truncation_restores_the_previous_config(kinds: Kinds, kind: str) -> None:
    s = kinds.open(kind)
    s.append([b"a"] * 3, 1)
    s.append([_cfg_body(1)], 1, MAGIC_CONFIG)  # 3
    s.append([b"b"] * 3, 1)
    s.append([_cfg_body(2)], 2, MAGIC_CONFIG)  # 7
    s.append([b"c"], 2)
    s.truncate_after(8)
    assert [c[0] for c in s.configs] == [3, 7]
    s.truncate_after(6)
    assert s.configs == ((3, 1, _cfg_body(1)),)
    if isinstance(s, FileStore):  # rewritten at once
        assert read_configs(s.dir) == s.configs
    s.append([_cfg_body(3)], 3, MAGIC_CONFIG)  # 7 again, another entry
    assert s.configs == ((3, 1, _cfg_body(1)), (7, 3, _cfg_body(3)))
    s = kinds.reopen(s)
    assert s.configs == ((3, 1, _cfg_body(1)), (7, 3, _cfg_body(3)))
    s.set_committed(1)
    s.discard_after(2)
    assert s.configs == ()
    s = kinds.reopen(s)
    assert s.configs == ()


@both
def test_mark_damaged_cuts_configs_too(kinds: Kinds, kind: str) -> None:
    s = kinds.open(kind)
    s.append([_cfg_body(0)], 1, MAGIC_CONFIG)
    s.append([b"a"] * 3, 1)
    s.append([_cfg_body(1)], 1, MAGIC_CONFIG)  # 4
    s.mark_damaged(4, "test")
    assert s.configs == ((0, 1, _cfg_body(0)),)


def _entries_with_configs(s: Any, n: int = 40) -> None:
    """n entries of 1500 bytes (about ten a segment), every fifth a CONFIG entry; all committed, durable."""
    for i in range(n):
        if i % 5 == 2:
            s.append([_cfg_body(i, 1500)], 1 + i // 10, MAGIC_CONFIG)
        else:
            s.append([bytes([i + 1]) * 1500], 1 + i // 10)
    s.set_committed(s.end_index)
    s.flush()


@both
def test_expiry_keeps_the_last_config_below_the_begin(kinds: Kinds, kind: str) -> None:
    s = kinds.open(kind)
    _entries_with_configs(s, 60)
    every = configs_in(s)
    assert [c[0] for c in every] == list(range(2, 60, 5))
    begins = []
    for safe in (5, 13, 14, 25, 33, 48):
        s.expire(safe, LATER)
        begin = s.begin_index
        begins.append(begin)
        want = [c for c in every if c[0] < begin][-1:] + [c for c in every if c[0] >= begin]
        assert list(s.configs) == want
        s = kinds.reopen(s)
        assert list(s.configs) == want
    assert len(set(begins)) >= 4 and begins[-1] >= 40  # the base moved on several times
    assert s.expire(s.end_index, LATER) == 0 or s.begin_index <= s.end_index
    assert s.configs[0][0] < s.begin_index


@both
def test_reset_keeps_the_last_below_the_begin_and_set_base_config_replaces_it(kinds: Kinds, kind: str) -> None:
    s = kinds.open(kind)
    s.append([b"a"] * 2, 1)
    s.append([_cfg_body(2)], 1, MAGIC_CONFIG)  # 2
    s.append([b"b"] * 2, 1)
    s.append([_cfg_body(5)], 2, MAGIC_CONFIG)  # 5
    s.append([b"c"] * 3, 2)
    s.append([_cfg_body(9)], 2, MAGIC_CONFIG)  # 9
    s.set_committed(3)
    pos = place(s.write_pos + 100, HEADER_SIZE, SEG)
    s.reset(7, pos, 1234, 2)
    assert s.configs == ((5, 2, _cfg_body(5)),)  # 9 was at or past the begin, 2 not the last below it
    with pytest.raises(InvalidArgumentError):
        s.set_base_config(7, 2, b"x")  # at the begin: not below it
    with pytest.raises(InvalidArgumentError):
        s.set_base_config(-1, 2, b"x")
    assert s.configs == ((5, 2, _cfg_body(5)),)
    s.set_base_config(4, 2, b"leader's")
    assert s.configs == ((4, 2, b"leader's"),)
    s.append([_cfg_body(7)], 3, MAGIC_CONFIG)
    s.append([b"d"], 3)
    assert s.configs == ((4, 2, b"leader's"), (7, 3, _cfg_body(7)))
    s.set_base_config(6, 2, b"again")  # replaces the base only
    assert s.configs == ((6, 2, b"again"), (7, 3, _cfg_body(7)))
    s = kinds.reopen(s)
    assert s.configs == ((6, 2, b"again"), (7, 3, _cfg_body(7)))
    s.clear_base_config()
    assert s.configs == ((7, 3, _cfg_body(7)),)
    s = kinds.reopen(s)
    assert s.configs == ((7, 3, _cfg_body(7)),)
    # a reset past the end: every entry is below the new begin, the last CONFIG one stays
    s.reset(20, place(s.write_pos, HEADER_SIZE, SEG), 99, 5)
    assert s.configs == ((7, 3, _cfg_body(7)),)
    s = kinds.reopen(s)
    assert s.configs == ((7, 3, _cfg_body(7)),)


def test_memory_store_crash_hooks_follow_the_log() -> None:
    s = MemoryStore(CFG)
    s.append([_cfg_body(0)], 1, MAGIC_CONFIG)
    s.append([b"a"] * 3, 1)
    s.flush()
    s.checkpoint()
    s.append([_cfg_body(4)], 1, MAGIC_CONFIG)  # unflushed: a crash loses it
    s.crash()
    assert s.configs == ((0, 1, _cfg_body(0)),)
    s.append([_cfg_body(4)], 2, MAGIC_CONFIG)
    s.append([_cfg_body(5)], 2, MAGIC_CONFIG)
    s.rot_tail(5)
    assert [c[0] for c in s.configs] == [0, 4]
    s.truncate_to_durable()
    assert [c[0] for c in s.configs] == [0]
    s.lose_from(0)
    assert s.configs == ()


# -- FileStore: the configs file ---------------------------------------------------------------------------
def test_no_configs_file_without_config_entries(tmp_path: Path) -> None:
    s = FileStore(tmp_path / "s", CFG)
    for i in range(30):
        s.append([bytes([i + 1]) * 1500], 1)
    s.set_committed(20)
    s.flush()
    s.truncate_after(25)
    s.expire(20, LATER)
    s.reset(40, place(s.write_pos, HEADER_SIZE, SEG), 5, 1)
    s.close()
    assert not os.path.exists(tmp_path / "s" / FILE)
    assert FileStore(tmp_path / "s", CFG).configs == ()


def _closed_store_with_configs(d: Path) -> list[Config]:
    s = FileStore(d, CFG)
    s.append([b"a"] * 2, 1)
    s.append([_cfg_body(2)], 1, MAGIC_CONFIG)
    s.append([b"b"] * 2, 2)
    s.append([_cfg_body(5)], 2, MAGIC_CONFIG)
    s.append([b"c"], 2)
    s.set_committed(s.end_index)
    got = list(s.configs)
    s.close()
    assert read_configs(str(d)) == tuple(got)
    return got


@pytest.mark.parametrize("phantom", ["past-end", "on-a-normal-entry", "other-term", "other-body"])
def test_open_drops_entries_the_log_does_not_hold(tmp_path: Path, phantom: str) -> None:
    """A crash between the configs file's write and the entry's (or a write that failed) leaves the file
    naming an entry the log does not hold: open drops it and rewrites the file."""
    d = tmp_path / "s"
    real = _closed_store_with_configs(d)
    extra: Config
    if phantom == "past-end":
        written = real + [(6, 3, b"never written")]
    elif phantom == "on-a-normal-entry":
        written = real + [(6, 2, b"x")]
        s = FileStore(d, CFG)
        s.append([b"normal"], 2)  # entry 6
        s.close()
    else:
        extra = (5, 9, _cfg_body(5)) if phantom == "other-term" else (5, 2, b"other")
        written = real[:1] + [extra]
        real = real[:1]
    write_configs(OsFiles(), str(d), written)
    s = FileStore(d, CFG)
    try:
        assert list(s.configs) == real
        assert any("dropped CONFIG entry" in n for n in s.notes)
        assert read_configs(str(d)) == tuple(real)  # rewritten
    finally:
        s.close()


def test_torn_config_entry_leaves_configs(tmp_path: Path) -> None:
    d = tmp_path / "s"
    real = _closed_store_with_configs(d)
    s = FileStore(d, CFG)
    a = s.append([_cfg_body(6, 500)], 3, MAGIC_CONFIG)
    assert s.configs[-1][0] == a.first_index
    s.abandon()  # a crash: the entry is in the page cache, unsynced, and the file names it
    assert read_configs(str(d))[-1][0] == a.first_index  # type: ignore[index]
    pos = a.positions[0]
    with open(d / "data" / f"{pos - pos % SEG:020d}", "r+b") as f:  # torn: its body never reached the disk
        f.seek(pos % SEG + HEADER_SIZE + 100)
        f.write(b"\xa5" * 200)
    s = FileStore(d, CFG)
    try:
        assert s.end_index == a.first_index - 1
        assert list(s.configs) == real
        assert read_configs(str(d)) == tuple(real)
        b = s.append([_cfg_body(7)], 3, MAGIC_CONFIG)  # the same index, another entry
        assert s.configs[-1] == (b.first_index, 3, _cfg_body(7)) and b.first_index == a.first_index
    finally:
        s.close()


def test_damage_cut_at_recovery_leaves_configs(tmp_path: Path) -> None:
    d = tmp_path / "s"
    s = FileStore(d, CFG)
    s.append([_cfg_body(0)], 1, MAGIC_CONFIG)
    s.append([b"a"] * 3, 1)
    s.append([_cfg_body(4, 600)], 1, MAGIC_CONFIG)
    s.flush()
    pos = s.get(4).pos
    s.close()
    with open(d / "data" / f"{pos - pos % SEG:020d}", "r+b") as f:
        f.seek(pos % SEG + HEADER_SIZE + 10)
        f.write(b"rot")
    with pytest.raises(StoreError):
        FileStore(d, CFG)  # a durable entry is damaged: refused unless repairing
    s = FileStore(d, CFG, repair=True)
    try:
        assert s.damage is not None and s.end_index == 3
        assert s.configs == ((0, 1, _cfg_body(0)),)
    finally:
        s.close()


def test_config_whose_log_copy_rotted_is_kept(tmp_path: Path) -> None:
    """A CONFIG entry below the recovery anchor that no longer reads back: the file (written before it)
    still knows it, and open keeps it rather than forget the configuration; reads meet the damage."""
    d = tmp_path / "s"
    s = FileStore(d, CFG)
    s.append([b"a"], 1)
    s.append([_cfg_body(1, 600)], 1, MAGIC_CONFIG)
    s.append([b"b"] * 5, 1)
    s.set_committed(s.end_index)
    s.close()
    pos = 0 + HEADER_SIZE + 1  # entry 1 follows entry 0 (body b"a")
    with open(d / "data" / f"{0:020d}", "r+b") as f:
        f.seek(pos + HEADER_SIZE + 10)
        f.write(b"rot")
    s = FileStore(d, CFG)
    try:
        assert s.configs == ((1, 1, _cfg_body(1, 600)),)
        assert any("kept CONFIG entry 1" in n for n in s.notes)
    finally:
        s.close()


@pytest.mark.parametrize("damage", ["flipped", "truncated", "empty", "magic", "not-a-list", "bad-entry",
                                    "unordered"])
def test_damaged_configs_file_refuses_the_open(tmp_path: Path, damage: str) -> None:
    d = tmp_path / "s"
    real = _closed_store_with_configs(d)
    path = d / FILE
    good = path.read_bytes()

    def framed(payload: bytes) -> bytes:
        import zlib
        return b"QLCF" + zlib.crc32(payload).to_bytes(4, "big") + payload

    bad = {
        "flipped": good[:-3] + bytes([good[-3] ^ 1]) + good[-2:],
        "truncated": good[:len(good) // 2],
        "empty": b"",
        "magic": b"XXXX" + good[4:],
        "not-a-list": framed(msgpack.packb({"a": 1})),
        "bad-entry": framed(msgpack.packb([[1, "x", b"y"]])),
        "unordered": encode_configs(list(reversed(real))),
    }[damage]
    path.write_bytes(bad)
    with pytest.raises(StoreStateError, match=str(path)):
        FileStore(d, CFG)
    path.write_bytes(good)  # nothing else changed: the store opens as it was
    s = FileStore(d, CFG)
    try:
        assert list(s.configs) == real
    finally:
        s.close()


def test_missing_configs_file_means_none(tmp_path: Path) -> None:
    """A store written before stores tracked CONFIG entries has no file: no CONFIG entries."""
    d = tmp_path / "s"
    s = FileStore(d, CFG)
    s.append([b"a"] * 3, 1)
    s.close()
    assert not (d / FILE).exists()
    s = FileStore(d, CFG)
    assert s.configs == ()
    s.close()


def test_config_append_fails_whole_when_the_configs_file_cannot_be_written(tmp_path: Path) -> None:
    files = ConfigFaults()
    s = FileStore(tmp_path / "s", CFG, files=files)
    s.append([_cfg_body(0)], 1, MAGIC_CONFIG)
    before = (s.end_index, s.write_pos, s.configs)
    files.fail_configs = 1
    with pytest.raises(DiskFullError):
        s.append([_cfg_body(1)], 1, MAGIC_CONFIG)
    assert (s.end_index, s.write_pos, s.configs) == before
    s.append([_cfg_body(1)], 1, MAGIC_CONFIG)
    assert s.configs == (*before[2], (1, 1, _cfg_body(1)))
    files.fail_configs, files.err = 1, errno.EIO
    with pytest.raises(DiskError):
        s.append([_cfg_body(2)], 1, MAGIC_CONFIG)
    s.abandon()
    s = FileStore(tmp_path / "s", CFG)
    assert s.configs == (*before[2], (1, 1, _cfg_body(1)))
    s.close()


@pytest.mark.parametrize("then", ["expire", "reset", "truncate", "reopen"])
def test_a_failed_log_write_never_leaves_its_config_behind(tmp_path: Path, then: str) -> None:
    """The file names the CONFIG entry, its log write fails (out of space): the store goes on without it,
    and neither a later expiry or reset (after which open checks nothing below the begin) nor a crash lets
    it come back, even when the rewrite after them fails too."""
    files = ConfigFaults()
    d = tmp_path / "s"
    s = FileStore(d, CFG, files=files)
    s.append([_cfg_body(0)], 1, MAGIC_CONFIG)
    s.append([bytes([1]) * 1500] * 3, 1)
    files.fail_after_configs = True
    with pytest.raises(DiskFullError):
        s.append([_cfg_body(4, 1500)], 2, MAGIC_CONFIG)
    assert s.configs == ((0, 1, _cfg_body(0)),) and s.end_index == 3
    assert read_configs(str(d))[-1][0] == 4  # type: ignore[index]  # the phantom, until the next rewrite
    for i in range(30):  # entry 4 is a normal one now
        s.append([bytes([i + 2]) * 1500], 2)
    s.set_committed(10 if then == "truncate" else s.end_index)
    s.flush()
    # Expiry and reset first rewrite the file, still naming entry 4, from what the store holds: that must
    # work (else they refuse, nothing done). The rewrite after the checkpoint named the removal fails, as a
    # crash there would.
    files.fail_after_checkpoint = True
    if then == "expire":
        assert s.expire(20, LATER) > 0 and s.begin_index > 4
    elif then == "reset":
        s.reset(s.end_index + 1, place(s.write_pos, HEADER_SIZE, SEG), 7, 2)
    elif then == "truncate":
        s.truncate_after(10)
    files.fail_configs, files.fail_after_checkpoint = 0, False
    want = s.configs
    assert want == ((0, 1, _cfg_body(0)),)
    s.abandon()
    s = FileStore(d, CFG)
    try:
        assert s.configs == want
    finally:
        s.close()


def test_expiry_interrupted_before_the_configs_rewrite(tmp_path: Path) -> None:
    """Expiry names the new begin in the checkpoint, then rewrites the file: a crash in between leaves the
    old list, which open cuts to the begin alike."""
    files = ConfigFaults()
    d = tmp_path / "s"
    s = FileStore(d, CFG, files=files)
    _entries_with_configs(s)
    files.fail_configs = 1
    assert s.expire(30, LATER) > 0
    want = s.configs
    assert want[0][0] < s.begin_index and len(read_configs(str(d)) or ()) > len(want)  # not rewritten
    s.abandon()
    s = FileStore(d, CFG)
    try:
        assert s.configs == want
        assert read_configs(str(d)) == want  # open rewrote it
    finally:
        s.close()


def test_set_base_config_is_durable_or_refused(tmp_path: Path) -> None:
    files = ConfigFaults()
    d = tmp_path / "s"
    s = FileStore(d, CFG, files=files)
    s.append([_cfg_body(0)], 1, MAGIC_CONFIG)
    s.reset(10, place(s.write_pos, HEADER_SIZE, SEG), 3, 1)
    files.fail_configs = 1
    with pytest.raises(DiskFullError):
        s.set_base_config(8, 1, b"leader's")
    with pytest.raises(DiskFullError):
        files.fail_configs = 1
        s.clear_base_config()
    assert s.configs == ((0, 1, _cfg_body(0)),)
    s.set_base_config(8, 1, b"leader's")
    s.abandon()
    s = FileStore(d, CFG)
    assert s.configs == ((8, 1, b"leader's"),)
    s.close()


def test_config_log_rules() -> None:
    log = ConfigLog([(1, 1, b"a"), (4, 1, b"b"), (9, 2, b"c")])
    assert not log.expire_before(4) and log.entries[0][0] == 1  # one below: it stays
    assert log.expire_before(5) and [c[0] for c in log.entries] == [4, 9]
    assert not log.cut_after(9) and log.cut_after(8) and [c[0] for c in log.entries] == [4]
    log.add([(10, 3, bytearray(b"d"))])
    assert log.entries[-1] == (10, 3, b"d") and type(log.entries[-1][2]) is bytes
    assert log.reset_to(5) and log.entries == ((4, 1, b"b"),)  # 10, past the new begin, goes
    same = log.entries
    assert not log.reset_to(20) and log.entries is same  # the one below stays; unchanged, the same tuple
    log.add([(21, 3, b"d"), (23, 3, b"e")])
    assert log.reset_to(22) and log.entries == ((21, 3, b"d"),)  # of 4 and 21 below 22, the last
    assert not log.clear_base(21) and log.clear_base(22) and log.entries == ()
    with pytest.raises(InvalidArgumentError):
        log.set_base(5, 1, b"x", 5)


# -- the model --------------------------------------------------------------------------------------------
body_sizes = st.lists(st.sampled_from([0, 1, 40, 700, 1500, 3000, 4000]) | st.integers(0, 4096), min_size=1,
                      max_size=8)


fails = st.sampled_from(["no", "no", "first", "after-checkpoint"])


class ConfigsMachine(RuleBasedStateMachine):
    """A FileStore and a MemoryStore under the same random appends (normal, CONFIG; a leader's and pushed),
    truncations, expiry, resets, base configurations, reopen, crashes, torn tails and failed writes: after
    every step both track the CONFIG entries that a plain reference computes from the entries of the log
    and the base it last saw go below the begin."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="qlcfgm")
        self.dir = os.path.join(self.tmp, "s")
        self.files = ConfigFaults()
        self.fs = FileStore(self.dir, CFG, files=self.files)
        self.mem = MemoryStore(CFG)
        self.base: Config | None = None  # the reference's configuration in force below the begin
        self.salt = 0

    # -- the reference ---------------------------------------------------------------------------------
    def _held(self) -> list[Config]:
        return configs_in(self.mem)

    def reference(self) -> tuple[Config, ...]:
        return (*([self.base] if self.base else []), *self._held())

    def _begin_moved(self, held_before: list[Config], begin: int) -> None:
        """The log now begins at `begin`: the last CONFIG entry that went below it is the base."""
        below = [c for c in held_before if c[0] < begin]
        if below:
            self.base = below[-1]

    # -- rules -----------------------------------------------------------------------------------------
    @rule(sizes=body_sizes, dterm=st.integers(0, 1), noop=st.booleans())
    def append(self, sizes: list[int], dterm: int, noop: bool) -> None:
        self.salt += 1
        bodies = [bytes([(self.salt + i) % 251]) * n for i, n in enumerate(sizes)]
        term = self.mem.end_term + dterm
        magic = MAGIC_NOOP if noop else MAGIC_NORMAL
        assert self.mem.append(bodies, term, magic) == self.fs.append(bodies, term, magic)

    @rule(size=st.integers(0, 4096), dterm=st.integers(0, 1))
    def append_config(self, size: int, dterm: int) -> None:
        self.salt += 1
        body = bytes([self.salt % 251]) * size
        term = self.mem.end_term + dterm
        assert self.mem.append([body], term, MAGIC_CONFIG) == self.fs.append([body], term, MAGIC_CONFIG)

    @rule(kinds=st.lists(st.sampled_from(["n", "n", "c", "m"]), min_size=1, max_size=10), size=st.integers(0, 3000),
          dterm=st.integers(0, 1), chunk=st.integers(1, 6))
    def follower_append(self, kinds: list[str], size: int, dterm: int, chunk: int) -> None:
        leader = MemoryStore(CFG)
        leader.reset(*bounds_of(self.mem))
        if self.mem.end_index >= self.mem.begin_index:
            leader.append_encoded(self.mem.read_raw(self.mem.begin_index, *ALL)[0])
        term = leader.end_term + dterm
        for k in kinds:
            self.salt += 1
            body = bytes([self.salt % 251]) * (size if k == "c" else size // 3)
            metas = {0: pack_meta(3, self.salt, 1, 0)} if k == "m" else None
            leader.append([body], term, MAGIC_CONFIG if k == "c" else MAGIC_NORMAL, metas)
        push(leader, [self.mem, self.fs], chunk)

    def _removal(self, fail: str, fs_step: Callable[[], Any], mem_step: Callable[[], Any]) -> bool:
        """Run a removal on the FileStore, with its first `configs` write, or the first after its checkpoint,
        failing out of space (`fail`), then on the MemoryStore unless the FileStore refused it: a rewrite
        before the removal (of a file naming an entry the log lost) fails it whole, one after it is retried
        later."""
        self.files.fail_configs = int(fail == "first")
        self.files.fail_after_checkpoint = fail == "after-checkpoint"
        try:
            fs_step()
        except DiskFullError:
            assert fail == "first" and self.files.fail_configs == 0
            return False
        finally:
            self.files.fail_configs, self.files.fail_after_checkpoint = 0, False
        mem_step()
        return True

    @rule(data=st.data(), fail=fails)
    def truncate(self, data: st.DataObject, fail: str) -> None:
        lo = max(self.mem.committed_index, self.mem.begin_index - 1)
        idx = data.draw(st.integers(lo, self.mem.end_index + 1))
        assert self._removal(fail, lambda: self.fs.truncate_after(idx), lambda: self.mem.truncate_after(idx))

    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        idx = data.draw(st.integers(max(-1, self.mem.committed_index), self.mem.end_index))
        self.mem.set_committed(idx)
        self.fs.set_committed(idx)

    @rule()
    def flush(self) -> None:
        self.mem.flush()
        self.fs.flush()
        self.mem.checkpoint()
        self.fs.checkpoint()

    @rule(data=st.data(), fail=fails)
    def expire(self, data: st.DataObject, fail: str) -> None:
        held = self._held()
        safe = data.draw(st.integers(self.mem.begin_index - 1, self.mem.end_index))
        dropped: list[int] = []
        if self._removal(fail, lambda: dropped.append(self.fs.expire(safe, LATER)),
                         lambda: dropped.append(self.mem.expire(safe, LATER))):
            assert dropped[0] == dropped[1]
            self._begin_moved(held, self.mem.begin_index)

    @rule(gap=st.integers(0, 3), skip=st.integers(0, 2 * SEG), dterm=st.integers(0, 1),
          base=st.sampled_from(["keep", "set", "clear"]), fail=fails, data=st.data())
    def reset(self, gap: int, skip: int, dterm: int, base: str, fail: str, data: st.DataObject) -> None:
        held = self._held()
        begin = self.mem.committed_index + 1 + gap
        args = (begin, place(self.mem.write_pos + skip, HEADER_SIZE, SEG), 77, self.mem.end_term + dterm)
        if not self._removal(fail, lambda: self.fs.reset(*args), lambda: self.mem.reset(*args)):
            return
        self._begin_moved(held, begin)
        if self.base is not None and self.base[0] >= begin:  # (never: the old base lay below the old begin)
            self.base = None
        if base == "set" and begin > 0:
            self.salt += 1
            given = (data.draw(st.integers(0, begin - 1)), data.draw(st.integers(0, 5)), b"leader %d" % self.salt)
            self.mem.set_base_config(*given)
            self.fs.set_base_config(*given)
            self.base = given
        elif base == "clear":
            self.mem.clear_base_config()
            self.fs.clear_base_config()
            self.base = None

    @rule()
    def reopen(self) -> None:
        self.mem.close()
        self.fs.close()
        self.fs = FileStore(self.dir, CFG, files=self.files)

    def _after_crash(self) -> None:
        """The FileStore kept every write (the page cache survives a process crash); the MemoryStore lost
        what was not flushed: cut the FileStore to it."""
        self.mem.crash()
        assert log_of(self.fs)[:len(log_of(self.mem))] == log_of(self.mem)
        if self.fs.end_index > self.mem.end_index:
            self.fs.truncate_after(self.mem.end_index)

    @rule()
    def process_crash(self) -> None:
        self.fs.abandon()
        self.fs = FileStore(self.dir, CFG, files=self.files)
        self._after_crash()

    @rule(size=st.integers(0, 300))
    def crash_between_configs_and_log_write(self, size: int) -> None:
        """The file names the next entry, a CONFIG one, and the process dies before writing it."""
        held = self.fs.configs  # what the store writes: its list and the new entry
        self.fs.abandon()
        self.salt += 1
        phantom = (self.fs.end_index + 1, self.fs.end_term, b"%d:" % self.salt + b"p" * size)
        write_configs(OsFiles(), self.dir, (*held, phantom))
        self.fs = FileStore(self.dir, CFG, files=self.files)
        self._after_crash()

    @precondition(lambda self: self.fs.end_index > max(self.fs.durable_index, self.fs.begin_index - 1))
    @rule()
    def torn_tail(self) -> None:
        """Power fails while the first unflushed entry is written: it is torn, what follows it lost."""
        first = max(self.fs.durable_index, self.fs.begin_index - 1) + 1
        pos = self.fs.get(first).pos
        self.fs.abandon()
        with open(os.path.join(self.dir, "data", f"{pos - pos % SEG:020d}"), "r+b") as f:
            f.seek(pos % SEG + 20)
            f.write(b"\xa5\x5a\xa5\x5a")
        self.fs = FileStore(self.dir, CFG, files=self.files)
        assert self.fs.end_index == first - 1
        self._after_crash()

    @rule(size=st.integers(0, 300))
    def config_log_write_fails(self, size: int) -> None:
        """The file is written, the entry's write runs out of space: nothing is taken."""
        self.files.fail_after_configs = True
        self.salt += 1
        with pytest.raises(DiskFullError):
            self.fs.append([b"%d:" % self.salt + b"f" * size], self.mem.end_term, MAGIC_CONFIG)
        self.files.fail_after_configs = False

    # -- checks --------------------------------------------------------------------------------------------
    @invariant()
    def configs_agree(self) -> None:
        want = self.reference()
        assert self.mem.configs == want
        assert self.fs.configs == want

    @invariant()
    def same_log(self) -> None:
        assert log_of(self.mem) == log_of(self.fs)
        assert bounds_of(self.mem) == bounds_of(self.fs)

    def teardown(self) -> None:
        try:
            self.fs.close()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)


ConfigsMachine.TestCase.settings = settings(
    max_examples=80, stateful_step_count=35, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_configs_model = ConfigsMachine.TestCase
