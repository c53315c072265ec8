"""The entry codec: round trips, index units, and that every flipped bit is detected."""

from __future__ import annotations

import hashlib
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorumlog.entry import (
    BLANK,
    CHAIN_SPAN,
    HEADER,
    HEADER_SIZE,
    INDEX_UNIT,
    INDEX_UNIT_SIZE,
    MAGIC_CONFIG,
    MAGIC_NOOP,
    MAGIC_NORMAL,
    META_SIZE,
    Entry,
    chain_of,
    check_entry,
    decode_entries,
    decode_header,
    encode_entry,
    encode_run,
    entry_at,
    pack_meta,
    replica_digest,
    unpack_meta,
)
from quorumlog.errors import CorruptEntryError, InvalidArgumentError

MAX_BODY = 4096
magics = st.sampled_from([MAGIC_NORMAL, MAGIC_NOOP, MAGIC_CONFIG])
u32 = st.integers(0, 2**32 - 1)
i63 = st.integers(0, 2**63 - 1)
bodies = st.lists(st.binary(max_size=200), min_size=1, max_size=20)


def test_layout_constants() -> None:
    assert HEADER_SIZE == 48 and INDEX_UNIT_SIZE == 32 and CHAIN_SPAN == 36 and BLANK.size == 8


def test_header_is_big_endian_and_in_design_order() -> None:
    raw, chain = encode_entry(MAGIC_NOOP, 0x0102030405060708, 9, 0x11, b"xyz", 0)
    magic, size, index, term, pos, channel, chain_crc, body_crc, body_size = struct.unpack(">iiqqqiIIi", raw[:48])
    assert (magic, size, index, term, pos, channel) == (2, 51, 0x0102030405060708, 9, 0x11, 0)
    assert chain_crc == chain == zlib.crc32(raw[40:44], zlib.crc32(raw[:36], 0))
    assert body_crc == zlib.crc32(b"xyz") and body_size == 3 and raw[48:] == b"xyz"


@given(magic=magics, index=i63, term=i63, pos=i63, body=st.binary(max_size=600), prev=u32)
def test_encode_entry_round_trip(magic: int, index: int, term: int, pos: int, body: bytes, prev: int) -> None:
    raw, chain = encode_entry(magic, index, term, pos, body, prev)
    assert len(raw) == HEADER_SIZE + len(body)
    h = check_entry(raw, 0, prev, MAX_BODY)
    assert h == (magic, len(raw), index, term, pos, 0, chain, zlib.crc32(body), len(body))
    assert decode_header(raw) == decode_header(raw, 0)
    assert decode_header(raw).chain_crc == chain
    assert decode_entries(raw, MAX_BODY, prev) == [Entry(index, term, pos, body, magic)]
    # The chain is seeded: a different predecessor does not verify.
    with pytest.raises(CorruptEntryError, match="chain"):
        check_entry(raw, 0, prev ^ 1, MAX_BODY)


@given(bodies=bodies, magic=magics, first=st.integers(0, 2**40), term=st.integers(0, 2**40),
       first_pos=st.integers(0, 2**40), prev=u32)
def test_encode_run_matches_encode_entry(bodies: list[bytes], magic: int, first: int, term: int, first_pos: int,
                                         prev: int) -> None:
    positions: list[int] = [-7]
    data, units, last_chain = encode_run(bodies, magic, first, term, first_pos, prev, positions)
    assert positions[0] == -7  # appended to, not replaced
    positions = positions[1:]
    expected = bytearray()
    chain = prev
    for i, b in enumerate(bodies):
        raw, chain = encode_entry(magic, first + i, term, first_pos + len(expected), b, chain)
        assert positions[i] == first_pos + len(expected)
        expected += raw
    assert bytes(data) == bytes(expected) and last_chain == chain
    assert len(units) == INDEX_UNIT_SIZE * len(bodies)
    for i, b in enumerate(bodies):
        unit = INDEX_UNIT.unpack_from(units, i * INDEX_UNIT_SIZE)
        assert unit == (magic, positions[i], HEADER_SIZE + len(b), first + i, term)
    decoded = decode_entries(data, MAX_BODY, prev)
    assert [(e.index, e.term, e.pos, e.body, e.magic) for e in decoded] == [
        (first + i, term, positions[i], b, magic) for i, b in enumerate(bodies)]
    # Decoding from a memoryview and from bytes gives the same.
    assert decode_entries(memoryview(bytes(data)), MAX_BODY, prev) == decoded


