"""Producer metadata in both stores: written by a leader append, pushed to followers byte for byte,
recovered, verified; and stores written without metadata read exactly as before."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import tempfile
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from store_helpers import MAX_BODY, SEG, StoreFactory, body, small_config

from quorumlog.cli import main as cli_main
from quorumlog.entry import (
    HEADER,
    HEADER_SIZE,
    MAGIC_NOOP,
    MAGIC_NORMAL,
    META_SIZE,
    encode_entry,
    pack_meta,
    replica_digest,
)
from quorumlog.errors import CorruptEntryError, InvalidArgumentError
from quorumlog.store import MemoryStore
from quorumlog.store.file_store import FileStore
from quorumlog.store.verify import verify_store

KINDS = ["memory", "file"]
Expected = list[tuple[int, int, bytes, bytes]]  # (index, magic, body, meta) of each entry


def meta_of(i: int) -> bytes:
    return pack_meta(1000 + i % 3, i, 1 + i % 4, 1_700_000_000_000 + i)


def write_log(s: Any, batches: int, size: int = 900, term: int = 1) -> Expected:
    """Append `batches` batches of 1..8 entries; most batches hold requests that carry metadata (on
    their first entry, as a leader writes them), some none, every fifth is a NOOP. Checks each append."""
    out: Expected = []
    for b in range(batches):
        first = s.end_index + 1
        n = 1 + b % 8
        bodies = [body(first + j, size + (first + j) * 37 % 1500) for j in range(n)]
        magic = MAGIC_NOOP if b % 5 == 4 else MAGIC_NORMAL
        metas = {} if magic == MAGIC_NOOP or b % 3 == 2 else {j: meta_of(first + j) for j in range(0, n, 3)}
        a = s.append(bodies, term, magic, metas or None)
        assert a.first_index == first and len(a.positions) == n
        written = s.read(first, n, 1 << 30)  # the metadata is where the append put it, and only there
        assert [(e.index, e.meta) for e in written if e.meta] == [(first + j, m) for j, m in sorted(metas.items())]
        out += [(first + j, magic, bd, metas.get(j, b"")) for j, bd in enumerate(bodies)]
    return out


def entries_of(s: Any) -> Expected:
    return [(e.index, e.magic, e.body, e.meta) for e in s.read(s.begin_index, 1 << 30, 1 << 40)]


def raw_of(s: Any) -> bytes:
    return s.read_raw(s.begin_index, 1 << 30, 1 << 40)[0]


def check_log(s: Any, expected: Expected) -> None:
    """Reads give bodies and metadata; every entry is as big as header, metadata and body."""
    assert entries_of(s) == expected
    assert [(e.index, e.body, e.meta) for e in s.read(s.begin_index, 1 << 30, 1 << 40, include_control=False)] \
        == [(i, bd, m) for i, magic, bd, m in expected if magic == MAGIC_NORMAL]
    for i, magic, bd, m in expected[::7]:
        e = s.get(i)
        assert (e.magic, e.body, e.meta) == (magic, bd, m)
    raw = raw_of(s)
    off = 0
    for i, _magic, bd, m in expected:
        h = HEADER.unpack_from(raw, off)
        assert (h[1], h[2], h[8]) == (HEADER_SIZE + len(m) + len(bd), i, len(bd))
        assert raw[off + HEADER_SIZE:off + h[1]] == m + bd
        off += h[1]
    assert off == len(raw)


def metas_in(expected: Expected) -> list[tuple[int, bytes]]:
    return [(i, m) for i, _magic, _b, m in expected if m]


# -- leader append and reads -----------------------------------------------------------------------
def test_append_and_read_back_bodies_and_metas(factory: StoreFactory) -> None:
    s = factory.open()
    expected = write_log(s, 40)  # several data segments: batches that cross a segment end split there
    assert s.write_pos > 3 * SEG
    check_log(s, expected)
    s = factory.reopen()
    check_log(s, expected)
    expected += write_log(s, 5, term=2)
    check_log(s, expected)


def test_append_refuses_bad_metadata_and_writes_nothing(factory: StoreFactory) -> None:
    s = factory.open()
    s.append([b"a"], 1, MAGIC_NORMAL, {0: meta_of(0)})
    before = (s.end_index, s.write_pos, raw_of(s))
    for metas in ({0: b"short"}, {0: meta_of(1) + b"x"}, {1: b""}, {2: meta_of(1)}, {-1: meta_of(1)}):
        with pytest.raises(InvalidArgumentError):
            s.append([b"b", b"c"], 1, MAGIC_NORMAL, metas)
    assert (s.end_index, s.write_pos, raw_of(s)) == before


def test_max_body_counts_the_body_only(factory: StoreFactory) -> None:
    s = factory.open()
    s.append([bytes(MAX_BODY)], 1, MAGIC_NORMAL, {0: meta_of(0)})
    assert s.get(0).body == bytes(MAX_BODY) and s.get(0).meta == meta_of(0)
    with pytest.raises(InvalidArgumentError):
        s.append([bytes(MAX_BODY + 1)], 1, MAGIC_NORMAL, {0: meta_of(1)})
    assert s.end_index == 0


def test_truncate_after_an_entry_with_metadata(factory: StoreFactory) -> None:
    s = factory.open()
    expected = write_log(s, 12)
    keep = next(i for i, _magic, _b, m in expected[10:] if m)
    s.truncate_after(keep)
    del expected[keep + 1:]
    e = s.get(keep)
    assert s.write_pos == e.pos + HEADER_SIZE + META_SIZE + len(e.body)
    expected += write_log(s, 4, term=2)
    check_log(s, expected)
    s = factory.reopen()
    check_log(s, expected)


# -- followers -------------------------------------------------------------------------------------
def push_all(leader: Any, follower: Any, chunk: int) -> list[tuple[int, bytes]]:
    """Push the leader's log to the follower as a leader does (read_raw → append_encoded_metas), `chunk`
    entries at a time; return the metadata the follower reported."""
    reported: list[tuple[int, bytes]] = []
    while follower.end_index < leader.end_index:
        raw, n = leader.read_raw(follower.end_index + 1, chunk, 1 << 20)
        end, metas = follower.append_encoded_metas(raw)
        assert end == follower.end_index and n
        reported += metas
    return reported


@pytest.mark.parametrize("leader_kind", KINDS)
@pytest.mark.parametrize("follower_kind", KINDS)
def test_follower_fed_raw_bytes_is_byte_identical(tmp_path: Path, leader_kind: str, follower_kind: str) -> None:
    leader_f = StoreFactory(leader_kind, tmp_path / "leader", small_config())
    follower_f = StoreFactory(follower_kind, tmp_path / "follower", small_config())
    try:
        leader, follower = leader_f.open(), follower_f.open()
        expected = write_log(leader, 30)  # the file leader serves the last 16 batches from memory
        assert push_all(leader, follower, 5) == metas_in(expected)
        assert raw_of(follower) == raw_of(leader)
        check_log(follower, expected)
        assert follower.write_pos == leader.write_pos
        more = write_log(leader, 3, term=3)
        assert push_all(leader, follower, 100) == metas_in(more)
        follower = follower_f.reopen()
        assert raw_of(follower) == raw_of(leader)
        check_log(follower, expected + more)
    finally:
        leader_f.close_all()
        follower_f.close_all()


def test_append_encoded_takes_entries_with_metadata(factory: StoreFactory) -> None:
    leader = MemoryStore(small_config())
    expected = write_log(leader, 6)
    s = factory.open()
    assert s.append_encoded(raw_of(leader)) == leader.end_index
    check_log(s, expected)
    assert s.append_encoded_metas(b"") == (leader.end_index, [])


def test_follower_refuses_damaged_metadata_and_writes_nothing(factory: StoreFactory) -> None:
    leader = MemoryStore(small_config())
    leader.append([b"x"], 1, MAGIC_NORMAL, {0: meta_of(0)})
    raw = raw_of(leader)
    s = factory.open()
    bad = bytearray(raw)
    bad[HEADER_SIZE + 5] ^= 0x10
    with pytest.raises(CorruptEntryError, match="body CRC"):
        s.append_encoded_metas(bytes(bad))
    # A run of 20 bytes between header and body: both CRCs right, the sizes wrong.
    odd = bytearray(HEADER.pack(MAGIC_NORMAL, HEADER_SIZE + 21, 0, 1, 0, 0, 0, zlib.crc32(bytes(21)), 1)
                    + bytes(21))
    struct.pack_into(">I", odd, 36, zlib.crc32(odd[40:44], zlib.crc32(odd[:36], 0)))
    with pytest.raises(CorruptEntryError, match="bad sizes"):
        s.append_encoded_metas(bytes(odd))
    assert s.end_index == -1 and s.write_pos == 0
    assert s.append_encoded_metas(raw) == (0, [(0, meta_of(0))])


@settings(max_examples=25, deadline=None)
@given(batches=st.lists(st.tuples(st.lists(st.integers(0, MAX_BODY), min_size=1, max_size=10), st.data()),
                        min_size=1, max_size=12))
def test_file_and_memory_stores_agree_byte_for_byte(batches: list[tuple[list[int], st.DataObject]]) -> None:
    """Any batches with metadata anywhere in them: both stores place and encode them alike, and a
    follower of either holds the same bytes and reports the same metadata."""
    with tempfile.TemporaryDirectory() as d:
        memory = MemoryStore(small_config())
        file = FileStore(Path(d) / "leader", small_config())
        follower = FileStore(Path(d) / "follower", small_config())
        try:
            expected: Expected = []
            for sizes, data in batches:
                offsets = data.draw(st.sets(st.integers(0, len(sizes) - 1)))
                first = memory.end_index + 1
                bodies = [body(first + j, n) for j, n in enumerate(sizes)]
                metas = {j: meta_of(first + j) for j in offsets}
                a, b = memory.append(bodies, 1, MAGIC_NORMAL, metas), file.append(bodies, 1, MAGIC_NORMAL, metas)
                assert a == b
                expected += [(first + j, MAGIC_NORMAL, bd, metas.get(j, b"")) for j, bd in enumerate(bodies)]
            assert raw_of(memory) == raw_of(file)
            assert push_all(memory, follower, 7) == metas_in(expected)
            assert raw_of(follower) == raw_of(memory)
            check_log(file, expected)
        finally:
            file.close()
            follower.close()


# -- recovery --------------------------------------------------------------------------------------
def test_file_store_recovers_entries_with_metadata(tmp_path: Path) -> None:
    d = tmp_path / "s"
    cfg = small_config()
    s = FileStore(d, cfg)
    expected = write_log(s, 20)
    s.set_committed(s.end_index)
    s.close()
    s = FileStore(d, cfg)
    check_log(s, expected)
    tail = write_log(s, 6, term=2)
    s.flush()
    s.abandon()  # a crash: the checkpoint does not name the tail, recovery scans it
    s = FileStore(d, cfg)
    check_log(s, expected + tail)
    s.close()
    shutil.rmtree(d / "index")  # every index unit rebuilt by walking the data
    s = FileStore(d, cfg)
    try:
        check_log(s, expected + tail)
        assert any("rebuilt" in note for note in s.notes)
    finally:
        s.close()


def test_a_torn_metadata_run_past_the_durable_end_is_cut(tmp_path: Path) -> None:
    d = tmp_path / "s"
    s = FileStore(d, small_config())
    s.append([b"kept"], 1, MAGIC_NORMAL, {0: meta_of(0)})
    s.close()
    s = FileStore(d, small_config())
    a = s.append([b"torn"], 1, MAGIC_NORMAL, {0: meta_of(1)})
    s.abandon()
    with open(d / "data" / f"{0:020d}", "r+b") as f:
        f.seek(a.positions[0] + HEADER_SIZE + 3)
        f.write(b"\xff")
    s = FileStore(d, small_config())
    try:
        assert entries_of(s) == [(0, MAGIC_NORMAL, b"kept", meta_of(0))]
        assert any("torn or corrupt tail" in note for note in s.notes)
    finally:
        s.close()


# -- check-store -----------------------------------------------------------------------------------
def test_check_store_digests_and_counts_metadata(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = FileStore(tmp_path / "a", small_config()), FileStore(tmp_path / "b", small_config())
    a.append([b"one", b"two"], 1, MAGIC_NORMAL, {0: pack_meta(5, 0, 2, 100)})
    b.append([b"one", b"two"], 1, MAGIC_NORMAL, {0: pack_meta(5, 0, 2, 101)})  # the wall clock differs
    entries = a.read(0, 10, 1 << 20)
    a.close()
    b.close()
    ra, rb = verify_store(str(tmp_path / "a")), verify_store(str(tmp_path / "b"))
    assert ra.errors == [] and ra.entries == 2 and ra.producer_meta_entries == 1
    assert ra.digest == replica_digest(entries)
    assert ra.digest != rb.digest
    assert cli_main(["check-store", "--json", str(tmp_path / "a")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["producer_meta_entries"] == 1 and report["digest"] == ra.digest


# -- stores written without metadata ---------------------------------------------------------------
def old_format(bodies: list[bytes], term: int) -> bytes:
    """Entries 0.. laid out by hand as the format was before metadata existed (no segment roll)."""
    out = bytearray()
    chain = 0
    for i, bd in enumerate(bodies):
        raw = bytearray(HEADER.pack(MAGIC_NORMAL, HEADER_SIZE + len(bd), i, term, len(out), 0, 0, zlib.crc32(bd),
                                    len(bd)) + bd)
        chain = zlib.crc32(raw[40:44], zlib.crc32(raw[:36], chain))
        struct.pack_into(">I", raw, 36, chain)
        out += raw
    return bytes(out)


def test_a_store_without_metadata_reads_as_before(factory: StoreFactory) -> None:
    s = factory.open()
    bodies = [body(i) for i in range(60)]
    for i in range(0, 60, 6):
        a = s.append(bodies[i:i + 6], 3)
        assert all(e.meta == b"" for e in s.read(a.first_index, 6, 1 << 30))
    s = factory.reopen()
    assert raw_of(s) == old_format(bodies, 3)
    assert entries_of(s) == [(i, MAGIC_NORMAL, bd, b"") for i, bd in enumerate(bodies)]
    assert s.get(17).meta == b"" and s.get(17) == s.read(17, 1, 0)[0]
    follower = MemoryStore(small_config())
    assert follower.append_encoded_metas(raw_of(s)) == (59, [])
    old_digest = hashlib.sha256()
    for i, bd in enumerate(bodies):
        old_digest.update(struct.pack(">qqi", i, 3, MAGIC_NORMAL) + bd)
    assert replica_digest(s.read(0, 100, 1 << 20)) == old_digest.hexdigest()
    if factory.kind == "file":
        s.close()
        report = verify_store(str(factory.dir))
        assert report.errors == [] and report.producer_meta_entries == 0
        assert report.digest == old_digest.hexdigest()


def test_old_entries_and_entries_with_metadata_mix(factory: StoreFactory) -> None:
    """A store written before metadata existed takes entries with metadata after its old ones."""
    s = factory.open()
    s.append([b"old-1", b"old-2"], 1)
    s = factory.reopen()
    s.append([b"new"], 2, MAGIC_NORMAL, {0: meta_of(2)})
    old = old_format([b"old-1", b"old-2"], 1)
    raw = raw_of(s)
    assert raw[:len(old)] == old
    prev_chain = HEADER.unpack_from(old, HEADER_SIZE + 5)[6]
    assert raw[len(old):] == encode_entry(MAGIC_NORMAL, 2, 2, len(old), b"new", prev_chain, meta_of(2))[0]
    assert entries_of(s)[1:] == [(1, MAGIC_NORMAL, b"old-2", b""), (2, MAGIC_NORMAL, b"new", meta_of(2))]
