"""Frame codec: round trips over any chunking, limits checked before allocation, malformed input."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorumlog.net.errors import ProtocolError
from quorumlog.net.frames import (
    GATHER_BYTES,
    HEADER_SIZE,
    MIN_LENGTH,
    PROTOCOL_VERSION,
    Frame,
    FrameDecoder,
    FrameWriter,
    Kind,
    decode_frames,
    encode_frame,
    frame_header,
)

frame_st = st.tuples(
    st.sampled_from(list(Kind)),
    st.integers(0, 255),
    st.integers(0, 2**64 - 1),
    st.binary(max_size=300),
)


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, prev = [], 0
    for p in [*points, len(data)]:
        out.append(data[prev:p])
        prev = p
    return out


def _plain(frames: list[Frame]) -> list[tuple[int, int, int, bytes, int]]:
    return [(f.kind, f.op, f.request_id, bytes(f.body), f.version) for f in frames]


@settings(max_examples=300, deadline=None)
@given(st.lists(frame_st, max_size=12), st.lists(st.integers(0, 10_000), max_size=20))
def test_any_chunking_decodes_the_same_frames(frames, cuts):
    w = FrameWriter()
    for kind, op, rid, body in frames:
        w.add(kind, op, rid, body)
    data = w.take()
    assert len(w) == 0 and w.nbytes == 0
    dec = FrameDecoder()
    got: list[Frame] = []
    for chunk in _split(data, cuts):
        dec.feed(chunk)
        got.extend(dec)
    dec.eof()
    assert _plain(got) == [(int(k), op, rid, body, PROTOCOL_VERSION) for k, op, rid, body in frames]
    assert dec.buffered == 0


@settings(max_examples=100, deadline=None)
@given(st.lists(frame_st, min_size=1, max_size=6))
def test_byte_at_a_time(frames):
    data = b"".join(encode_frame(k, op, rid, body) for k, op, rid, body in frames)
    dec = FrameDecoder()
    got = []
    for i in range(len(data)):
        dec.feed(data[i:i + 1])
        got.extend(dec)
    assert [bytes(f.body) for f in got] == [body for *_, body in frames]


def test_whole_frames_in_a_chunk_are_views_not_copies():
    data = encode_frame(Kind.REQUEST, 7, 1, b"x" * 100) + encode_frame(Kind.ONEWAY, 8, 0, b"y" * 50)
    dec = FrameDecoder()
    dec.feed(data)
    a, b = list(dec)
    assert isinstance(a.body, memoryview) and a.body.obj is data and b.body.obj is data


def test_writer_joins_into_one_buffer_and_matches_encode_frame():
    w = FrameWriter()
    w.extend([(Kind.REQUEST, 1, 5, b"abc"), (Kind.RESPONSE, 2, 6, memoryview(b"de")), (Kind.ONEWAY, 3, 0, b"")])
    assert len(w) == 3 and w.nbytes == 3 * HEADER_SIZE + 5
    data = w.take()
    assert data == (encode_frame(Kind.REQUEST, 1, 5, b"abc") + encode_frame(Kind.RESPONSE, 2, 6, b"de")
                    + encode_frame(Kind.ONEWAY, 3, 0))
    assert data[:4] == struct.pack(">I", MIN_LENGTH + 3)


def test_writer_hands_out_large_bodies_as_parts_that_decode_as_joined_frames():
    """A body given as parts, or one of GATHER_BYTES or more, is not joined: the writer says it gathers and
    hands out its parts (the large one itself, not a copy); the parts decode as the frames would."""
    big = bytearray(b"q" * GATHER_BYTES)
    w = FrameWriter()
    w.add(Kind.RESPONSE, 2, 6, b"small")
    assert not w.gathers
    w.add(Kind.ONEWAY, 3, 1, [b"\x93", memoryview(big), b"tail"])
    assert w.gathers and w.nbytes == 2 * HEADER_SIZE + 5 + 1 + GATHER_BYTES + 4
    parts = w.take_parts()
    assert any(p.obj is big for p in parts if isinstance(p, memoryview))
    assert not w.gathers and len(w) == 0
    joined = b"".join(parts)
    assert joined == (encode_frame(Kind.RESPONSE, 2, 6, b"small")
                      + encode_frame(Kind.ONEWAY, 3, 1, b"\x93" + bytes(big) + b"tail"))
    frames = decode_frames(joined)
    assert [bytes(f.body) for f in frames] == [b"small", b"\x93" + bytes(big) + b"tail"]
    with pytest.raises(ValueError):
        FrameWriter(max_frame_bytes=100).add(Kind.REQUEST, 1, 1, [b"x" * 50, b"y" * 39])


def test_writer_refuses_oversized_and_out_of_range():
    w = FrameWriter(max_frame_bytes=100)
    with pytest.raises(ValueError):
        w.add(Kind.REQUEST, 1, 1, b"x" * 89)
    w.add(Kind.REQUEST, 1, 1, b"x" * 88)
    with pytest.raises(ValueError):
        w.add(Kind.REQUEST, 256, 1)
    with pytest.raises(ValueError):
        w.add(Kind.REQUEST, 1, 2**64)
    with pytest.raises(ValueError):
        frame_header(Kind.REQUEST, 1, -1, 0)
    assert len(w) == 1


def test_two_gib_prefix_rejected_at_once_without_allocating():
    dec = FrameDecoder(max_frame_bytes=16 * 1024 * 1024)
    tracemalloc.start()
    try:
        dec.feed(struct.pack(">I", 2**31) + b"\x00\x01")
        with pytest.raises(ProtocolError, match="exceeds max_frame_bytes"):
            dec.next_frame()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024
    assert dec.buffered == 0


def test_oversized_prefix_split_across_chunks():
    dec = FrameDecoder(max_frame_bytes=1000)
    prefix = struct.pack(">I", 1001)
    for b in prefix[:3]:
        dec.feed(bytes([b]))
        assert dec.next_frame() is None
    dec.feed(prefix[3:])
    with pytest.raises(ProtocolError, match="exceeds"):
        dec.next_frame()


def test_exact_limit_is_accepted():
    dec = FrameDecoder(max_frame_bytes=MIN_LENGTH + 10)
    dec.feed(encode_frame(Kind.REQUEST, 1, 1, b"0123456789"))
    assert bytes(next(iter(dec)).body) == b"0123456789"


def test_length_below_minimum():
    with pytest.raises(ProtocolError, match="minimum"):
        decode_frames(struct.pack(">I", 3) + b"abc")


def test_unknown_version_and_kind():
    with pytest.raises(ProtocolError, match="version 9"):
        decode_frames(encode_frame(Kind.REQUEST, 1, 1, b"", version=9))
    with pytest.raises(ProtocolError, match="version 0"):
        dec = FrameDecoder(versions=None)
        dec.feed(encode_frame(Kind.REQUEST, 1, 1, b"", version=0))
        dec.next_frame()
    bad_kind = struct.pack(">IHBBQ", MIN_LENGTH, PROTOCOL_VERSION, 7, 1, 1)
    with pytest.raises(ProtocolError, match="kind 7"):
        decode_frames(bad_kind)


def test_any_version_when_versions_is_none():
    dec = FrameDecoder(versions=None)
    dec.feed(encode_frame(Kind.REQUEST, 1, 1, b"hi", version=42))
    assert next(iter(dec)).version == 42


def test_bad_header_rejected_before_the_body_arrives():
    # A frame announcing 1 MB with an unknown kind fails as soon as its header is in.
    dec = FrameDecoder()
    dec.feed(struct.pack(">IHBBQ", 1_000_000, PROTOCOL_VERSION, 9, 1, 1)[:10])
    assert dec.next_frame() is None
    dec.feed(struct.pack(">IHBBQ", 1_000_000, PROTOCOL_VERSION, 9, 1, 1)[10:])
    with pytest.raises(ProtocolError, match="kind"):
        dec.next_frame()


def test_truncated_frame_reported_on_eof():
    data = encode_frame(Kind.REQUEST, 1, 1, b"x" * 40)
    for cut in (1, 3, 4, 15, 16, len(data) - 1):
        dec = FrameDecoder()
        dec.feed(data[:cut])
        assert list(dec) == []
        assert dec.has_partial()
        with pytest.raises(ProtocolError, match="truncated"):
            dec.eof()


def test_decoder_stays_broken_after_an_error():
    dec = FrameDecoder()
    dec.feed(b"\xff\xff\xff\xff")
    with pytest.raises(ProtocolError):
        dec.next_frame()
    with pytest.raises(ProtocolError):
        dec.feed(encode_frame(Kind.REQUEST, 1, 1))
    with pytest.raises(ProtocolError):
        dec.next_frame()


def test_frames_before_an_error_are_delivered_first():
    good = encode_frame(Kind.REQUEST, 1, 1, b"ok")
    dec = FrameDecoder()
    dec.feed(good + b"GET / HTTP/1.1\r\n\r\n")
    assert bytes(dec.next_frame().body) == b"ok"
    with pytest.raises(ProtocolError):
        dec.next_frame()


def test_limit_can_change_between_frames():
    dec = FrameDecoder(max_frame_bytes=MIN_LENGTH + 4)
    dec.feed(encode_frame(Kind.REQUEST, 1, 1, b"1234") + encode_frame(Kind.REQUEST, 1, 2, b"x" * 100))
    assert dec.next_frame() is not None
    dec.max_frame_bytes = 1000
    assert bytes(dec.next_frame().body) == b"x" * 100


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.lists(st.integers(0, 300), max_size=8))
def test_garbage_never_raises_anything_but_protocol_error(data, cuts):
    dec = FrameDecoder(max_frame_bytes=1024)
    try:
        for chunk in _split(data, cuts):
            dec.feed(chunk)
            for f in dec:
                assert len(f.body) <= 1024
        dec.eof()
    except ProtocolError:
        pass


def test_feeding_memoryview_and_bytearray():
    data = encode_frame(Kind.RESPONSE, 4, 9, b"payload")
    for src in (bytearray(data), memoryview(data)):
        dec = FrameDecoder()
        dec.feed(src)
        (f,) = list(dec)
        assert (f.kind, f.op, f.request_id, bytes(f.body)) == (Kind.RESPONSE, 4, 9, b"payload")
