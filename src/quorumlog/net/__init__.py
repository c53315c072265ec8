"""The wire layer: sans-I/O frame and body codecs, the HELLO handshake, asyncio connections.

See docs/protocol.md for the byte-level specification.
"""

from .bodies import Schema, decode_response, encode_error
from .connection import Connection, Handler
from .dial import connect
from .endpoint import Endpoint
from .errors import (
    ConnectionClosedError,
    HandshakeError,
    NotANodeError,
    ProtocolError,
    RequestTimeoutError,
    ResponseError,
    SecretRequiredError,
    UnverifiedPeerError,
)
from .frames import (
    DEFAULT_MAX_FRAME_BYTES,
    ONEWAY,
    PROTOCOL_VERSION,
    REQUEST,
    RESPONSE,
    Frame,
    FrameDecoder,
    FrameWriter,
    Kind,
    encode_frame,
)
from .loop import run
from .ops import DLEDGER_CODES, Op
from .server import Server, serve

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES", "DLEDGER_CODES", "ONEWAY", "PROTOCOL_VERSION", "REQUEST", "RESPONSE",
    "Connection", "ConnectionClosedError", "Endpoint", "Frame", "FrameDecoder", "FrameWriter", "Handler",
    "HandshakeError", "Kind", "NotANodeError", "Op", "ProtocolError", "RequestTimeoutError", "ResponseError",
    "Schema", "SecretRequiredError", "Server", "UnverifiedPeerError", "connect", "decode_response", "encode_error",
    "encode_frame", "run", "serve",
]
