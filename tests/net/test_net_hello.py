"""The HELLO state machines, joined in memory (no sockets)."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from quorumlog.errors import ResponseCode
from quorumlog.net import schemas
from quorumlog.net.errors import HandshakeError, ProtocolError
from quorumlog.net.hello import ClientHandshake, ServerHandshake, State, proof
from quorumlog.net.ops import Op

NONCE = bytes(range(32))


def run(client: ClientHandshake, server: ServerHandshake) -> list[Op]:
    """Drive both machines to the end; return the ops the client sent."""
    sent = []
    step = client.start()
    while step is not None:
        op, body = step
        sent.append(op)
        reply = server.receive(op, body)
        step = client.receive(reply.op, reply.body)
    return sent


def test_no_secret_is_one_round_trip():
    c, s = ClientHandshake("c1", "n1"), ServerHandshake("c1", "n0")
    assert run(c, s) == [Op.HELLO]
    assert c.state is s.state is State.ESTABLISHED
    assert (c.peer_id, s.peer_id, c.version, s.version) == ("n0", "n1", 1, 1)


def test_right_secret_proves_itself():
    c = ClientHandshake("c1", "n1", "s3cret")
    s = ServerHandshake("c1", "n0", b"s3cret", nonce=lambda: NONCE)
    assert run(c, s) == [Op.HELLO, Op.AUTH]
    assert c.state is s.state is State.ESTABLISHED


def test_proof_is_hmac_sha256_over_nonce_cluster_node():
    expected = hmac.new(b"k", NONCE + b"c1" + b"n1", hashlib.sha256).digest()
    assert proof("k", NONCE, "c1", "n1") == expected


def test_wrong_secret_refused_with_reason():
    c = ClientHandshake("c1", "n1", "wrong")
    s = ServerHandshake("c1", "n0", "right")
    with pytest.raises(HandshakeError, match="wrong shared secret") as ei:
        run(c, s)
    assert ei.value.code == ResponseCode.UNEXPECTED_MEMBER
    assert s.state is State.FAILED and c.state is State.FAILED


def test_missing_secret_on_client():
    with pytest.raises(HandshakeError, match="requires a shared secret"):
        run(ClientHandshake("c1", "n1"), ServerHandshake("c1", "n0", "right"))


def test_client_secret_but_open_server_still_connects():
    c = ClientHandshake("c1", "n1", "x")
    assert run(c, ServerHandshake("c1", "n0")) == [Op.HELLO]


def test_wrong_cluster():
    with pytest.raises(HandshakeError, match="wrong cluster 'other'") as ei:
        run(ClientHandshake("other", "n1"), ServerHandshake("c1", "n0"))
    assert ei.value.code == ResponseCode.METADATA_ERROR


def test_version_negotiation_and_refusal():
    s = ServerHandshake("c1", "n0", versions=frozenset({1, 2}))
    c = ClientHandshake("c1", "n1", version=5)
    run(c, s)
    assert c.version == s.version == 2
    s = ServerHandshake("c1", "n0", versions=frozenset({3, 4}))
    with pytest.raises(HandshakeError, match="version 2 unsupported") as ei:
        run(ClientHandshake("c1", "n1", version=2), s)
    assert ei.value.code == ResponseCode.UNSUPPORTED


def test_server_refuses_anything_before_hello_and_auth():
    s = ServerHandshake("c1", "n0")
    r = s.receive(Op.APPEND, b"\x90")
    assert r.close and s.state is State.FAILED and "expected HELLO" in r.reason
    assert schemas.HELLO_RESPONSE.decode(r.body).code == ResponseCode.ILLEGAL_MEMBER_STATE
    s = ServerHandshake("c1", "n0", "k")
    s.receive(*ClientHandshake("c1", "n1", "k").start())
    r = s.receive(Op.APPEND, b"\x90")
    assert r.close and "expected AUTH" in r.reason


def test_malformed_hello_body_is_a_protocol_error():
    with pytest.raises(ProtocolError):
        ServerHandshake("c1", "n0").receive(Op.HELLO, b"\x93\x01")
    with pytest.raises(ProtocolError):
        ServerHandshake("c1", "n0").receive(Op.HELLO, schemas.HELLO_REQUEST.record(1, "c1", "n")._replace(
            version="1").__repr__().encode())


def test_client_rejects_unexpected_response():
    c = ClientHandshake("c1", "n1")
    c.start()
    with pytest.raises(ProtocolError):
        c.receive(Op.AUTH, schemas.AUTH_RESPONSE.encode(200, ""))