@given(bodies=bodies, prev=u32)
def test_decode_entries_detects_a_lost_middle_entry(bodies: list[bytes], prev: int) -> None:
    if len(bodies) < 3:
        bodies = bodies + [b"a", b"b"]
    positions: list[int] = []
    data, _units, _c = encode_run(bodies, MAGIC_NORMAL, 5, 1, 0, prev, positions)
    cut_from = positions[1] - positions[0]
    cut_to = positions[2] - positions[0]
    with pytest.raises(CorruptEntryError, match="chain"):
        decode_entries(bytes(data[:cut_from]) + bytes(data[cut_to:]), MAX_BODY, prev)


def _flip_all_bits(raw: bytes, prev: int, bit_positions: range | list[int]) -> None:
    for bit in bit_positions:
        bad = bytearray(raw)
        bad[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(CorruptEntryError):
            check_entry(bad, 0, prev, MAX_BODY)
        with pytest.raises(CorruptEntryError):
            decode_entries(bad, MAX_BODY, prev)


@pytest.mark.parametrize("n", [0, 1, 2, 7, 33])
@pytest.mark.parametrize("magic", [MAGIC_NORMAL, MAGIC_NOOP, MAGIC_CONFIG])
def test_every_flipped_bit_of_a_small_entry_is_detected(n: int, magic: int) -> None:
    raw, _ = encode_entry(magic, 123456, 7, 98765, bytes(range(n)), 0xDEADBEEF)
    _flip_all_bits(raw, 0xDEADBEEF, range(len(raw) * 8))


@settings(max_examples=60)
@given(body=st.binary(min_size=100, max_size=MAX_BODY), prev=u32, data=st.data())
def test_sampled_flipped_bits_of_larger_entries_are_detected(body: bytes, prev: int, data: st.DataObject) -> None:
    raw, _ = encode_entry(MAGIC_NORMAL, 42, 3, 4096, body, prev)
    # Every header bit, plus a sample of body bits.
    picks = data.draw(st.lists(st.integers(HEADER_SIZE * 8, len(raw) * 8 - 1), min_size=1, max_size=40))
    _flip_all_bits(raw, prev, list(range(HEADER_SIZE * 8)) + picks)


def test_unseeded_check_still_catches_body_and_size_damage() -> None:
    """With prev_chain None the header fields the chain covers go unchecked (the predecessor is
    unknown; a magic may turn into another valid one), but sizes, body CRC and body still are."""
    raw, _ = encode_entry(MAGIC_NORMAL, 1, 1, 0, b"hello", 0)
    checked = [*range(4, 8), *range(40, len(raw))]  # size, body_crc, body_size, body
    for byte in checked:
        for b in range(8):
            bad = bytearray(raw)
            bad[byte] ^= 1 << b
            with pytest.raises(CorruptEntryError):
                check_entry(bad, 0, None, MAX_BODY)


@given(body=st.binary(max_size=300), cut=st.data())
def test_truncated_entries_are_detected(body: bytes, cut: st.DataObject) -> None:
    raw, _ = encode_entry(MAGIC_NORMAL, 0, 1, 0, body, 0)
    n = cut.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(CorruptEntryError, match="truncated"):
        check_entry(raw[:n], 0, 0, MAX_BODY)
    if n:
        with pytest.raises(CorruptEntryError):
            decode_entries(raw[:n], MAX_BODY, 0)


def test_check_entry_at_an_offset_and_limits() -> None:
    raw, chain = encode_entry(MAGIC_NORMAL, 3, 2, 100, b"abc", 77)
    buf = b"\x00" * 13 + raw + b"\xff" * 5
    assert check_entry(buf, 13, 77, MAX_BODY)[6] == chain
    with pytest.raises(CorruptEntryError, match="sizes"):
        check_entry(raw, 0, 77, 2)  # body over the maximum
    blank = BLANK.pack(-1, 100) + bytes(40)
    with pytest.raises(CorruptEntryError, match="magic"):
        check_entry(blank, 0, 0, MAX_BODY)
    with pytest.raises(CorruptEntryError, match="magic"):
        check_entry(bytes(HEADER_SIZE), 0, 0, MAX_BODY)


def test_decode_entries_of_nothing() -> None:
    assert decode_entries(b"", MAX_BODY) == []


@given(st.lists(st.tuples(i63, i63, magics, st.binary(max_size=50)), max_size=10))
def test_replica_digest_depends_on_index_term_magic_body_only(items: list[tuple[int, int, int, bytes]]) -> None:
    a = [Entry(i, t, 0, b, m) for i, t, m, b in items]
    b = [Entry(i, t, 999, b, m) for i, t, m, b in items]
    assert replica_digest(a) == replica_digest(b)
    if items:
        i, t, m, bd = items[-1]
        c = a[:-1] + [Entry(i, t ^ 1, 0, bd, m)]
        assert replica_digest(c) != replica_digest(a)


def test_entry_is_control() -> None:
    assert not Entry(0, 1, 0, b"").is_control
    assert Entry(0, 1, 0, b"", MAGIC_NOOP).is_control and Entry(0, 1, 0, b"", MAGIC_CONFIG).is_control


@given(body=st.binary(min_size=1, max_size=200), flip=st.integers(0, 10_000), prev=u32)
def test_chain_covers_the_body_through_its_crc(body: bytes, flip: int, prev: int) -> None:
    """Two entries that differ only in their bodies (same size) carry different chain CRCs, so a chain
    CRC vouches for every body before it, not only for the headers."""
    other = bytearray(body)
    other[flip % len(body)] ^= 1 << (flip % 8)
    _, a = encode_entry(MAGIC_NORMAL, 7, 3, 4096, body, prev)
    _, b = encode_entry(MAGIC_NORMAL, 7, 3, 4096, bytes(other), prev)
    assert a != b


# -- producer metadata -----------------------------------------------------------------------------

i31 = st.integers(1, 2**31 - 1)
metas_st = st.builds(pack_meta, st.integers(1, 2**63 - 1), i63, i31, i63)


def _raw_entry(magic: int, index: int, term: int, pos: int, extra: bytes, body: bytes, prev: int) -> bytes:
    """An entry built by hand, with any run between header and body (its length in the channel field),
    both CRCs right."""
    raw = bytearray(HEADER.pack(magic, HEADER_SIZE + len(extra) + len(body), index, term, pos, len(extra), 0,
                                zlib.crc32(extra + body), len(body)) + extra + body)
    struct.pack_into(">I", raw, CHAIN_SPAN, chain_of(raw, 0, prev))
    return bytes(raw)


def test_entry_with_metadata_layout() -> None:
    meta = pack_meta(7, 3, 2, 1_700_000_000_000)
    assert len(meta) == META_SIZE == 28 and unpack_meta(meta) == (7, 3, 2, 1_700_000_000_000)
    raw, chain = encode_entry(MAGIC_NORMAL, 5, 2, 4096, b"xyz", 11, meta)
    assert raw == _raw_entry(MAGIC_NORMAL, 5, 2, 4096, meta, b"xyz", 11)
    h = decode_header(raw)
    assert (h.size, h.body_size, h.body_crc, h.chain_crc) == (48 + 28 + 3, 3, zlib.crc32(meta + b"xyz"), chain)
    assert raw[48:76] == meta and raw[76:] == b"xyz"
    # Without metadata the bytes are what they always were.
    plain = encode_entry(MAGIC_NORMAL, 5, 2, 4096, b"xyz", 11)
    assert encode_entry(MAGIC_NORMAL, 5, 2, 4096, b"xyz", 11, b"") == plain
    assert plain[0] == _raw_entry(MAGIC_NORMAL, 5, 2, 4096, b"", b"xyz", 11)


@given(producer=st.integers(1, 2**63 - 1), seq=i63, count=i31, wall=i63)
def test_pack_unpack_meta_round_trip(producer: int, seq: int, count: int, wall: int) -> None:
    assert unpack_meta(pack_meta(producer, seq, count, wall)) == (producer, seq, count, wall)


@pytest.mark.parametrize("n", [0, 1, 27, 29, 56])
def test_unpack_meta_refuses_a_wrong_length(n: int) -> None:
    with pytest.raises(CorruptEntryError, match="metadata"):
        unpack_meta(bytes(n))


@given(magic=magics, index=i63, term=i63, pos=i63, body=st.binary(max_size=300), meta=metas_st, prev=u32)
def test_encode_entry_with_metadata_round_trip(magic: int, index: int, term: int, pos: int, body: bytes,
                                               meta: bytes, prev: int) -> None:
    raw, chain = encode_entry(magic, index, term, pos, body, prev, meta)
    h = check_entry(raw, 0, prev, MAX_BODY)
    assert h == (magic, HEADER_SIZE + META_SIZE + len(body), index, term, pos, META_SIZE, chain,
                 zlib.crc32(meta + body), len(body))
    assert decode_entries(raw, MAX_BODY, prev) == [Entry(index, term, pos, body, magic, meta)]
    assert entry_at(b"pad" + raw, 3, h) == Entry(index, term, pos, body, magic, meta)


@given(bodies=bodies, magic=magics, first=st.integers(0, 2**40), term=st.integers(0, 2**40),
       first_pos=st.integers(0, 2**40), prev=u32, data=st.data())
def test_encode_run_with_metas_round_trip(bodies: list[bytes], magic: int, first: int, term: int, first_pos: int,
                                          prev: int, data: st.DataObject) -> None:
    metas = data.draw(st.dictionaries(st.integers(0, len(bodies) - 1), metas_st))
    positions: list[int] = []
    run, units, last_chain = encode_run(bodies, magic, first, term, first_pos, prev, positions, metas)
    expected = bytearray()
    chain = prev
    for i, b in enumerate(bodies):
        raw, chain = encode_entry(magic, first + i, term, first_pos + len(expected), b, chain, metas.get(i, b""))
        assert positions[i] == first_pos + len(expected)
        assert INDEX_UNIT.unpack_from(units, i * INDEX_UNIT_SIZE) == (magic, positions[i], len(raw), first + i, term)
        expected += raw
    assert bytes(run) == bytes(expected) and last_chain == chain
    decoded = decode_entries(run, MAX_BODY, prev)
    assert [(e.body, e.meta) for e in decoded] == [(b, metas.get(i, b"")) for i, b in enumerate(bodies)]
    # No metas and empty metas encode the plain run.
    assert encode_run(bodies, magic, first, term, first_pos, prev, [], {})[0] == \
        encode_run(bodies, magic, first, term, first_pos, prev, [])[0]


@given(body=st.binary(max_size=200), meta=metas_st, prev=u32, bit=st.integers(0, META_SIZE * 8 - 1))
def test_a_flipped_metadata_bit_fails_the_body_crc(body: bytes, meta: bytes, prev: int, bit: int) -> None:
    raw = bytearray(encode_entry(MAGIC_NORMAL, 9, 4, 0, body, prev, meta)[0])
    raw[HEADER_SIZE + bit // 8] ^= 1 << (bit % 8)
    for chain in (prev, None):
        with pytest.raises(CorruptEntryError, match="body CRC"):
            check_entry(raw, 0, chain, MAX_BODY)


@pytest.mark.parametrize("n", [0, 1, 5])
def test_every_flipped_bit_of_a_small_entry_with_metadata_is_detected(n: int) -> None:
    raw, _ = encode_entry(MAGIC_NORMAL, 123456, 7, 98765, bytes(range(n)), 0xDEADBEEF, pack_meta(1, 2, 3, 4))
    _flip_all_bits(raw, 0xDEADBEEF, range(len(raw) * 8))


@given(extra=st.binary(min_size=1, max_size=100).filter(lambda b: len(b) != META_SIZE),
       body=st.binary(max_size=100), prev=u32)
def test_a_metadata_run_of_another_length_is_refused(extra: bytes, body: bytes, prev: int) -> None:
    raw = _raw_entry(MAGIC_NORMAL, 1, 1, 0, extra, body, prev)
    with pytest.raises(CorruptEntryError, match="bad sizes"):
        check_entry(raw, 0, prev, MAX_BODY)
    with pytest.raises(CorruptEntryError, match="bad sizes"):
        decode_entries(raw, MAX_BODY, prev)
    with pytest.raises(InvalidArgumentError):
        encode_entry(MAGIC_NORMAL, 1, 1, 0, body, prev, extra)
    with pytest.raises(InvalidArgumentError):
        encode_run([body], MAGIC_NORMAL, 1, 1, 0, prev, [], {0: extra})


def test_encode_run_refuses_metadata_outside_the_run() -> None:
    for offset in (-1, 2):
        with pytest.raises(InvalidArgumentError, match="offset"):
            encode_run([b"a", b"b"], MAGIC_NORMAL, 0, 1, 0, 0, [], {offset: pack_meta(1, 0, 1, 0)})


def _old_digest(entries: list[Entry]) -> str:
    """replica_digest as it was before metadata existed."""
    h = hashlib.sha256()
    for e in entries:
        h.update(struct.pack(">qqi", e.index, e.term, e.magic) + e.body)
    return h.hexdigest()


@given(st.lists(st.tuples(i63, i63, magics, st.binary(max_size=50), st.one_of(st.just(b""), metas_st)),
                min_size=1, max_size=10))
def test_replica_digest_covers_metadata_only_when_present(items: list[tuple[int, int, int, bytes, bytes]]) -> None:
    plain = [Entry(i, t, 0, b, m) for i, t, m, b, _meta in items]
    assert replica_digest(plain) == _old_digest(plain)
    with_meta = [Entry(i, t, 0, b, m, meta) for i, t, m, b, meta in items]
    if any(meta for *_x, meta in items):
        assert replica_digest(with_meta) != replica_digest(plain)
    # Replicas differing only in a metadata run, or in where the metadata ends and the body begins,
    # differ in digest.
    i, t, m, b, _meta = items[-1]
    meta = pack_meta(1, 2, 3, 4)
    other = pack_meta(1, 2, 3, 5)
    assert replica_digest([Entry(i, t, 0, b, m, meta)]) != replica_digest([Entry(i, t, 0, b, m, other)])
    assert replica_digest([Entry(i, t, 0, b, m, meta)]) != replica_digest([Entry(i, t, 0, meta + b, m)])


def test_a_damaged_body_size_cannot_pass_a_body_off_as_metadata() -> None:
    """The metadata run's length is in `channel`, which the chain CRC covers: a plain entry whose
    body_size lost 28 (so size - body_size looks like a metadata layout) is refused, and so is an entry
    whose channel disagrees with its sizes."""
    body = bytes(range(40))
    raw = bytearray(encode_entry(MAGIC_NORMAL, 1, 1, 0, body, 0)[0])
    struct.pack_into(">i", raw, 44, len(body) - META_SIZE)  # body_size is not covered by either CRC
    with pytest.raises(CorruptEntryError, match="bad sizes"):
        check_entry(raw, 0, None, MAX_BODY)
    forged = bytearray(_raw_entry(MAGIC_NORMAL, 1, 1, 0, body[:META_SIZE], body[META_SIZE:], 0))
    struct.pack_into(">i", forged, 32, 0)  # channel says "no metadata" while the sizes say there is
    with pytest.raises(CorruptEntryError, match="bad sizes"):
        check_entry(forged, 0, None, MAX_BODY)
