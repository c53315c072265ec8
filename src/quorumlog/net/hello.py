"""The HELLO handshake as two pure state machines (no I/O): bodies in, bodies out.

Protocol version 2: a mutual challenge. Both sides send a fresh 32-byte nonce and each proves the key with
an HMAC-SHA256 that names its role, both ids, both nonces, the cluster, the version and the dialler's
groups (mac() below), so a proof is good for one direction of one connection between two named ends:

    dialler (client or peer)                    responder (the node dialled)
    HELLO(version, cluster, node_id[, groups])   ->
                                       <-    HELLO response(code, reason, version, node_id, Ns, auth_required)
    AUTH(Nc, MAC(key, "client->server", ...))    ->      (only when auth_required)
                                       <-    AUTH response(code, reason, MAC(key, "server->client", ...))

The dialler checks the HELLO response before it proves anything: a node that names another id than the
one dialled (`expect_node`), or that does not authenticate while the dialler holds a key, is refused
(UnverifiedPeerError), and so is an AUTH response without the node's own proof. The responder refuses a
HELLO that claims its own id. Nothing is handled before both proofs: a relay that hands the handshake to
another node, or back to the dialler's own node, fails it.

A refusal (wrong version, cluster or proof, or any other operation first) is a response with a
non-SUCCESS code and a reason, after which the server closes the connection. The HELLO bodies keep
this layout in every protocol version, so peers of different versions can always tell each other why:
a node of version 1 (the one-sided proof) is refused at HELLO with "peer speaks handshake version 1; this
node requires 2: upgrade every node", and a dialler answered in version 1 gives up with the same words.
Versions 3 and 4 changed only messages between nodes: a node takes clients of version 2, 3 or 4, and peers
of 4.
A refusal tells a dialler that has not proved the key nothing it did not send: a wrong cluster name is
answered "cluster name does not match" (not the node's own cluster name), and an unknown token is checked
like a known one, an HMAC under a key nobody knows and a constant-time compare, and refused with the same
bytes as a wrong proof, so neither the answer nor its timing tells which token names exist. The node's own
log (Reply.reason) says precisely why.

A node connecting to a peer adds `groups`, {group: group id} for each group it hosts (a Raft group's id,
the one its stores record, raft/reconfig.py; a primary/backup group's members digest); the server
refuses (METADATA_ERROR) when a group both name has another id on its side: two nodes of two different
groups of one name, or with different member lists, count different majorities and must never talk
Raft. A group one side names no id for (a node that joins it and has yet to learn it) is not compared.
Clients send no groups.

The key is the cluster's shared secret, which peers and clients with every permission know, or a client
token's own secret: such a client names itself "client:<token>" and gets that token's permissions per
group ("read", "append", "admin"; "*" for every group), which the node enforces; the node proves itself
to that client with the token's secret.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, NoReturn

from ..errors import ResponseCode
from .bodies import unpack
from .errors import HandshakeError, ProtocolError, SecretRequiredError, UnverifiedPeerError
from .frames import MIN_PEER_VERSION, PROTOCOL_VERSION, SUPPORTED_VERSIONS
from .ops import Op, op_name
from .schemas import AUTH_REQUEST, AUTH_RESPONSE, HELLO_PEER_REQUEST, HELLO_REQUEST, HELLO_RESPONSE

NONCE_BYTES = 32
# The role a MAC is made in: a dialler's proof is never a responder's, nor the other way round.
CLIENT_ROLE = "client->server"
SERVER_ROLE = "server->client"
_MAC_DOMAIN = b"quorumlog hello"
CLIENT_ID = "client"
TOKEN_PREFIX = "client:"  # a client authenticating with a named token: "client:<name>"


def is_client_id(peer_id: str | None) -> bool:
    """Whether a HELLO's or a certificate's id is a client's ("client", "client:<token>"), not a node's."""
    return peer_id == CLIENT_ID or (peer_id or "").startswith(TOKEN_PREFIX)


CLUSTER_MISMATCH = "cluster name does not match"  # the whole answer to a wrong cluster name
# The key an unknown token's proof is checked against (never matched: the check fails anyway), so that it
# costs what a known token's does.
_UNKNOWN_KEY = os.urandom(32)
# What a connection may do: {group or "*": permissions}; None is every permission (a peer, or a client
# that knows the cluster's secret, or any client of a node without authentication).
Permissions = Mapping[str, frozenset[str]]


def token_client_id(name: str) -> str:
    """The node id a client authenticating with token `name` sends in HELLO."""
    return TOKEN_PREFIX + name


def allowed(permissions: Permissions | None, group: str, permission: str) -> bool:
    """Whether a connection with `permissions` may do `permission` ("read", "append", "admin") in `group`."""
    if permissions is None:
        return True
    return permission in permissions.get(group, ()) or permission in permissions.get("*", ())
# Codes of a refusal (errors.py has no authentication code; these are the closest DLedger ones).
CODE_BAD_VERSION = ResponseCode.UNSUPPORTED
CODE_BAD_CLUSTER = ResponseCode.METADATA_ERROR
CODE_BAD_AUTH = ResponseCode.UNEXPECTED_MEMBER
CODE_NOT_READY = ResponseCode.ILLEGAL_MEMBER_STATE
CODE_BAD_MEMBERS = ResponseCode.METADATA_ERROR


def _key(secret: str | bytes | None) -> bytes | None:
    if secret is None or secret == "" or secret == b"":
        return None
    return secret.encode() if isinstance(secret, str) else bytes(secret)


def _field(b: bytes) -> bytes:
    return len(b).to_bytes(4, "big") + b


def mac(secret: str | bytes, role: str, *, version: int, cluster: str, client_id: str, server_id: str,
        client_nonce: bytes, server_nonce: bytes, groups: Mapping[str, str] | None = None) -> bytes:
    """HMAC-SHA256(secret, the length-prefixed fields "quorumlog hello", role, version (u16), cluster, client id,
    server id, client nonce, server nonce[, groups]): each a u32 big-endian length and the bytes (strings
    UTF-8); `groups`, a peer's {group: group id}, is one more field of length-prefixed names and
    ids in name order, absent for a client. `role` is CLIENT_ROLE for the dialler's proof and
    SERVER_ROLE for the responder's."""
    key = _key(secret)
    if key is None:
        raise ValueError("empty secret")
    parts = [_MAC_DOMAIN, role.encode(), version.to_bytes(2, "big"), cluster.encode(), client_id.encode(),
             server_id.encode(), client_nonce, server_nonce]
    if groups is not None:
        parts.append(b"".join(_field(g.encode()) + _field(groups[g].encode()) for g in sorted(groups)))
    return hmac.new(key, b"".join(map(_field, parts)), hashlib.sha256).digest()


