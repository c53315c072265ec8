"""The HELLO state machines, joined in memory (no sockets)."""

from __future__ import annotations

import hashlib
import hmac

import msgpack
import pytest

from quorumlog.errors import ResponseCode
from quorumlog.net import schemas
from quorumlog.net.errors import HandshakeError, ProtocolError
from quorumlog.net.frames import PROTOCOL_VERSION as VERSION
from quorumlog.net.hello import ClientHandshake, ServerHandshake, State, members_mismatch
from quorumlog.net.ops import Op
from quorumlog.raft.member import members_digest

NONCE = bytes(range(32))  # the server's
CNONCE = bytes(range(32, 64))  # the client's


def run(client: ClientHandshake, server: ServerHandshake, sent: list[Op] | None = None) -> list[Op]:
    """Drive both machines to the end; return the ops the client sent (also into `sent`, kept if it raises)."""
    sent = [] if sent is None else sent
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
    assert (c.peer_id, s.peer_id, c.version, s.version) == ("n0", "n1", VERSION, VERSION)


def test_right_secret_proves_both_sides_in_two_round_trips():
    c = ClientHandshake("c1", "n1", "s3cret", expect_node="n0", nonce=lambda: CNONCE)
    s = ServerHandshake("c1", "n0", b"s3cret", nonce=lambda: NONCE)
    assert run(c, s) == [Op.HELLO, Op.AUTH]
    assert c.state is s.state is State.ESTABLISHED and (c.peer_id, s.peer_id) == ("n0", "n1")


def test_macs_are_hmac_sha256_over_role_version_cluster_both_ids_both_nonces_and_groups():
    from quorumlog.net.hello import CLIENT_ROLE, SERVER_ROLE, mac

    def field(b: bytes) -> bytes:
        return len(b).to_bytes(4, "big") + b

    groups = {"g1": "bbbb", "g0": "aaaa"}  # a peer's: one more field, in group order
    for role in (CLIENT_ROLE, SERVER_ROLE):
        head = [b"quorumlog hello", role.encode(), VERSION.to_bytes(2, "big"), b"c1", b"n1", b"n0", CNONCE, NONCE]
        peer = field(b"g0") + field(b"aaaa") + field(b"g1") + field(b"bbbb")
        for g, tail in ((groups, [peer]), (None, []), ({}, [b""])):
            expected = hmac.new(b"k", b"".join(field(x) for x in head + tail), hashlib.sha256).digest()
            assert mac("k", role, version=VERSION, cluster="c1", client_id="n1", server_id="n0", client_nonce=CNONCE,
                       server_nonce=NONCE, groups=g) == expected
    assert (CLIENT_ROLE, SERVER_ROLE) == ("client->server", "server->client")


def _auth(s: ServerHandshake, client_nonce: bytes, proof: bytes) -> object:
    return s.receive(Op.AUTH, schemas.AUTH_REQUEST.encode(client_nonce, proof))


# Each field of a MAC, and a value for it that is right in another session: a relay or a reflection.
SWAPS = [("role", "server->client"), ("client_id", "n2"), ("server_id", "n2"), ("client_nonce", NONCE),
         ("server_nonce", CNONCE), ("cluster", "c2"), ("version", 2), ("groups", {"g0": "aaaa000000000000"})]


