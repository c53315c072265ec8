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
    from quorumlog.net.errors import HandshakeError, ProtocolError, ResponseError
    from quorumlog.net.frames import MIN_PEER_VERSION, ONEWAY, SUPPORTED_VERSIONS, Frame, FrameDecoder
    from quorumlog.net.hello import CLIENT_ROLE, SERVER_ROLE, ClientHandshake, ServerHandshake, mac
    from quorumlog.net.ops import Op
    from quorumlog.server.codec import decode_message, is_peer_frame
    from quorumlog.store.base import verify_run

REFUSALS = (ProtocolError, ResponseError)
PEER_VERSIONS = tuple(v for v in SUPPORTED_VERSIONS if v >= MIN_PEER_VERSION)  # what two nodes may settle on
CLIENT_VERSIONS = tuple(SUPPORTED_VERSIONS)
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


HELLO_GROUPS = {"g0": "0123456789abcdef"}
SERVER_NONCE, CLIENT_NONCE = b"\x01" * 32, b"\x02" * 32
KEYS = {"client:t": b"token-secret"}  # the key a client of that id proves with; every other id: b"secret"
Message = tuple[int, bytes]


def hello(data: bytes) -> None:
    """Both sides of the handshake fed fuzzed messages: raw bodies, or bodies built from fuzzed fields (so
    the fuzzer reaches AUTH and the proofs), in any order. With a key, neither side may be established
    unless the other side's MAC, made here with the key, was right; the responder never takes its own id,
    the dialler never another id than the one it expects, and both settle on a version both speak: 4
between nodes, 2, 3 or 4 with a client (net/frames.py)."""
    fdp = atheris.FuzzedDataProvider(data)
    if fdp.ConsumeBool():
        _hello_server(fdp)
    else:
        _hello_client(fdp)


def _fuzz_str(fdp: atheris.FuzzedDataProvider, choices: list[str]) -> str:
    i = fdp.ConsumeIntInRange(0, len(choices))
    return choices[i] if i < len(choices) else fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 80))


def _fuzz_nonce(fdp: atheris.FuzzedDataProvider) -> bytes:
    return fdp.ConsumeBytes(32 if fdp.ConsumeBool() else fdp.ConsumeIntInRange(0, 64))


def _hello_server(fdp: atheris.FuzzedDataProvider) -> None:
    """The node's side, facing any dialler."""
    secret = fdp.ConsumeBool()
    hs = ServerHandshake("quorumlog", "n0", b"secret" if secret else None, groups=HELLO_GROUPS,
                         nonce=lambda: SERVER_NONCE,
                         tokens={"t": ("token-secret", {"g0": frozenset({"read"})})} if secret else None)
    proved = False  # the right proof was sent
    while fdp.remaining_bytes():
        try:
            msg = _to_server(fdp, hs)
        except ProtocolError:  # fuzzed fields the schema does not take (a 300-character id): never sent
            continue
        if msg is None:
            continue
        proved = proved or msg[0] == Op.AUTH and msg[1] == _right_auth(hs)
        try:
            reply = hs.receive(*msg)
        except REFUSALS:
            return
        assert isinstance(reply.op, int) and isinstance(reply.body, bytes)
        if hs.state.value == "established":
            assert hs.peer_id != "n0" and hs.version in (PEER_VERSIONS if hs.peer_groups is not None else
                                                         CLIENT_VERSIONS), \
                (hs.peer_id, hs.version)
            # Established with a key configured means a proof was checked: never by an empty or random one.
            assert not secret or proved, "authenticated without the secret"
            if secret:  # and the node proved itself back, with the same key
                assert schemas.AUTH_RESPONSE.decode(reply.body).proof == _node_mac(hs), "no proof of the node"
            return
        if reply.close:
            return


def _to_server(fdp: atheris.FuzzedDataProvider, hs: ServerHandshake) -> Message | None:
    kind = fdp.ConsumeIntInRange(0, 3)
    if kind == 0:  # raw
        op = Op.HELLO if fdp.ConsumeBool() else fdp.ConsumeIntInRange(0, 255)
        return op, fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 512))
    if kind == 1:  # a HELLO of fuzzed fields, in a client's or a peer's layout
        version = fdp.ConsumeIntInRange(0, 4)
        cluster = _fuzz_str(fdp, ["quorumlog"])
        node = _fuzz_str(fdp, ["n1", "n0", "client", "client:t", "client:x", ""])
        if fdp.ConsumeBool():
            return Op.HELLO, schemas.HELLO_REQUEST.encode(version, cluster, node)
        groups = HELLO_GROUPS if fdp.ConsumeBool() else {_fuzz_str(fdp, ["g0"]): fdp.ConsumeUnicodeNoSurrogates(16)}
        return Op.HELLO, schemas.HELLO_PEER_REQUEST.encode(version, cluster, node, groups)
    if kind == 2:  # an AUTH with a fuzzed nonce and proof
        return Op.AUTH, schemas.AUTH_REQUEST.encode(_fuzz_nonce(fdp), fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 64)))
    right = _right_auth(hs)  # the right proof for this handshake, as far as the HELLO went
    return None if right is None else (Op.AUTH, right)


