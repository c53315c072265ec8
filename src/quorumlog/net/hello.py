"""The HELLO handshake as two pure state machines (no I/O): bodies in, bodies out.

    client                                   server
    HELLO(version, cluster, node_id[, groups])   ->
                                       <-    HELLO response(code, reason, version, server id, nonce, auth_required)
    AUTH(HMAC-SHA256(secret, nonce || cluster || node_id))   ->      (only when auth_required)
                                       <-    AUTH response(code, reason)

A refusal (wrong version, cluster or proof, or any other operation first) is a response with a
non-SUCCESS code and a reason, after which the server closes the connection. The HELLO bodies keep
this layout in every protocol version, so peers of different versions can always tell each other why.

A node connecting to a peer adds `groups`, {group: members_digest} for each group it hosts; the server
refuses (METADATA_ERROR) when a group both host has another digest on its side: two nodes with
different member lists count different majorities and must never talk Raft. Clients send no groups.

The proof's key is the cluster's shared secret, which peers and clients with every permission know, or
a client token's own secret: such a client names itself "client:<token>" and gets that token's
permissions per group ("read", "append", "admin"; "*" for every group), which the node enforces.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum

from ..errors import ResponseCode
from .bodies import unpack
from .errors import HandshakeError, ProtocolError
from .frames import PROTOCOL_VERSION, SUPPORTED_VERSIONS
from .ops import Op, op_name
from .schemas import AUTH_REQUEST, AUTH_RESPONSE, HELLO_PEER_REQUEST, HELLO_REQUEST, HELLO_RESPONSE

NONCE_BYTES = 32
CLIENT_ID = "client"
TOKEN_PREFIX = "client:"  # a client authenticating with a named token: "client:<name>"
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


def proof(secret: str | bytes, nonce: bytes, cluster: str, node_id: str) -> bytes:
    """HMAC-SHA256(secret, nonce || cluster || node_id); the nonce has a fixed length."""
    key = _key(secret)
    if key is None:
        raise ValueError("empty secret")
    return hmac.new(key, nonce + cluster.encode() + node_id.encode(), hashlib.sha256).digest()


def decode_hello(body: bytes | bytearray | memoryview) -> tuple[int, str, str, dict[str, str] | None]:
    """(version, cluster, node_id, groups) of a HELLO request in either layout; groups is None for a client."""
    values = unpack(body)
    if isinstance(values, tuple) and len(values) == len(HELLO_PEER_REQUEST.fields):
        r = HELLO_PEER_REQUEST.validate(values)
        return r.version, r.cluster, r.node_id, dict(r.groups)
    r = HELLO_REQUEST.validate(values)
    return r.version, r.cluster, r.node_id, None


def members_mismatch(peer: str, theirs: Mapping[str, str], me: str, ours: Mapping[str, str]) -> str | None:
    """The refusal reason when a group both nodes host has different member digests, else None."""
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
    is chosen (the client proposes its highest). `groups` ({group: members digest}) are compared with a
    connecting peer's, once it has proved itself. `nonce` makes tests deterministic.
    """

    def __init__(self, cluster: str, node_id: str, secret: str | bytes | None = None, *,
                 versions: frozenset[int] = SUPPORTED_VERSIONS, groups: Mapping[str, str] | None = None,
                 nonce: Callable[[], bytes] = lambda: os.urandom(NONCE_BYTES),
                 tokens: Mapping[str, tuple[str | bytes, Permissions]] | None = None) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self._key = _key(secret)
        self._tokens = {name: (_key(sec), perms) for name, (sec, perms) in (tokens or {}).items()}
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

    def _refuse_hello(self, code: ResponseCode, reason: str) -> Reply:
        body = HELLO_RESPONSE.encode(int(code), reason, self.version or PROTOCOL_VERSION, self.node_id, b"",
                                     False)
        return self._fail(Op.HELLO, body, reason)

    def _refuse(self, op: Op, code: ResponseCode, reason: str) -> Reply:
        return self._fail(op, AUTH_RESPONSE.encode(int(code), reason), reason)

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
        if not usable:
            return self._refuse_hello(
                CODE_BAD_VERSION, f"protocol version {version} unsupported; this node speaks "
                f"{min(self._versions)}..{max(self._versions)}")
        self.version = max(usable)
        if cluster != self.cluster:
            return self._refuse_hello(
                CODE_BAD_CLUSTER, f"wrong cluster {cluster!r}: this node is in {self.cluster!r}")
        if not node_id:
            return self._refuse_hello(CODE_BAD_AUTH, "empty node id")
        if self.identity is not None and node_id != self.identity:
            return self._refuse_hello(CODE_BAD_AUTH, f"HELLO names {node_id!r} but the TLS certificate names "
                                                     f"{self.identity!r}")
        if self._key is None and not self._tokens:
            reason = self._members_reason()
            if reason is not None:
                return self._refuse_hello(CODE_BAD_MEMBERS, reason)
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
        assert self.peer_id is not None
        key, permissions = self._key, None
        if self.peer_id.startswith(TOKEN_PREFIX) and self.peer_groups is None:
            key, permissions = self._tokens.get(self.peer_id[len(TOKEN_PREFIX):], (None, None))
        # An unknown token fails as a wrong secret does: the refusal does not tell which tokens exist.
        if key is None or not hmac.compare_digest(proof(key, self._nonce, self.cluster, self.peer_id), auth.proof):
            what = "token" if self.peer_id.startswith(TOKEN_PREFIX) else "shared secret"
            return self._refuse(Op.AUTH, CODE_BAD_AUTH, f"authentication failed: wrong {what}")
        self.permissions = permissions
        # Compared only now: an unauthenticated stranger learns nothing of this node's groups.
        reason = self._members_reason()
        if reason is not None:
            return self._refuse(Op.AUTH, CODE_BAD_MEMBERS, reason)
        self.state = State.ESTABLISHED
        return Reply(Op.AUTH, AUTH_RESPONSE.encode(int(ResponseCode.SUCCESS), ""))