@pytest.mark.parametrize("name, value", SWAPS, ids=[n for n, _ in SWAPS])
def test_the_clients_proof_is_bound_to_role_ids_nonces_and_cluster(name, value):
    """The server takes the client's MAC only over its own role, both ids, both nonces, the cluster (and
    version and groups): the same MAC with any one of them swapped is refused."""
    from quorumlog.net.hello import CLIENT_ROLE, mac

    fields = dict(role=CLIENT_ROLE, version=VERSION, cluster="c1", client_id="n1", server_id="n0", client_nonce=CNONCE,
                  server_nonce=NONCE, groups=None)

    def attempt(**f: object) -> ServerHandshake:
        s = ServerHandshake("c1", "n0", "k", nonce=lambda: NONCE)
        assert not s.receive(*ClientHandshake("c1", "n1").start()).close
        role = f.pop("role")
        reply = _auth(s, CNONCE, mac("k", role, **f))  # type: ignore[arg-type]
        assert schemas.AUTH_RESPONSE.decode(reply.body).code == (
            ResponseCode.SUCCESS if s.state is State.ESTABLISHED else ResponseCode.UNEXPECTED_MEMBER)
        return s

    assert attempt(**fields).state is State.ESTABLISHED
    fields[name] = value
    s = attempt(**fields)
    assert s.state is State.FAILED and "authentication failed" in s.reason


@pytest.mark.parametrize("name, value", SWAPS, ids=[n for n, _ in SWAPS])
def test_the_servers_proof_is_bound_to_role_ids_nonces_and_cluster(name, value):
    """The client takes the server's MAC only over the server's role, both ids, both nonces and the
    cluster: its own proof reflected back (the role swapped), or a proof of another session, fails."""
    from quorumlog.net.errors import UnverifiedPeerError
    from quorumlog.net.hello import SERVER_ROLE, mac

    fields = dict(role=SERVER_ROLE, version=VERSION, cluster="c1", client_id="n1", server_id="n0", client_nonce=CNONCE,
                  server_nonce=NONCE, groups=None)

    def attempt(**f: object) -> ClientHandshake:
        c = ClientHandshake("c1", "n1", "k", expect_node="n0", nonce=lambda: CNONCE)
        c.start()
        step = c.receive(Op.HELLO, schemas.HELLO_RESPONSE.encode(200, "", VERSION, "n0", NONCE, True))
        assert step is not None and step[0] == Op.AUTH
        role = f.pop("role")
        c.receive(Op.AUTH, schemas.AUTH_RESPONSE.encode(200, "", mac("k", role, **f)))  # type: ignore[arg-type]
        return c

    assert attempt(**fields).state is State.ESTABLISHED
    fields[name] = "client->server" if name == "role" else value  # the role swapped: the client's own
    with pytest.raises(UnverifiedPeerError, match="did not prove") as ei:
        attempt(**fields)
    assert ei.value.code == ResponseCode.UNEXPECTED_MEMBER


def test_the_clients_own_proof_reflected_back_is_refused():
    """A relay that answers the client's AUTH with the client's own MAC (same key, same fields)."""
    from quorumlog.net.errors import UnverifiedPeerError

    c = ClientHandshake("c1", "n1", "k", expect_node="n0", nonce=lambda: CNONCE)
    c.start()
    op, body = c.receive(Op.HELLO, schemas.HELLO_RESPONSE.encode(200, "", VERSION, "n0", NONCE, True)) or (0, b"")
    own = schemas.AUTH_REQUEST.decode(body).proof
    with pytest.raises(UnverifiedPeerError, match="did not prove"):
        c.receive(Op.AUTH, schemas.AUTH_RESPONSE.encode(200, "", own))
    assert c.state is State.FAILED


def test_a_server_other_than_the_dialled_node_is_refused_before_any_proof():
    c = ClientHandshake("c1", "n1", "k", expect_node="n1x")
    s = ServerHandshake("c1", "n2", "k")
    sent: list[Op] = []
    with pytest.raises(HandshakeError, match="dialled n1x but the node answering is 'n2'") as ei:
        run(c, s, sent)
    assert sent == [Op.HELLO] and c.state is State.FAILED  # no proof was made for the wrong node
    assert ei.value.code == ResponseCode.UNEXPECTED_MEMBER
    # Without a secret the id is still checked (a claim only, but a wrong address shows).
    with pytest.raises(HandshakeError, match="dialled n1x"):
        run(ClientHandshake("c1", "n1", expect_node="n1x"), ServerHandshake("c1", "n2"))


