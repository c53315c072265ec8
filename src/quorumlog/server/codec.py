"""Raft and primary/backup messages ⇄ one-way frames between peers.

Every Raft message travels as a ONEWAY frame: the core's messages are asynchronous (a held push ack
leaves long after its request arrived), so there is no request/response pairing at the frame level.
The frame's op names the message family (VOTE, HEART_BEAT, PUSH; TimeoutNow uses LEADERSHIP_TRANSFER)
and its request_id field the direction: 0 for the request message, 1 for the response message.
Bodies are validated field by field (schemas in net/schemas.py, PEER_MESSAGES); anything malformed
raises ProtocolError, which closes only the connection that sent it.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

from ..ha.controller_core import ControllerProposal
from ..ha.messages import HaHandshake, HaMessage, HaReport, HaTransfer, HaTruncate
from ..net.bodies import unpack
from ..net.errors import ProtocolError
from ..net.frames import ONEWAY, Body, Frame
from ..net.ops import Op, op_name
from ..net.schemas import PEER_MESSAGES, PEER_REQUEST, PEER_RESPONSE
from ..raft.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    Message,
    ProbeRequest,
    ProbeResponse,
    PushRequest,
    PushResponse,
    ReadIndexRequest,
    ReadIndexResponse,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)

# message class -> (op, direction)
_ROUTES: dict[type, tuple[Op, int]] = {
    VoteRequest: (Op.VOTE, PEER_REQUEST),
    VoteResponse: (Op.VOTE, PEER_RESPONSE),
    HeartbeatRequest: (Op.HEART_BEAT, PEER_REQUEST),
    HeartbeatResponse: (Op.HEART_BEAT, PEER_RESPONSE),
    PushRequest: (Op.PUSH, PEER_REQUEST),
    PushResponse: (Op.PUSH, PEER_RESPONSE),
    TimeoutNow: (Op.LEADERSHIP_TRANSFER, PEER_REQUEST),
    ProbeRequest: (Op.PROBE, PEER_REQUEST),
    ReadIndexRequest: (Op.READ_INDEX, PEER_REQUEST),
    ReadIndexResponse: (Op.READ_INDEX, PEER_RESPONSE),
    ProbeResponse: (Op.PROBE, PEER_RESPONSE),
    HaReport: (Op.HA_REPORT, PEER_REQUEST),
    HaHandshake: (Op.HA_REPORT, PEER_RESPONSE),
    HaTransfer: (Op.HA_TRANSFER, PEER_REQUEST),
    HaTruncate: (Op.HA_TRANSFER, PEER_RESPONSE),
    ControllerProposal: (Op.CONTROLLER_PROPOSE, PEER_REQUEST),
}
_CLASSES: dict[tuple[int, int], type] = {route: cls for cls, route in _ROUTES.items()}
PEER_OPS = frozenset(int(op) for op, _ in _ROUTES.values())

# Field getters per class, in the schema's order; a message class and its schema must list the same
# fields (checked here, at import, so a field added to the core cannot silently go missing on the wire).
_GETTERS: dict[type, Any] = {}
for _cls, _route in _ROUTES.items():
    _names = tuple(n for n, _ in PEER_MESSAGES[_route].fields)
    if _names != tuple(f.name for f in dataclasses.fields(_cls)):
        raise ImportError(f"{_cls.__name__} fields differ from its wire schema {_names}")
    _GETTERS[_cls] = operator.attrgetter(*_names)


PeerMessage = Message | HaMessage | ControllerProposal
HA_MESSAGES = (HaHandshake, HaReport, HaTransfer, HaTruncate)


def encode_message(m: PeerMessage) -> tuple[int, int, Body]:
    """(op, request_id, body) of the one-way frame carrying `m`."""
    op, direction = _ROUTES[type(m)]
    schema = PEER_MESSAGES[(op, direction)]
    return int(op), direction, schema.encode_body(*_GETTERS[type(m)](m))


def is_peer_frame(f: Frame) -> bool:
    """Is this frame a Raft peer message (a one-way frame of a peer op)?"""
    return f.kind == ONEWAY and f.op in PEER_OPS


def decode_message(f: Frame) -> PeerMessage:
    """The Raft message a one-way peer frame carries; ProtocolError when it is malformed."""
    key = (f.op, f.request_id)
    cls = _CLASSES.get(key)
    if cls is None:
        raise ProtocolError(f"one-way {op_name(f.op)} frame with unknown direction {f.request_id}")
    values = unpack(f.body)
    PEER_MESSAGES[key].check(values)
    msg: PeerMessage = cls(*values)
    return msg
