"""The HELLO state machines, joined in memory (no sockets)."""

from __future__ import annotations

import hashlib
import hmac

import msgpack
import pytest

from quorumlog.errors import ResponseCode
from quorumlog.net import schemas
from quorumlog.net.errors import HandshakeError, ProtocolError
from quorumlog.net.hello import ClientHandshake, ServerHandshake, State, members_mismatch, proof
from quorumlog.net.ops import Op
from quorumlog.raft.member import members_digest

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


# -- member digests (peers only) -------------------------------------------------------------------
G_OK = {"g0": "aaaa000000000000", "g1": "bbbb000000000000"}


def test_peers_with_equal_digests_connect_and_a_client_sends_none():
    c = ClientHandshake("c1", "n1", groups=G_OK)
    s = ServerHandshake("c1", "n0", groups={"g0": G_OK["g0"], "g9": "cccc000000000000"})
    assert run(c, s) == [Op.HELLO]
    assert s.state is State.ESTABLISHED and s.peer_groups == G_OK  # g1 and g9: hosted by one side only
    # A client's HELLO keeps the three-field layout, which the server still takes.
    op, body = ClientHandshake("c1").start()
    assert schemas.HELLO_REQUEST.decode(body).node_id == "client"
    s = ServerHandshake("c1", "n0", groups=G_OK)
    assert run(ClientHandshake("c1"), s) == [Op.HELLO] and s.peer_groups is None


def test_member_digest_mismatch_is_refused_naming_group_and_both_digests():
    c = ClientHandshake("c1", "n2", groups={"g0": "1a2b000000000000", "g1": G_OK["g1"]})
    s = ServerHandshake("c1", "n0", groups=G_OK)
    with pytest.raises(HandshakeError) as ei:
        run(c, s)
    assert ei.value.code == ResponseCode.METADATA_ERROR
    assert c.state is s.state is State.FAILED
    assert s.reason == ("group g0 member list differs (n2 has 1a2b000000000000, n0 has aaaa000000000000); "
                        "check the peers of every node's config")
    assert s.reason in str(ei.value)


def test_member_digests_are_compared_only_after_the_proof():
    theirs = {"g0": "1a2b000000000000"}
    # A stranger with the wrong secret learns nothing of this node's groups.
    with pytest.raises(HandshakeError) as ei:
        run(ClientHandshake("c1", "n2", "wrong", groups=theirs), ServerHandshake("c1", "n0", "k", groups=G_OK))
    assert ei.value.code == ResponseCode.UNEXPECTED_MEMBER and G_OK["g0"] not in str(ei.value)
    # A peer that proves itself is refused at AUTH, with the reason.
    c = ClientHandshake("c1", "n2", "k", groups=theirs)
    s = ServerHandshake("c1", "n0", "k", groups=G_OK, nonce=lambda: NONCE)
    sent: list[Op] = []
    with pytest.raises(HandshakeError, match="group g0 member list differs") as ei:
        step = c.start()
        while step is not None:
            sent.append(step[0])
            reply = s.receive(*step)
            step = c.receive(reply.op, reply.body)
    assert sent == [Op.HELLO, Op.AUTH] and ei.value.code == ResponseCode.METADATA_ERROR


def test_several_mismatched_groups_are_named_in_order_and_capped():
    ours = {f"g{i}": f"{i:016x}" for i in range(6)}
    theirs = {g: "f" * 16 for g in ours}
    reason = members_mismatch("n2", theirs, "n0", ours)
    assert reason is not None
    assert reason.startswith("group g0 member list differs (n2 has ffffffffffffffff, n0 has 0000000000000000); "
                             "group g1 ")
    assert "g3" not in reason and "and 3 more groups" in reason
    assert members_mismatch("n2", {"g0": "x"}, "n0", {"g1": "y"}) is None


def test_malformed_groups_in_hello_are_a_protocol_error():
    s = ServerHandshake("c1", "n0", groups=G_OK)
    with pytest.raises(ProtocolError, match="HelloRequest.groups"):
        s.receive(Op.HELLO, msgpack.packb((1, "c1", "n1", {"g0": 5})))
    with pytest.raises(ProtocolError, match="HelloRequest.groups"):
        ServerHandshake("c1", "n0").receive(Op.HELLO, msgpack.packb((1, "c1", "n1", ["g0"])))


def test_real_member_digests_differ_for_another_member_list():
    """The digest the node sends (raft.member.members_digest) tells an extra member apart, not the order."""
    same = members_digest("g0", ["n0", "n1", "n2"])
    assert members_digest("g0", ["n2", "n0", "n1", "n0"]) == same
    c = ClientHandshake("c1", "n2", groups={"g0": members_digest("g0", ["n0", "n1", "n2", "n3"])})
    with pytest.raises(HandshakeError, match=f"n0 has {same}"):
        run(c, ServerHandshake("c1", "n0", groups={"g0": same}))


TOKENS = {"reader": ("r-secret", {"g0": frozenset({"read"})}), "ops": ("o-secret", {"*": frozenset({"admin"})})}


def test_a_token_proves_its_own_secret_and_gets_its_permissions():
    from quorumlog.net.hello import allowed, token_client_id

    s = ServerHandshake("c1", "n0", "cluster", tokens=TOKENS, nonce=lambda: NONCE)
    c = ClientHandshake("c1", token_client_id("reader"), "r-secret")
    assert run(c, s) == [Op.HELLO, Op.AUTH] and s.state is State.ESTABLISHED
    assert s.permissions == {"g0": frozenset({"read"})}
    assert allowed(s.permissions, "g0", "read") and not allowed(s.permissions, "g0", "append")
    assert not allowed(s.permissions, "g1", "read") and allowed(None, "g1", "admin")
    assert allowed({"*": frozenset({"admin"})}, "any", "admin")
    full = ServerHandshake("c1", "n0", "cluster", tokens=TOKENS, nonce=lambda: NONCE)
    run(ClientHandshake("c1", "client", "cluster"), full)  # the cluster's secret: every permission
    assert full.state is State.ESTABLISHED and full.permissions is None


@pytest.mark.parametrize("node_id, proof_key", [
    ("client:reader", "o-secret"),  # another token's secret
    ("client:nobody", "r-secret"),  # an unknown token
    ("client:nobody", None),  # an unknown token and an empty proof: never a match
    ("client", "r-secret"),  # a token's secret offered as the cluster's
])
def test_token_refusals(node_id, proof_key):
    s = ServerHandshake("c1", "n0", "cluster", tokens=TOKENS, nonce=lambda: NONCE)
    assert s.receive(Op.HELLO, schemas.HELLO_REQUEST.encode(1, "c1", node_id)).close is False
    p = proof(proof_key, NONCE, "c1", node_id) if proof_key else b""
    reply = s.receive(Op.AUTH, schemas.AUTH_REQUEST.encode(p))
    assert reply.close and s.state is State.FAILED and "authentication failed" in reply.reason
    assert s.permissions is None