@pytest.mark.parametrize("secret", [None, "k"])
def test_a_hello_claiming_the_servers_own_id_is_refused(secret):
    s = ServerHandshake("c1", "n0", secret, groups=G_OK)
    reply = s.receive(*ClientHandshake("c1", "n0", secret, groups=G_OK).start())
    assert reply.close and s.state is State.FAILED
    r = schemas.HELLO_RESPONSE.decode(reply.body)
    assert r.code == ResponseCode.UNEXPECTED_MEMBER and r.nonce == b"" and not r.auth_required
    assert r.reason == "HELLO claims this node's own id 'n0'"


def test_a_client_holding_a_secret_refuses_a_server_that_does_not_authenticate():
    c = ClientHandshake("c1", "n1", "x")
    with pytest.raises(HandshakeError, match="node 'n0' does not authenticate") as ei:
        run(c, ServerHandshake("c1", "n0"))
    assert c.state is State.FAILED and ei.value.code == ResponseCode.UNEXPECTED_MEMBER
    from quorumlog.net.errors import UnverifiedPeerError

    assert isinstance(ei.value, UnverifiedPeerError)  # the other end's fault: a client tries another node
    # A server that asks for the client's proof and then answers without one of its own.
    c = ClientHandshake("c1", "n1", "x")
    c.start()
    c.receive(Op.HELLO, schemas.HELLO_RESPONSE.encode(200, "", VERSION, "n0", NONCE, True))
    with pytest.raises(UnverifiedPeerError, match="did not prove"):
        c.receive(Op.AUTH, schemas.AUTH_RESPONSE.encode(200, "", b""))
    assert c.state is State.FAILED


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


def test_wrong_cluster():
    with pytest.raises(HandshakeError, match="cluster name does not match: this client asked for cluster 'other'") \
            as ei:
        run(ClientHandshake("other", "n1"), ServerHandshake("c1", "n0"))
    assert ei.value.code == ResponseCode.METADATA_ERROR


def test_version_negotiation():
    s = ServerHandshake("c1", "n0", versions=frozenset({2, 3}))
    c = ClientHandshake("c1", "n1", version=5)
    run(c, s)
    assert c.version == s.version == 3
    s = ServerHandshake("c1", "n0", versions=frozenset({3, 4}))
    with pytest.raises(HandshakeError, match="peer speaks handshake version 2; this node requires 3") as ei:
        run(ClientHandshake("c1", "n1", version=2), s)
    assert ei.value.code == ResponseCode.UNSUPPORTED


@pytest.mark.parametrize("old", [2, 3])
def test_version_4_is_required_between_nodes_and_clients_of_versions_2_and_3_are_served(old):
    """Versions 3 and 4 changed only peer messages (HaReport.recovering; the quiet heartbeat and NODE_PING,
    raft/quiesce.py): a client of an older version is served in its version, a node of an older version is
    refused at HELLO with a reason, and a node answered in an older version gives up."""
    c, s = ClientHandshake("c1", "client", version=old), ServerHandshake("c1", "n0")
    run(c, s)
    assert c.version == s.version == old
    s = ServerHandshake("c1", "n0", groups=G_OK)
    reply = s.receive(Op.HELLO, schemas.HELLO_PEER_REQUEST.encode(old, "c1", "n1", G_OK))
    assert reply.close and s.state is State.FAILED
    r = schemas.HELLO_RESPONSE.decode(reply.body)
    assert r.code == ResponseCode.UNSUPPORTED
    assert r.reason == f"peer speaks handshake version {old}; this node requires 4: upgrade every node"
    c = ClientHandshake("c1", "n1", groups=G_OK, expect_node="n0")
    c.start()
    with pytest.raises(HandshakeError, match=f"node 'n0' speaks handshake version {old}; this node requires 4"):
        c.receive(Op.HELLO, schemas.HELLO_RESPONSE.encode(200, "", old, "n0", b"", False))


