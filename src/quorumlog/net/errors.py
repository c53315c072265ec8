"""Errors of the wire layer: a malformed peer, a closed connection, a timed-out request."""

from __future__ import annotations

from ..errors import QuorumLogError, ResponseCode


class ProtocolError(QuorumLogError):
    """The peer sent bytes that are not a valid frame or body; the connection must close.

    `reason` is a one-line description fit for a log line and a GOODBYE frame.
    """

    code = ResponseCode.UNEXPECTED_ARGUMENT

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class FieldTypeError(ProtocolError, TypeError):
    """A body field of the wrong type. From the network, a protocol error; from a caller's argument (a
    str body, say), also the TypeError Python code expects."""


class FieldValueError(ProtocolError, ValueError):
    """A body field of the right type outside its range (a negative index, a string too long): also a
    ValueError to the caller who passed it."""


class ConnectionClosedError(QuorumLogError):
    """The connection closed (or never opened) before the request was answered."""

    code = ResponseCode.NETWORK_ERROR


class MalformedAnswerError(ConnectionClosedError):
    """A server we dialled answered its handshake with bytes that are no frame (a wrong address): the
    connection closed on it."""


class RequestTimeoutError(QuorumLogError):
    """No response arrived within the request's timeout."""

    code = ResponseCode.TIMEOUT


class HandshakeError(QuorumLogError):
    """The HELLO exchange failed: wrong version, cluster or secret. Retrying will not help."""


class SecretRequiredError(HandshakeError):
    """The node requires a shared secret (or a token's) and this side has none."""


class NotANodeError(HandshakeError):
    """The address answers, but not as a quorumlog node would: an HTTP server (a node's admin port, say).
    Retrying will not help: the address is wrong."""


class UnverifiedPeerError(HandshakeError):
    """The other end of a connection we opened is not the node it should be: it names another id than
    the one dialled, does not authenticate although we hold a secret, or did not prove the key. An
    impostor, a relay or a wrong address: nothing was sent after HELLO, and other nodes may do."""


class ResponseError(QuorumLogError):
    """The peer answered with a code other than SUCCESS; `leader` is its leader hint, if any."""

    def __init__(self, code: ResponseCode | int, reason: str = "", leader: str | None = None,
                 detail: int | None = None) -> None:
        try:
            rc = ResponseCode(code)
        except ValueError:
            rc = ResponseCode.UNKNOWN
        super().__init__(f"{rc.name}: {reason}" if reason else rc.name, rc)
        self.reason = reason
        self.leader = leader
        self.detail = detail
