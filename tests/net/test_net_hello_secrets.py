"""What a node's HELLO/AUTH answers tell a dialler that has not authenticated: not which token names exist
(an unknown token takes the same path, HMAC and constant-time compare included, and gets the same bytes
back as a known token with a wrong proof), and not the node's cluster name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from quorumlog.errors import ResponseCode
from quorumlog.net import hello, schemas
from quorumlog.net.errors import HandshakeError
from quorumlog.net.frames import PROTOCOL_VERSION as VERSION
from quorumlog.net.hello import CLIENT_ROLE, ClientHandshake, ServerHandshake, State, mac, token_client_id
from quorumlog.net.ops import Op

NONCE = bytes(range(32))  # the server's
CNONCE = bytes(range(32, 64))  # the client's
CLUSTER = "prod-cluster-5e1f"
TOKENS = {"reader": ("r-secret", {"g0": frozenset({"read"})})}


def _counting(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[int]:
    calls: list[int] = []
    real: Callable[..., Any] = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def test_unknown_token_and_wrong_proof_get_the_same_refusal_after_the_same_hmac(
        monkeypatch: pytest.MonkeyPatch) -> None:
    macs = _counting(monkeypatch, hello, "mac")
    compares = _counting(monkeypatch, hello.hmac, "compare_digest")
    replies = {}
    for name in ("reader", "nobody"):  # a known token with a wrong proof; an unknown token
        node_id = token_client_id(name)
        s = ServerHandshake(CLUSTER, "n0", "cluster-secret", tokens=TOKENS, nonce=lambda: NONCE)
        assert not s.receive(Op.HELLO, schemas.HELLO_REQUEST.encode(VERSION, CLUSTER, node_id)).close
        proof = mac("a-guess", CLIENT_ROLE, version=VERSION, cluster=CLUSTER, client_id=node_id, server_id="n0",
                    client_nonce=CNONCE, server_nonce=NONCE)
        macs.clear()
        compares.clear()
        reply = s.receive(Op.AUTH, schemas.AUTH_REQUEST.encode(CNONCE, proof))
        assert reply.close and s.state is State.FAILED and s.permissions is None
        # The same work either way: one HMAC over the transcript, one constant-time compare.
        assert (len(macs), len(compares)) == (1, 1), (name, len(macs), len(compares))
        replies[name] = (reply.op, reply.body)
    # The same bytes back: the dialler cannot tell an unknown token from a wrong secret.
    assert replies["reader"] == replies["nobody"]
    assert "authentication failed" in schemas.AUTH_RESPONSE.decode(replies["nobody"][1]).reason


def test_an_unknown_token_never_authenticates() -> None:
    """The dummy key an unknown token is checked against admits nobody, whatever the proof."""
    node_id = token_client_id("nobody")
    for key in ("", "cluster-secret", "r-secret", hello._UNKNOWN_KEY):
        s = ServerHandshake(CLUSTER, "n0", "cluster-secret", tokens=TOKENS, nonce=lambda: NONCE)
        s.receive(Op.HELLO, schemas.HELLO_REQUEST.encode(VERSION, CLUSTER, node_id))
        proof = mac(key, CLIENT_ROLE, version=VERSION, cluster=CLUSTER, client_id=node_id, server_id="n0",
                    client_nonce=CNONCE, server_nonce=NONCE) if key else b""
        reply = s.receive(Op.AUTH, schemas.AUTH_REQUEST.encode(CNONCE, proof))
        assert reply.close and s.state is State.FAILED
        assert "unknown token 'nobody'" in s.reason  # the node's own log says why


@pytest.mark.parametrize("peer_layout", [False, True])
def test_a_wrong_cluster_is_not_told_the_right_one(peer_layout: bool) -> None:
    s = ServerHandshake(CLUSTER, "n0", "cluster-secret", nonce=lambda: NONCE)
    body = (schemas.HELLO_PEER_REQUEST.encode(VERSION, "staging", "n1", {}) if peer_layout
            else schemas.HELLO_REQUEST.encode(VERSION, "staging", "client"))
    reply = s.receive(Op.HELLO, body)
    assert reply.close and s.state is State.FAILED
    assert CLUSTER.encode() not in reply.body
    r = schemas.HELLO_RESPONSE.decode(reply.body)
    assert r.code == ResponseCode.METADATA_ERROR and r.reason == "cluster name does not match"
    assert CLUSTER in s.reason and "staging" in s.reason  # the node's own log has both names


def test_the_client_is_told_to_check_its_cluster_name() -> None:
    c = ClientHandshake("staging", "client")
    with pytest.raises(HandshakeError) as ei:
        op, body = c.start()
        reply = ServerHandshake(CLUSTER, "n0").receive(op, body)
        c.receive(reply.op, reply.body)
    text = str(ei.value)
    assert ei.value.code == ResponseCode.METADATA_ERROR and CLUSTER not in text
    assert "cluster name does not match" in text and "'staging'" in text and "check" in text, text