@pytest.mark.parametrize("secret", [None, "k"])
def test_a_node_of_the_previous_version_is_refused_with_a_message_that_says_so(secret):
    """A version-1 node's HELLO (the same layout as today's) is refused at once, and the refusal keeps the
    HELLO response layout that version 1 reads, so the old node logs the reason."""
    s = ServerHandshake("c1", "n0", secret, groups=G_OK)
    reply = s.receive(Op.HELLO, schemas.HELLO_PEER_REQUEST.encode(1, "c1", "n1", G_OK))
    assert reply.close and s.state is State.FAILED
    r = schemas.HELLO_RESPONSE.decode(reply.body)
    assert r.code == ResponseCode.UNSUPPORTED and r.nonce == b"" and not r.auth_required
    assert r.reason == "peer speaks handshake version 1; this node requires 2: upgrade every node"
    # As a version-1 client shows it.
    with pytest.raises(HandshakeError, match="peer speaks handshake version 1; this node requires 2: upgrade every"):
        run(ClientHandshake("c1", "n1", secret, version=1), ServerHandshake("c1", "n0", secret))
    # And a node of version 1 answering a new client (it picks version 1, the highest it speaks).
    c = ClientHandshake("c1", "n1", secret, expect_node="n0")
    c.start()
    with pytest.raises(HandshakeError, match="node 'n0' speaks handshake version 1; this client requires 2: "
                                             "upgrade every node") as ei:
        c.receive(Op.HELLO, schemas.HELLO_RESPONSE.encode(200, "", 1, "n0", NONCE if secret else b"", bool(secret)))
    assert ei.value.code == ResponseCode.UNSUPPORTED and c.state is State.FAILED


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
        run(c, s, sent)
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
    from quorumlog.net.hello import CLIENT_ROLE, mac

    s = ServerHandshake("c1", "n0", "cluster", tokens=TOKENS, nonce=lambda: NONCE)
    assert s.receive(Op.HELLO, schemas.HELLO_REQUEST.encode(2, "c1", node_id)).close is False
    p = mac(proof_key, CLIENT_ROLE, version=VERSION, cluster="c1", client_id=node_id, server_id="n0",
            client_nonce=CNONCE, server_nonce=NONCE) if proof_key else b""
    reply = _auth(s, CNONCE, p)
    assert reply.close and s.state is State.FAILED and "authentication failed" in reply.reason
    assert s.permissions is None


def test_a_token_client_checks_the_node_with_its_token_secret():
    """The node proves itself to a token's client with that token's secret; a relay to a node that does not
    know the token (or to another node than the one dialled) fails like a wrong cluster secret does."""
    from quorumlog.net.errors import UnverifiedPeerError
    from quorumlog.net.hello import token_client_id

    c = ClientHandshake("c1", token_client_id("reader"), "r-secret", expect_node="n0", nonce=lambda: CNONCE)
    s = ServerHandshake("c1", "n0", "cluster", tokens=TOKENS, nonce=lambda: NONCE)
    assert run(c, s) == [Op.HELLO, Op.AUTH] and c.state is s.state is State.ESTABLISHED
    # A node that proves with another key (the cluster's) than the token's is no proof to this client.
    c = ClientHandshake("c1", token_client_id("reader"), "r-secret", nonce=lambda: CNONCE)
    c.start()
    c.receive(Op.HELLO, schemas.HELLO_RESPONSE.encode(200, "", VERSION, "n0", NONCE, True))
    from quorumlog.net.hello import SERVER_ROLE, mac

    wrong = mac("cluster", SERVER_ROLE, version=VERSION, cluster="c1", client_id="client:reader", server_id="n0",
                client_nonce=CNONCE, server_nonce=NONCE)
    with pytest.raises(UnverifiedPeerError, match="did not prove"):
        c.receive(Op.AUTH, schemas.AUTH_RESPONSE.encode(200, "", wrong))
