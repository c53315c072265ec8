"""READ answers to Arrow record batches (spark/arrow.py), without Spark: the columns, entries that carry
producer metadata giving their bodies only, and damaged answers refused as the entry-by-entry decode
refuses them."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quorumlog.entry import (
    CHAIN_SPAN,
    HEADER,
    HEADER_SIZE,
    MAGIC_NOOP,
    MAGIC_NORMAL,
    META_SIZE,
    VALID_MAGICS,
    Entry,
    chain_of,
    check_entry,
    encode_run,
    entry_at,
    pack_meta,
)
from quorumlog.errors import CorruptEntryError
from quorumlog.spark.arrow import SCHEMA, entries_batch


def answer(bodies: list[bytes], metas: dict[int, bytes] | None = None) -> tuple[bytes, list[int]]:
    """Entries 100.. of term 7 from byte 4096, as a READ answer carries them, and their positions."""
    positions: list[int] = []
    data, _units, _chain = encode_run(bodies, MAGIC_NORMAL, 100, 7, 4096, 0, positions, metas)
    return bytes(data), positions


def columns(data: bytes, check_crc: bool) -> dict[str, list]:
    batch = entries_batch("g0", data, check_crc)
    assert batch.schema == SCHEMA
    return batch.to_pydict()


@pytest.mark.parametrize("check_crc", [True, False])
def test_entries_without_metadata(check_crc: bool) -> None:
    bodies = [b"a", b"", b"ccc" * 100]
    data, positions = answer(bodies)
    assert columns(data, check_crc) == {"group": ["g0"] * 3, "index": [100, 101, 102], "term": [7] * 3,
                                        "pos": positions, "body": bodies}
    assert columns(b"", check_crc)["body"] == []


@pytest.mark.parametrize("check_crc", [True, False])
@given(bodies=st.lists(st.binary(max_size=300), min_size=1, max_size=30), data=st.data())
def test_entries_with_metadata_give_their_bodies(check_crc: bool, bodies: list[bytes], data: st.DataObject) -> None:
    offsets = data.draw(st.sets(st.integers(0, len(bodies) - 1)))
    raw, positions = answer(bodies, {i: pack_meta(9, i, 1, 1_700_000_000_000) for i in offsets})
    cols = columns(raw, check_crc)
    assert cols["body"] == bodies
    assert cols["index"] == list(range(100, 100 + len(bodies))) and cols["pos"] == positions


@pytest.mark.parametrize("check_crc", [True, False])
def test_a_run_of_another_length_is_refused(check_crc: bool) -> None:
    raw = bytearray(HEADER.pack(MAGIC_NORMAL, HEADER_SIZE + 20 + 2, 0, 1, 0, 0, 0, zlib.crc32(bytes(20) + b"hi"), 2)
                    + bytes(20) + b"hi")
    struct.pack_into(">I", raw, CHAIN_SPAN, chain_of(raw, 0, 0))
    with pytest.raises(CorruptEntryError):
        entries_batch("g0", bytes(raw), check_crc)


def test_a_damaged_metadata_run_fails_the_crc_check() -> None:
    raw = bytearray(answer([b"body"], {0: pack_meta(9, 0, 1, 5)})[0])
    raw[HEADER_SIZE + 2] ^= 1
    with pytest.raises(CorruptEntryError, match="body CRC"):
        entries_batch("g0", bytes(raw), True)


def reference(buf: bytes, check_crc: bool) -> list[Entry]:
    """What a READ answer holds, decoded entry by entry (as the client's decoder checks each entry):
    CorruptEntryError if it is not normal entries back to back."""
    out, off = [], 0
    while off < len(buf):
        if check_crc:
            h = check_entry(buf, off, None, 1 << 31)
        else:  # check_entry without the body CRC
            if len(buf) - off < HEADER_SIZE:
                raise CorruptEntryError("truncated header")
            h = HEADER.unpack_from(buf, off)
            if h[0] not in VALID_MAGICS or h[8] < 0 or h[5] not in (0, META_SIZE) \
                    or h[1] != HEADER_SIZE + h[5] + h[8] or len(buf) - off < h[1]:
                raise CorruptEntryError("bad header")
        if h[0] != MAGIC_NORMAL:
            raise CorruptEntryError("a control entry")
        out.append(entry_at(buf, off, h))
        off += h[1]
    return out


def same_rows(data: bytes | bytearray | memoryview, check_crc: bool, expected: list[Entry]) -> None:
    assert columns(data, check_crc) == {"group": ["g0"] * len(expected), "index": [e.index for e in expected],
                                        "term": [e.term for e in expected], "pos": [e.pos for e in expected],
                                        "body": [e.body for e in expected]}


def with_metas(entries: list[tuple[bytes, bool]]) -> tuple[bytes, list[int]]:
    """answer() of (body, carries metadata) pairs."""
    return answer([b for b, _ in entries], {i: pack_meta(9, i, 1, 5) for i, (_, m) in enumerate(entries) if m})


entry_lists = st.lists(st.tuples(st.binary(max_size=200), st.booleans()), min_size=1, max_size=12)


@pytest.mark.parametrize("check_crc", [True, False])
@given(entries=entry_lists, data=st.data())
def test_a_damaged_answer_fails_as_the_entry_by_entry_decode_does(check_crc: bool, entries: list[tuple[bytes, bool]],
                                                                 data: st.DataObject) -> None:
    """Any one byte changed: entries_batch refuses the answer exactly when the per-entry decode does
    (body CRCs when check_crc, the header layout always), and otherwise gives its rows."""
    raw, _ = with_metas(entries)
    at = data.draw(st.integers(0, len(raw) - 1))
    damaged = bytearray(raw)
    damaged[at] ^= data.draw(st.integers(1, 255))
    try:
        expected = reference(bytes(damaged), check_crc)
    except CorruptEntryError:
        with pytest.raises(CorruptEntryError):
            entries_batch("g0", bytes(damaged), check_crc)
    else:
        same_rows(bytes(damaged), check_crc, expected)


@pytest.mark.parametrize("check_crc", [True, False])
@given(entries=entry_lists, data=st.data())
def test_a_cut_answer_is_refused_unless_cut_between_entries(check_crc: bool, entries: list[tuple[bytes, bool]],
                                                            data: st.DataObject) -> None:
    raw, positions = with_metas(entries)
    cut = data.draw(st.integers(0, len(raw)))
    starts = [p - positions[0] for p in positions] + [len(raw)]
    if cut in starts:
        same_rows(raw[:cut], check_crc, reference(raw[:cut], True))
    else:
        with pytest.raises(CorruptEntryError):
            entries_batch("g0", raw[:cut], check_crc)


@given(entries=entry_lists)
def test_the_batch_is_built_over_any_buffer(entries: list[tuple[bytes, bool]]) -> None:
    """bytes, a bytearray, or a view into a larger buffer (as a READ answer's frame is): the same rows."""
    raw, _ = with_metas(entries)
    expected = reference(raw, True)
    for data in (raw, bytearray(raw), memoryview(b"frame head" + raw + b"tail")[10:-4]):
        same_rows(data, True, expected)
        same_rows(data, False, expected)


def test_a_control_entry_is_refused() -> None:
    data, _units, _chain = encode_run([b"noop"], MAGIC_NOOP, 5, 1, 0, 0, [])
    with pytest.raises(CorruptEntryError, match="entry 5"):
        entries_batch("g0", bytes(data), True)