@dataclass(frozen=True, slots=True)
class Transcript:
    """What both MACs of one handshake cover (besides the role)."""

    version: int
    cluster: str
    client_id: str
    server_id: str
    client_nonce: bytes
    server_nonce: bytes
    groups: Mapping[str, str] | None

    def mac(self, key: bytes, role: str) -> bytes:
        return mac(key, role, version=self.version, cluster=self.cluster, client_id=self.client_id,
                   server_id=self.server_id, client_nonce=self.client_nonce, server_nonce=self.server_nonce,
                   groups=self.groups)


def version_refusal(theirs: int, ours: int, who: str = "peer", we: str = "node") -> str:
    """The reason a handshake of an older protocol version is refused with (on either side)."""
    return f"{who} speaks handshake version {theirs}; this {we} requires {ours}: upgrade every node"


def decode_hello(body: bytes | bytearray | memoryview) -> tuple[int, str, str, dict[str, str] | None]:
    """(version, cluster, node_id, groups) of a HELLO request in either layout; groups is None for a client."""
    values = unpack(body)
    if isinstance(values, tuple) and len(values) == len(HELLO_PEER_REQUEST.fields):
        r = HELLO_PEER_REQUEST.validate(values)
        return r.version, r.cluster, r.node_id, dict(r.groups)
    r = HELLO_REQUEST.validate(values)
    return r.version, r.cluster, r.node_id, None


