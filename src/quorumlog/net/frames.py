"""Sans-I/O frame codec: bytes in, frames out; frames in, bytes out. No sockets, no asyncio.

A frame (all integers big-endian)::

    u32 length      bytes that follow this field: 12 + len(body)
    u16 version     protocol version
    u8  kind        REQUEST 0, RESPONSE 1, ONEWAY 2
    u8  op          operation (see ops.py)
    u64 request_id  matches a response to its request; 0 for unsolicited one-way frames
    ... body        length - 12 bytes (a msgpack array, see bodies.py)

The decoder checks `length` against `max_frame_bytes` as soon as the 4 prefix bytes are in, before
it buffers or allocates anything for the frame, so a 2 GiB prefix is rejected at once.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterable, Iterator
from enum import IntEnum
from typing import NamedTuple

from .errors import ProtocolError

# 2: the mutual HELLO (hello.py); a node of version 1 is refused at HELLO with a reason it can read.
# 3: peer messages changed (HaReport.recovering); client operations are those of 2, so a node speaks both
# to clients, and 3 only to peers (MIN_PEER_VERSION).
# 4: peer messages changed again (a heartbeat's quiesce flag, NODE_PING: raft/quiesce.py); clients as in 2.
PROTOCOL_VERSION = 4
SUPPORTED_VERSIONS: frozenset[int] = frozenset({2, 3, PROTOCOL_VERSION})
MIN_PEER_VERSION = 4
DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024
# From this size a body is handed to the kernel as it is (writev) rather than joined into one buffer.
GATHER_BYTES = 1 << 16

HEADER = struct.Struct(">IHBBQ")
HEADER_SIZE = HEADER.size  # 16
PREFIX_SIZE = 4
MIN_LENGTH = HEADER_SIZE - PREFIX_SIZE  # 12: version, kind, op, request id
MAX_REQUEST_ID = (1 << 64) - 1

_LENGTH = struct.Struct(">I")
_REST = struct.Struct(">HBBQ")  # the header after the length prefix
_unpack_header = HEADER.unpack_from
_unpack_length = _LENGTH.unpack_from
_unpack_rest = _REST.unpack_from
_pack_header = HEADER.pack


class Kind(IntEnum):
    """What a frame is: a request awaiting a response, the response, or a one-way message."""

    REQUEST = 0
    RESPONSE = 1
    ONEWAY = 2


REQUEST, RESPONSE, ONEWAY = Kind.REQUEST, Kind.RESPONSE, Kind.ONEWAY
_KINDS = frozenset(int(k) for k in Kind)


class Frame(NamedTuple):
    """One decoded frame. `body` is a memoryview into the received bytes: copy it to keep it long."""

    kind: int
    op: int
    request_id: int
    body: memoryview
    version: int = PROTOCOL_VERSION


Buffer = bytes | bytearray | memoryview
# A frame body: one buffer, or its parts in order (a large field left as a view between its neighbours),
# written together with writev instead of joined first.
Body = Buffer | list[Buffer]


def body_bytes(body: Body) -> bytes:
    """A body as one bytes object (for tools and tests; the node writes the parts as they are)."""
    return b"".join(body) if isinstance(body, list) else bytes(body)


def _check_length(length: int, max_frame_bytes: int) -> None:
    if length > max_frame_bytes:
        raise ProtocolError(f"frame length {length} exceeds max_frame_bytes {max_frame_bytes}")
    if length < MIN_LENGTH:
        raise ProtocolError(f"frame length {length} is below the {MIN_LENGTH}-byte minimum")


class FrameDecoder:
    """Incremental decoder: `feed(bytes)` any chunks, then take frames with `next_frame()` or iteration.

    Whole frames inside a fed chunk are returned as memoryview slices of that chunk (no copy); only a
    frame split across chunks is copied, once, into a bytearray sized for exactly that frame, which is
    then handed to the frame (so no buffer is ever compacted or resized while views of it exist).
    The decoder keeps references into fed chunks: do not mutate a bytearray after feeding it.

    `versions` is the set of accepted protocol versions, or None to accept any (a server uses that
    until HELLO, so it can answer an unsupported version with a reason instead of a dropped socket).
    `max_frame_bytes` bounds the length field and may be changed between frames.
    After a ProtocolError the decoder is broken: every later call raises the same error.
    """

    __slots__ = ("max_frame_bytes", "versions", "_chunks", "_pos", "_prefix", "_partial", "_have", "_error")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 versions: frozenset[int] | None = SUPPORTED_VERSIONS) -> None:
        if max_frame_bytes < MIN_LENGTH:
            raise ValueError(f"max_frame_bytes must be at least {MIN_LENGTH}")
        self.max_frame_bytes = max_frame_bytes
        self.versions = versions
        self._chunks: deque[memoryview] = deque()
        self._pos = 0  # read offset in self._chunks[0]
        self._prefix = b""  # 1-3 bytes of a length prefix split across chunks
        self._partial: bytearray | None = None  # a frame (after its prefix) being filled
        self._have = 0  # bytes of self._partial filled so far
        self._error: ProtocolError | None = None

    def feed(self, data: Buffer) -> None:
        """Queue received bytes; frames come out of next_frame()."""
        if self._error is not None:
            raise self._error
        if data:
            mv = data if isinstance(data, memoryview) else memoryview(data)
            if mv.format != "B" or mv.ndim != 1:
                mv = mv.cast("B")
            self._chunks.append(mv)

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        n = sum(len(c) for c in self._chunks) - self._pos + len(self._prefix)
        return n + (self._have + PREFIX_SIZE if self._partial is not None else 0)

    def has_partial(self) -> bool:
        """True when part of a frame is held: closing now would truncate it."""
        return self.buffered > 0

    def eof(self) -> None:
        """The peer closed: raise ProtocolError if a frame was cut short."""
        if self._error is None and self.has_partial():
            need = len(self._partial) + PREFIX_SIZE if self._partial is not None else PREFIX_SIZE
            self._fail(f"truncated frame: connection closed with {self.buffered} of {need} bytes")

    def _fail(self, reason: str) -> None:
        self._error = ProtocolError(reason)
        self._chunks.clear()
        self._partial = None
        self._prefix = b""
        raise self._error

    def _check_rest(self, version: int, kind: int) -> None:
        if kind not in _KINDS:
            self._fail(f"unknown frame kind {kind}")
        if version == 0 or (self.versions is not None and version not in self.versions):
            self._fail(f"unsupported protocol version {version}")

    def __iter__(self) -> Iterator[Frame]:
        while (f := self.next_frame()) is not None:
            yield f

    def next_frame(self) -> Frame | None:
        """Return the next complete frame, None if more bytes are needed; ProtocolError if malformed."""
        if self._error is not None:
            raise self._error
        chunks = self._chunks
        while chunks:
            mv = chunks[0]
            pos = self._pos
            avail = len(mv) - pos
            if avail == 0:
                chunks.popleft()
                self._pos = 0
                continue
            partial = self._partial
            if partial is not None:
                # Finish a frame split across chunks.
                have = self._have
                take = min(len(partial) - have, avail)
                partial[have:have + take] = mv[pos:pos + take]
                have += take
                self._pos = pos + take
                if have < len(partial):
                    self._have = have
                    if have >= MIN_LENGTH and have - take < MIN_LENGTH:
                        version, kind, _, _ = _unpack_rest(partial, 0)
                        self._check_rest(version, kind)
                    continue
                self._partial = None
                self._have = 0
                version, kind, op, rid = _unpack_rest(partial, 0)
                self._check_rest(version, kind)
                return Frame(kind, op, rid, memoryview(partial)[MIN_LENGTH:], version)
            if self._prefix:
                take = min(PREFIX_SIZE - len(self._prefix), avail)
                self._prefix += bytes(mv[pos:pos + take])
                self._pos = pos + take
                if len(self._prefix) < PREFIX_SIZE:
                    continue
                (length,) = _unpack_length(self._prefix, 0)
                self._prefix = b""
                try:
                    _check_length(length, self.max_frame_bytes)
                except ProtocolError as e:
                    self._fail(e.reason)
                self._partial = bytearray(length)
                continue
            if avail >= HEADER_SIZE:
                length, version, kind, op, rid = _unpack_header(mv, pos)
                if length > self.max_frame_bytes or length < MIN_LENGTH:
                    try:
                        _check_length(length, self.max_frame_bytes)
                    except ProtocolError as e:
                        self._fail(e.reason)
                self._check_rest(version, kind)
                end = pos + PREFIX_SIZE + length
                if end <= len(mv):
                    self._pos = end
                    return Frame(kind, op, rid, mv[pos + HEADER_SIZE:end], version)
                self._partial = bytearray(length)
                self._pos = pos + PREFIX_SIZE
                continue
            if avail >= PREFIX_SIZE:
                (length,) = _unpack_length(mv, pos)
                try:
                    _check_length(length, self.max_frame_bytes)
                except ProtocolError as e:
                    self._fail(e.reason)
                self._partial = bytearray(length)
                self._pos = pos + PREFIX_SIZE
                continue
            self._prefix = bytes(mv[pos:])
            self._pos = len(mv)
        return None


def decode_frames(data: Buffer, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> list[Frame]:
    """Decode a buffer holding only whole frames (tests, tools); ProtocolError on anything else."""
    dec = FrameDecoder(max_frame_bytes)
    dec.feed(data)
    frames = list(dec)
    dec.eof()
    return frames


def frame_header(kind: int, op: int, request_id: int, body_len: int,
                 version: int = PROTOCOL_VERSION) -> bytes:
    """The 16 header bytes of a frame whose body is body_len bytes long."""
    try:
        return _pack_header(MIN_LENGTH + body_len, version, kind, op, request_id)
    except struct.error as e:
        raise ValueError(f"frame field out of range: {e}") from None


def encode_frame(kind: int, op: int, request_id: int, body: Buffer = b"",
                 version: int = PROTOCOL_VERSION) -> bytes:
    """One frame as bytes (header + body)."""
    return frame_header(kind, op, request_id, len(body), version) + body


class FrameWriter:
    """Collects frames and hands them out together, so many frames cost one write.

    Bodies are referenced, not copied: small frames are joined once by `take()`; a writer holding a large
    part (a READ answer's or a push's entries, a view of the store) hands out its parts for one writev.
    """

    __slots__ = ("max_frame_bytes", "version", "_parts", "_frames", "_nbytes", "_gather")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, version: int = PROTOCOL_VERSION) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.version = version
        self._parts: list[Buffer] = []
        self._frames = 0
        self._nbytes = 0
        self._gather = False  # a part large enough that joining it would cost more than a writev

    def add(self, kind: int, op: int, request_id: int, body: Body = b"") -> None:
        """Append one frame; ValueError if it would exceed max_frame_bytes or a field is out of range."""
        n = sum(map(len, body)) if isinstance(body, list) else len(body)
        if n + MIN_LENGTH > self.max_frame_bytes:
            raise ValueError(f"frame body of {n} bytes exceeds max_frame_bytes {self.max_frame_bytes}")
        try:
            header = _pack_header(MIN_LENGTH + n, self.version, kind, op, request_id)
        except struct.error as e:
            raise ValueError(f"frame field out of range: {e}") from None
        parts = self._parts
        parts.append(header)
        if isinstance(body, list):
            parts += body
        elif n:
            parts.append(body)
        if n >= GATHER_BYTES:
            self._gather = True
        self._frames += 1
        self._nbytes += HEADER_SIZE + n

    def extend(self, frames: Iterable[tuple[int, int, int, Body]]) -> None:
        """Add many (kind, op, request_id, body) frames."""
        for kind, op, rid, body in frames:
            self.add(kind, op, rid, body)

    def __len__(self) -> int:
        """Frames waiting."""
        return self._frames

    @property
    def nbytes(self) -> int:
        """Bytes waiting."""
        return self._nbytes

    @property
    def gathers(self) -> bool:
        """Does a large part wait? Then write `take_parts()` with writelines rather than `take()`."""
        return self._gather

    def take_parts(self) -> list[Buffer]:
        """Everything added so far, as parts in order; the writer is empty afterwards."""
        parts = self._parts
        self._parts = []
        self._frames = 0
        self._nbytes = 0
        self._gather = False
        return parts

    def take(self) -> bytes:
        """Everything added so far as one bytes object; the writer is empty afterwards."""
        parts = self.take_parts()
        return parts[0] if len(parts) == 1 and isinstance(parts[0], bytes) else b"".join(parts)
