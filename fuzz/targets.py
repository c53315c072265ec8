"""Coverage-guided fuzzing (atheris, libFuzzer) of what a node decodes from the network.

    python fuzz/targets.py frames|bodies|entries|hello [libFuzzer flags] [corpus dirs]

Each target feeds the bytes to one decoder and fails on any exception but the decoder's own refusal
(ProtocolError, ResponseError, CorruptEntryError): an exception of another kind would reach the node's
catch-all, and a crash or hang is a bug. Seeds are in fuzz/corpus/<target>; tests/test_fuzz.py runs each
target for a bounded number of inputs.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable

import atheris

with atheris.instrument_imports():
    from quorumlog.entry import check_entry, decode_entries
    from quorumlog.errors import CorruptEntryError, InvalidArgumentError
    from quorumlog.hotpath import verify_run as hot_verify_run  # the C version when built
    from quorumlog.net import schemas
    from quorumlog.net.bodies import decode_response
    from quorumlog.net.errors import ProtocolError, ResponseError
    from quorumlog.net.frames import ONEWAY, Frame, FrameDecoder
    from quorumlog.net.hello import ServerHandshake
    from quorumlog.net.ops import Op
    from quorumlog.server.codec import decode_message, is_peer_frame
    from quorumlog.store.base import verify_run

REFUSALS = (ProtocolError, ResponseError)
MAX_BODY = 64 << 10


def frames(data: bytes) -> None:
    """The frame decoder, fed in pieces as a socket delivers them; every frame then through its route."""
    fdp = atheris.FuzzedDataProvider(data)
    dec = FrameDecoder(1 << 20, versions=None if fdp.ConsumeBool() else frozenset({1}))
    try:
        while fdp.remaining_bytes():
            dec.feed(fdp.ConsumeBytes(fdp.ConsumeIntInRange(1, 4096)))
            while (f := dec.next_frame()) is not None:
                if is_peer_frame(f):
                    decode_message(f)
        dec.eof()
    except REFUSALS:
        pass


def bodies(data: bytes) -> None:
    """Every request, response and one-way body schema, and the peer messages, on the same bytes."""
    fdp = atheris.FuzzedDataProvider(data)
    op = fdp.ConsumeIntInRange(0, 255)
    direction = fdp.ConsumeIntInRange(0, 2)
    body = fdp.ConsumeBytes(fdp.remaining_bytes())
    for table in (schemas.REQUESTS, schemas.RESPONSES, schemas.ONEWAYS):
        schema = table.get(op)
        if schema is not None:
            with contextlib.suppress(REFUSALS):
                schema.decode(body)
            with contextlib.suppress(REFUSALS):
                decode_response(schema, body)
    with contextlib.suppress(REFUSALS):
        decode_message(Frame(ONEWAY, op, direction, memoryview(body)))


def entries(data: bytes) -> None:
    """The entry decoder a reader runs, and the checks a follower makes before it writes pushed entries."""
    fdp = atheris.FuzzedDataProvider(data)
    first = fdp.ConsumeIntInRange(0, 1 << 40)
    chain = fdp.ConsumeIntInRange(0, (1 << 32) - 1) if fdp.ConsumeBool() else None
    buf = fdp.ConsumeBytes(fdp.remaining_bytes())
    for call in (lambda: decode_entries(buf, MAX_BODY, chain),
                 lambda: check_entry(buf, 0, chain, MAX_BODY),
                 lambda: verify_run(buf, first, 0, chain, 0, 1 << 20, MAX_BODY),
                 lambda: hot_verify_run(buf, first, 0, chain, 0, 1 << 20, MAX_BODY)):
        with contextlib.suppress(CorruptEntryError, InvalidArgumentError):
            call()


def hello(data: bytes) -> None:
    """A server's handshake fed a sequence of request frames, with and without a secret."""
    fdp = atheris.FuzzedDataProvider(data)
    secret = fdp.ConsumeBool()
    hs = ServerHandshake("quorumlog", "n0", b"secret" if secret else None, groups={"g0": "0123456789abcdef"},
                         nonce=lambda: b"\x01" * 32,
                         tokens={"t": ("token-secret", {"g0": frozenset({"read"})})} if secret else None)
    while fdp.remaining_bytes():
        op = Op.HELLO if fdp.ConsumeBool() else fdp.ConsumeIntInRange(0, 255)
        try:
            reply = hs.receive(op, fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 512)))
        except REFUSALS:
            return
        assert isinstance(reply.op, int) and isinstance(reply.body, bytes)
        # Established with a key configured means a proof was checked: never by an empty or random one.
        assert not (secret and hs.state.value == "established"), "authenticated without the secret"
        if reply.close:
            return


TARGETS: dict[str, Callable[[bytes], None]] = {"frames": frames, "bodies": bodies, "entries": entries,
                                                "hello": hello}


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else ""
    if name not in TARGETS:
        sys.exit(f"usage: {sys.argv[0]} {'|'.join(TARGETS)} [libFuzzer flags] [corpus dirs]")
    atheris.Setup([sys.argv[0], *sys.argv[2:]], TARGETS[name])
    atheris.Fuzz()

if __name__ == "__main__":
    main()