def members_mismatch(peer: str, theirs: Mapping[str, str], me: str, ours: Mapping[str, str]) -> str | None:
    """The refusal reason when a group both nodes name has different ids, else None. (The wording, "member
    list differs", is the one operators and log searches know: a group id is its first members' digest.)"""
    bad = sorted(g for g in theirs.keys() & ours.keys() if theirs[g] != ours[g])
    if not bad:
        return None
    parts = [f"group {g} member list differs ({peer} has {theirs[g]}, {me} has {ours[g]})" for g in bad[:3]]
    more = f" and {len(bad) - 3} more groups" if len(bad) > 3 else ""
    return "; ".join(parts) + more + "; check the peers of every node's config"


class State(Enum):
    AWAIT_HELLO = "await-hello"  # server: nothing received yet; client: HELLO sent
    AWAIT_AUTH = "await-auth"  # server: nonce sent, proof expected; client: proof sent
    ESTABLISHED = "established"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Reply:
    """What the server sends back: a response body for `op`, and whether to close afterwards."""

    op: Op
    body: bytes
    close: bool = False
    reason: str = ""


class ServerHandshake:
    """Server side. Feed each request frame with receive(op, body) until state is ESTABLISHED or FAILED.

    `versions` are the protocol versions this server speaks; the highest one the client also speaks
    is chosen (the client proposes its highest). `groups` ({group: group id}) are compared with a
    connecting peer's, once it has proved itself. `nonce` makes tests deterministic.
    """

    def __init__(self, cluster: str, node_id: str, secret: str | bytes | None = None, *,
                 versions: frozenset[int] = SUPPORTED_VERSIONS, groups: Mapping[str, str] | None = None,
                 nonce: Callable[[], bytes] = lambda: os.urandom(NONCE_BYTES),
                 tokens: Mapping[str, tuple[str | bytes, Permissions]] | None = None,
                 cert_permissions: Mapping[str, Permissions] | None = None) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self._key = _key(secret)
        self._tokens = {name: (_key(sec), perms) for name, (sec, perms) in (tokens or {}).items()}
        # Without AUTH (TLS alone), what a client certificate naming "client:<name>" may do: [[token]] name's.
        self._cert_permissions = dict(cert_permissions or {})
        self.permissions: Permissions | None = None  # once established: what this connection may do
        self.identity: str | None = None  # the id the peer's TLS certificate names, when it has one (tls.py)
        self._groups = dict(groups or {})
        self.peer_groups: dict[str, str] | None = None  # what a connecting peer sent; None for a client
        self._versions = versions
        self._nonce_source = nonce
        self._nonce = b""
        self.state = State.AWAIT_HELLO
        self.peer_id: str | None = None
        self.version: int | None = None
        self.reason = ""

    def receive(self, op: int, body: bytes | bytearray | memoryview) -> Reply:
        """Process one request; ProtocolError if its body is malformed (the caller closes then)."""
        if self.state is State.AWAIT_HELLO and op == Op.HELLO:
            return self._on_hello(body)
        if self.state is State.AWAIT_AUTH and op == Op.AUTH:
            return self._on_auth(body)
        expected = "HELLO" if self.state is State.AWAIT_HELLO else "AUTH"
        reason = f"expected {expected}, got {op_name(op)} (handshake state {self.state.value})"
        if self.state is State.AWAIT_AUTH:
            return self._refuse(Op.AUTH, CODE_NOT_READY, reason)
        return self._refuse_hello(CODE_NOT_READY, reason)

    def _refuse_hello(self, code: ResponseCode, reason: str, local: str | None = None) -> Reply:
        """Refuse with `reason` sent, and `local` (default: the same) logged by this node."""
        body = HELLO_RESPONSE.encode(int(code), reason, self.version or PROTOCOL_VERSION, self.node_id, b"",
                                     False)
        return self._fail(Op.HELLO, body, local or reason)

    def _refuse(self, op: Op, code: ResponseCode, reason: str, local: str | None = None) -> Reply:
        return self._fail(op, AUTH_RESPONSE.encode(int(code), reason, b""), local or reason)

    def refuse_established(self, op: Op, code: ResponseCode, reason: str) -> Reply:
        """The refusal that replaces the reply which would have established the connection (the node
        holds its limit of connections): `op` is that reply's, HELLO or AUTH."""
        if op == Op.HELLO:
            return self._refuse_hello(code, reason)
        return self._refuse(Op.AUTH, code, reason)

    def _fail(self, op: Op, body: bytes, reason: str) -> Reply:
        self.state = State.FAILED
        self.reason = reason
        return Reply(op, body, close=True, reason=reason)

    def _members_reason(self) -> str | None:
        if self.peer_groups is None or self.peer_id is None:
            return None
        return members_mismatch(self.peer_id, self.peer_groups, self.node_id, self._groups)

    def _on_hello(self, body: bytes | bytearray | memoryview) -> Reply:
        version, cluster, node_id, self.peer_groups = decode_hello(body)
        self.peer_id = node_id
        usable = [v for v in self._versions if v <= version]
        if not usable:  # below every version this node speaks (above them it picks its highest)
            return self._refuse_hello(CODE_BAD_VERSION, version_refusal(version, min(self._versions)))
        self.version = max(usable)
        if self.peer_groups is not None and self.version < MIN_PEER_VERSION <= max(self._versions):
            # A node's messages to its peers changed in version 3: an older node would fail to read them.
            return self._refuse_hello(CODE_BAD_VERSION, version_refusal(version, MIN_PEER_VERSION))
        if cluster != self.cluster:  # the dialler is not told the right name: only who knows it learns it
            return self._refuse_hello(CODE_BAD_CLUSTER, CLUSTER_MISMATCH,
                                      f"wrong cluster {cluster!r}: this node is in {self.cluster!r}")
        if not node_id:
            return self._refuse_hello(CODE_BAD_AUTH, "empty node id")
        if node_id == self.node_id:  # its own dial relayed back to it, or a stranger posing as it
            return self._refuse_hello(CODE_BAD_AUTH, f"HELLO claims this node's own id {node_id!r}")
        if self.identity is not None and node_id != self.identity:
            return self._refuse_hello(CODE_BAD_AUTH, f"HELLO names {node_id!r} but the TLS certificate names "
                                                     f"{self.identity!r}")
        if self._key is None and not self._tokens:
            reason = self._members_reason()
            if reason is not None:
                return self._refuse_hello(CODE_BAD_MEMBERS, reason)
            if self.identity is not None and self.identity.startswith(TOKEN_PREFIX):
                perms = self._cert_permissions.get(self.identity)
                if perms is None:  # a certificate of a named client is not the cluster's admin client's
                    return self._refuse_hello(CODE_BAD_AUTH, f"the certificate names {self.identity!r} and no "
                                                             f"[[token]] gives it permissions on this node")
                self.permissions = perms
            self.state = State.ESTABLISHED
            return Reply(Op.HELLO, HELLO_RESPONSE.encode(int(ResponseCode.SUCCESS), "", self.version,
                                                         self.node_id, b"", False))
        self._nonce = self._nonce_source()
        if len(self._nonce) != NONCE_BYTES:
            raise ValueError(f"nonce must be {NONCE_BYTES} bytes")
        self.state = State.AWAIT_AUTH
        return Reply(Op.HELLO, HELLO_RESPONSE.encode(int(ResponseCode.SUCCESS), "", self.version, self.node_id,
                                                     self._nonce, True))

    def _on_auth(self, body: bytes | bytearray | memoryview) -> Reply:
        auth = AUTH_REQUEST.decode(body)
        assert self.peer_id is not None and self.version is not None
        if len(auth.nonce) != NONCE_BYTES:
            return self._refuse(Op.AUTH, CODE_BAD_AUTH, f"AUTH nonce of {len(auth.nonce)} bytes, expected "
                                                        f"{NONCE_BYTES}")
        key, permissions = self._key, None
        token = self.peer_id[len(TOKEN_PREFIX):] if self.peer_id.startswith(TOKEN_PREFIX) else None
        if token is not None and self.peer_groups is None:
            key, permissions = self._tokens.get(token, (None, None))
        t = Transcript(self.version, self.cluster, self.peer_id, self.node_id, bytes(auth.nonce), self._nonce,
                       self.peer_groups)
        # An unknown token fails as a wrong secret does, after the same HMAC and compare (under a key
        # nobody knows) and with the same answer: neither tells which tokens exist.
        right = hmac.compare_digest(t.mac(_UNKNOWN_KEY if key is None else key, CLIENT_ROLE), auth.proof)
        if key is None or not right:
            what = "token" if token is not None else "shared secret"
            told = f"authentication failed: wrong {what}, or a proof made for another node or connection"
            unknown = token is not None and self.peer_groups is None and token not in self._tokens
            local = f"authentication failed: unknown token {token!r}" if unknown else told  # for this node's log
            return self._refuse(Op.AUTH, CODE_BAD_AUTH, told, local)
        self.permissions = permissions
        # Compared only now: an unauthenticated stranger learns nothing of this node's groups.
        reason = self._members_reason()
        if reason is not None:
            return self._refuse(Op.AUTH, CODE_BAD_MEMBERS, reason)
        self.state = State.ESTABLISHED
        # This node's own proof, with the same key: the dialler checks it before it sends anything else.
        return Reply(Op.AUTH, AUTH_RESPONSE.encode(int(ResponseCode.SUCCESS), "", t.mac(key, SERVER_ROLE)))