class ClientHandshake:
    """Client side: start() gives the HELLO body; feed each response to receive() until established.

    receive() returns the next (op, body) to send, or None once the connection is established;
    it raises HandshakeError (carrying the server's code and reason) on a refusal. A node connecting to
    a peer passes `groups`, {group: members digest} of every group it hosts; a client passes none.
    """

    def __init__(self, cluster: str, node_id: str = CLIENT_ID, secret: str | bytes | None = None, *,
                 version: int = PROTOCOL_VERSION, groups: Mapping[str, str] | None = None) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self._key = _key(secret)
        self.groups = None if groups is None else dict(groups)
        self.proposed_version = version
        self.state = State.AWAIT_HELLO
        self.version: int | None = None
        self.peer_id: str | None = None

    def start(self) -> tuple[Op, bytes]:
        """The HELLO request."""
        if self.groups is None:
            return Op.HELLO, HELLO_REQUEST.encode(self.proposed_version, self.cluster, self.node_id)
        return Op.HELLO, HELLO_PEER_REQUEST.encode(self.proposed_version, self.cluster, self.node_id, self.groups)

    def receive(self, op: int, body: bytes | bytearray | memoryview) -> tuple[Op, bytes] | None:
        """Process the response to the last request sent."""
        if self.state is State.AWAIT_HELLO and op == Op.HELLO:
            r = HELLO_RESPONSE.decode(body)
            if r.code != ResponseCode.SUCCESS:
                self._refused(r.code, r.reason)
            if r.version > self.proposed_version:
                self.state = State.FAILED
                raise ProtocolError(f"server chose version {r.version}, above the proposed "
                                    f"{self.proposed_version}")
            self.version = r.version
            self.peer_id = r.node_id
            if not r.auth_required:
                self.state = State.ESTABLISHED
                return None
            if self._key is None:
                self.state = State.FAILED
                raise HandshakeError(f"node {r.node_id!r} requires a shared secret and none is configured",
                                     CODE_BAD_AUTH)
            if len(r.nonce) != NONCE_BYTES:
                self.state = State.FAILED
                raise ProtocolError(f"HELLO nonce of {len(r.nonce)} bytes, expected {NONCE_BYTES}")
            self.state = State.AWAIT_AUTH
            return Op.AUTH, AUTH_REQUEST.encode(proof(self._key, r.nonce, self.cluster, self.node_id))
        if self.state is State.AWAIT_AUTH and op == Op.AUTH:
            a = AUTH_RESPONSE.decode(body)
            if a.code != ResponseCode.SUCCESS:
                self._refused(a.code, a.reason)
            self.state = State.ESTABLISHED
            return None
        state = self.state
        self.state = State.FAILED
        raise ProtocolError(f"unexpected {op_name(op)} response in handshake state {state.value}")

    def _refused(self, code: int, reason: str) -> None:
        self.state = State.FAILED
        try:
            rc = ResponseCode(code)
        except ValueError:
            rc = ResponseCode.UNKNOWN
        raise HandshakeError(f"handshake refused ({rc.name}): {reason}", rc)