def _server_key(hs: ServerHandshake) -> bytes:
    return KEYS.get(hs.peer_id or "", b"secret") if hs.peer_groups is None else b"secret"


def _right_auth(hs: ServerHandshake) -> bytes | None:
    if hs.peer_id is None or hs.version is None:
        return None
    return schemas.AUTH_REQUEST.encode(CLIENT_NONCE, mac(
        _server_key(hs), CLIENT_ROLE, version=hs.version, cluster="quorumlog", client_id=hs.peer_id,
        server_id="n0", client_nonce=CLIENT_NONCE, server_nonce=SERVER_NONCE, groups=hs.peer_groups))


def _node_mac(hs: ServerHandshake) -> bytes:
    assert hs.peer_id is not None and hs.version is not None
    return mac(_server_key(hs), SERVER_ROLE, version=hs.version, cluster="quorumlog", client_id=hs.peer_id,
               server_id="n0", client_nonce=CLIENT_NONCE, server_nonce=SERVER_NONCE, groups=hs.peer_groups)


def _hello_client(fdp: atheris.FuzzedDataProvider) -> None:
    """A dialler's side, facing whatever answers: an impostor, a relay, a node of another version."""
    node_id = fdp.PickValueInList(["client", "client:t", "n1"])
    key = KEYS.get(node_id, b"secret") if fdp.ConsumeBool() else None
    expect = fdp.PickValueInList([None, "n0"])
    hs = ClientHandshake("quorumlog", node_id, key, groups=HELLO_GROUPS if node_id == "n1" else None,
                         expect_node=expect, nonce=lambda: CLIENT_NONCE)
    hs.start()
    took: tuple[int, str, bytes] | None = None  # version, node id and nonce of the HELLO response it took
    proved = False
    while fdp.remaining_bytes():
        fields = None
        kind = fdp.ConsumeIntInRange(0, 3)
        try:
            if kind == 0:  # raw
                op = Op.AUTH if fdp.ConsumeBool() else fdp.ConsumeIntInRange(0, 255)
                body = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 512))
            elif kind == 1:  # a HELLO response of fuzzed fields
                op = Op.HELLO
                code = 200 if fdp.ConsumeBool() else fdp.ConsumeIntInRange(-1, 600)
                fields = (fdp.ConsumeIntInRange(0, 4), _fuzz_str(fdp, ["n0", "n1", "n2", "client"]), _fuzz_nonce(fdp))
                body = schemas.HELLO_RESPONSE.encode(code, fdp.ConsumeUnicodeNoSurrogates(40), *fields,
                                                     fdp.ConsumeBool())
            elif kind == 2:  # an AUTH response with a fuzzed proof
                op = Op.AUTH
                code = 200 if fdp.ConsumeBool() else fdp.ConsumeIntInRange(-1, 600)
                body = schemas.AUTH_RESPONSE.encode(code, fdp.ConsumeUnicodeNoSurrogates(40),
                                                    fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 64)))
            else:  # the right proof of the node whose HELLO response the client took
                if took is None or key is None:
                    continue
                op = Op.AUTH
                body = schemas.AUTH_RESPONSE.encode(200, "", mac(
                    key, SERVER_ROLE, version=took[0], cluster="quorumlog", client_id=node_id, server_id=took[1],
                    client_nonce=CLIENT_NONCE, server_nonce=took[2], groups=hs.groups))
                proved = True
        except ProtocolError:  # fields the schema does not take: never sent
            continue
        try:
            step = hs.receive(op, body)
        except (*REFUSALS, HandshakeError):
            return
        if step is not None:  # it took a HELLO response and proves itself to that node
            assert step[0] == Op.AUTH and fields is not None and key is not None
            assert schemas.AUTH_REQUEST.decode(step[1]).nonce == CLIENT_NONCE
            took = fields
        if hs.state.value == "established":
            assert hs.version in (PEER_VERSIONS if hs.groups is not None else CLIENT_VERSIONS) and \
                hs.peer_id != node_id, \
                (hs.version, hs.peer_id)
            assert expect is None or hs.peer_id == expect, (expect, hs.peer_id)
            assert key is None or proved, "took a node that did not prove the key"
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