class ClientHandshake:
    """Client side: start() gives the HELLO body; feed each response to receive() until established.

    receive() returns the next (op, body) to send, or None once the connection is established;
    it raises HandshakeError (carrying the server's code and reason) on a refusal, and UnverifiedPeerError
    (a HandshakeError) when the other end is not the node it should be: another id than `expect_node`,
    no authentication while this side holds a secret, or a missing or wrong proof. A node connecting to
    a peer passes `groups`, {group: group id} of every group it hosts; a client passes none.
    `nonce` makes tests deterministic.
    """

    def __init__(self, cluster: str, node_id: str = CLIENT_ID, secret: str | bytes | None = None, *,
                 version: int = PROTOCOL_VERSION, groups: Mapping[str, str] | None = None,
                 expect_node: str | None = None, min_version: int = min(SUPPORTED_VERSIONS),
                 nonce: Callable[[], bytes] = lambda: os.urandom(NONCE_BYTES)) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self._key = _key(secret)
        self.groups = None if groups is None else dict(groups)
        self.proposed_version = version
        if groups is not None:  # a node dialling a peer: peer messages need MIN_PEER_VERSION (frames.py)
            min_version = max(min_version, MIN_PEER_VERSION)
        self.min_version = min(min_version, version)
        self.expect_node = expect_node
        self._nonce_source = nonce
        self._transcript: Transcript | None = None  # what both proofs cover, once the HELLO response is in
        self.state = State.AWAIT_HELLO
        self.version: int | None = None
        self.peer_id: str | None = None

    @property
    def _we(self) -> str:
        return "client" if self.groups is None else "node"

    def start(self) -> tuple[Op, bytes]:
        """The HELLO request."""
        if self.groups is None:
            return Op.HELLO, HELLO_REQUEST.encode(self.proposed_version, self.cluster, self.node_id)
        return Op.HELLO, HELLO_PEER_REQUEST.encode(self.proposed_version, self.cluster, self.node_id, self.groups)

    def receive(self, op: int, body: bytes | bytearray | memoryview) -> tuple[Op, bytes] | None:
        """Process the response to the last request sent."""
        if self.state is State.AWAIT_HELLO and op == Op.HELLO:
            return self._on_hello(HELLO_RESPONSE.decode(body))
        if self.state is State.AWAIT_AUTH and op == Op.AUTH:
            a = AUTH_RESPONSE.decode(body)
            if a.code != ResponseCode.SUCCESS:
                self._refused(a.code, a.reason)
            assert self._key is not None and self._transcript is not None
            if not hmac.compare_digest(self._transcript.mac(self._key, SERVER_ROLE), a.proof):
                what = "its token's secret" if self.node_id.startswith(TOKEN_PREFIX) else "the shared secret"
                self._unverified(f"node {self.peer_id!r} did not prove that it knows {what}: not a node of "
                                 f"cluster {self.cluster!r} (an impostor, or a relay to another node)")
            self.state = State.ESTABLISHED
            return None
        state = self.state
        self.state = State.FAILED
        raise ProtocolError(f"unexpected {op_name(op)} response in handshake state {state.value}")

    def _on_hello(self, r: Any) -> tuple[Op, bytes] | None:
        if r.code != ResponseCode.SUCCESS:
            if r.reason == CLUSTER_MISMATCH:  # the node does not say its name: say which one we sent
                self._refused(r.code, f"{r.reason}: this {self._we} asked for cluster {self.cluster!r}; check "
                                      "the cluster name it was given against the nodes' `cluster` setting")
            self._refused(r.code, r.reason)
        if r.version > self.proposed_version:
            self.state = State.FAILED
            raise ProtocolError(f"server chose version {r.version}, above the proposed {self.proposed_version}")
        if r.version < self.min_version:  # a node of an older version: it would take the old, one-sided proof
            self.state = State.FAILED
            raise HandshakeError(version_refusal(r.version, self.min_version, f"node {r.node_id!r}", self._we),
                                 CODE_BAD_VERSION)
        self.version = r.version
        self.peer_id = r.node_id
        if self.expect_node is not None and r.node_id != self.expect_node:
            self._unverified(f"dialled {self.expect_node} but the node answering is {r.node_id!r}: a wrong "
                             "address in the configuration, or a relay")
        if r.node_id == self.node_id:
            self._unverified(f"the node answering claims this {self._we}'s own id {r.node_id!r}: a relay of "
                             "this connection back to its own node")
        if not r.auth_required:
            if self._key is not None:
                self._unverified(f"node {r.node_id!r} does not authenticate (auth_required is false) but this "
                                 f"{self._we} holds a secret: refusing a node that cannot prove it is one")
            self.state = State.ESTABLISHED
            return None
        if self._key is None:
            self.state = State.FAILED
            raise SecretRequiredError(f"node {r.node_id!r} requires a shared secret and this {self._we} has none",
                                      CODE_BAD_AUTH)
        if len(r.nonce) != NONCE_BYTES:
            self.state = State.FAILED
            raise ProtocolError(f"HELLO nonce of {len(r.nonce)} bytes, expected {NONCE_BYTES}")
        nonce = self._nonce_source()
        if len(nonce) != NONCE_BYTES:
            raise ValueError(f"nonce must be {NONCE_BYTES} bytes")
        t = self._transcript = Transcript(r.version, self.cluster, self.node_id, r.node_id, nonce, bytes(r.nonce),
                                          self.groups)
        self.state = State.AWAIT_AUTH
        return Op.AUTH, AUTH_REQUEST.encode(nonce, t.mac(self._key, CLIENT_ROLE))

    def _unverified(self, reason: str) -> NoReturn:
        self.state = State.FAILED
        raise UnverifiedPeerError(reason, CODE_BAD_AUTH)

    def _refused(self, code: int, reason: str) -> NoReturn:
        self.state = State.FAILED
        try:
            rc = ResponseCode(code)
        except ValueError:
            rc = ResponseCode.UNKNOWN
        # A refused proof or identity travels as UNEXPECTED_MEMBER (DLedger has no authentication code): the
        # reason says what failed, and the code's name would only mislead ("wrong secret" is no member).
        what = "" if rc == CODE_BAD_AUTH else f" ({rc.name})"
        by = f" by node {self.peer_id!r}" if self.peer_id is not None else ""
        raise HandshakeError(f"handshake refused{by}{what}: {reason}", rc)
