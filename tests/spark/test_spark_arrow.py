"""READ answers to Arrow record batches (spark/arrow.py), without Spark: the columns, and entries that
carry producer metadata giving their bodies only."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quorumlog.entry import CHAIN_SPAN, HEADER, HEADER_SIZE, MAGIC_NORMAL, chain_of, encode_run, pack_meta
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
