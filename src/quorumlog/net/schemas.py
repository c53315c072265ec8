"""The body table: which schema each (operation, kind) uses. docs/protocol.md mirrors this file.

Raft peer operations (VOTE, HEART_BEAT, PULL, PUSH) and HA frames register their schemas with
`register()` from the modules that define those messages.
"""

from __future__ import annotations

from typing import Any

from .bodies import (
    ANY,
    BOOL,
    BYTES,
    I64_MAX,
    INDEX,
    INT,
    OPT_STR,
    STR,
    U16,
    U32,
    FieldType,
    Int,
    List,
    Map,
    Schema,
    Str,
)
from .frames import Kind
from .ops import Op

REQUESTS: dict[int, Schema] = {}
RESPONSES: dict[int, Schema] = {}
ONEWAYS: dict[int, Schema] = {}
_TABLES = {Kind.REQUEST: REQUESTS, Kind.RESPONSE: RESPONSES, Kind.ONEWAY: ONEWAYS}


def register(op: Op | int, kind: Kind, schema: Schema, *, replace: bool = False) -> Schema:
    """Add the schema of one (operation, kind); ValueError if one is there already (unless replace)."""
    table = _TABLES[kind]
    if op in table and not replace:
        raise ValueError(f"{Op(op).name} {kind.name} already has schema {table[op]!r}")
    table[op] = schema
    return schema


def _req(op: Op, *fields: tuple[str, FieldType], defaults: tuple[Any, ...] = ()) -> Schema:
    name = f"{op.name.title().replace('_', '')}Request"
    return register(op, Kind.REQUEST, Schema(name, fields, defaults=defaults))


def _resp(op: Op, *fields: tuple[str, FieldType], generic_errors: bool = True) -> Schema:
    name = f"{op.name.title().replace('_', '')}Response"
    return register(op, Kind.RESPONSE, Schema(name, (("code", INT), *fields), generic_errors=generic_errors))


NODE_ID = Str(255)
GROUP = Str(255)
TERM = Int(0, I64_MAX, "term")

# --- connection -------------------------------------------------------------------------------------
HELLO_REQUEST = _req(Op.HELLO, ("version", U16), ("cluster", Str(255)), ("node_id", NODE_ID))
# A node connecting to a peer appends {group: members_digest} for every group it hosts; clients send
# the three fields above (an accepting node takes either layout).
HELLO_PEER_REQUEST = Schema("HelloRequest", (*HELLO_REQUEST.fields, ("groups", Map(Str(64)))))
# Always this layout, whatever the code, so the client can show the reason of a refusal.
HELLO_RESPONSE = _resp(Op.HELLO, ("reason", STR), ("version", U16), ("node_id", NODE_ID), ("nonce", BYTES),
                       ("auth_required", BOOL), generic_errors=False)
# Version 2 (hello.py): the dialler's nonce and proof; the responder's proof (empty in a refusal).
AUTH_REQUEST = _req(Op.AUTH, ("nonce", BYTES), ("proof", BYTES))
AUTH_RESPONSE = _resp(Op.AUTH, ("reason", STR), ("proof", BYTES), generic_errors=False)
GOODBYE = register(Op.GOODBYE, Kind.ONEWAY, Schema("Goodbye", [("code", INT), ("reason", STR)]))

# --- client operations ------------------------------------------------------------------------------
METADATA_REQUEST = _req(Op.METADATA, ("group", GROUP))
METADATA_RESPONSE = _resp(Op.METADATA, ("group", GROUP), ("leader", OPT_STR), ("term", INT),
                          ("peers", Map(STR)))
APPEND_REQUEST = _req(Op.APPEND, ("group", GROUP), ("body", BYTES))
APPEND_RESPONSE = _resp(Op.APPEND, ("index", INDEX), ("term", INT), ("pos", INT))
APPEND_BATCH_REQUEST = _req(Op.APPEND_BATCH, ("group", GROUP), ("bodies", List(BYTES)))
APPEND_BATCH_RESPONSE = _resp(Op.APPEND_BATCH, ("first_index", INDEX), ("term", INT),
                              ("positions", List(INT)))
# The same requests with the idempotent producer and the conditional append after the bodies (a node
# takes either layout): producer 0 and seq -1 for none, expected_end -2 for none.
_PRODUCER_FIELDS: tuple[tuple[str, FieldType], ...] = (
    ("producer", Int(0, I64_MAX, "producer")), ("seq", Int(-1, I64_MAX, "seq")),
    ("expected_end", Int(-2, I64_MAX, "expected_end")))
APPEND_PRODUCER_REQUEST = Schema("AppendRequest", (*APPEND_REQUEST.fields, *_PRODUCER_FIELDS))
APPEND_BATCH_PRODUCER_REQUEST = Schema("AppendBatchRequest", (*APPEND_BATCH_REQUEST.fields, *_PRODUCER_FIELDS))
# READ, GET and TAIL end with `min_index` (protocol version 3; a version-2 client's body ends before it, and
# decodes with -1): a node that has not committed that far waits for its commit index to reach it, a bound
# (server/waits.py), then answers FALL_BEHIND_TOO_MUCH naming the leader; never with less.
MIN_INDEX: tuple[str, FieldType] = ("min_index", INDEX)
NO_MIN_INDEX = -1
GET_REQUEST = _req(Op.GET, ("group", GROUP), ("index", INDEX), MIN_INDEX, defaults=(NO_MIN_INDEX,))
GET_RESPONSE = _resp(Op.GET, ("entry", BYTES))  # one encoded entry: 48-byte header + body
READ_REQUEST = _req(Op.READ, ("group", GROUP), ("from_index", INDEX), ("max_entries", U32),
                    ("max_bytes", U32), ("include_control", BOOL), MIN_INDEX, defaults=(NO_MIN_INDEX,))
# entries: encoded entries back to back; next_index: where the next READ should start.
READ_RESPONSE = _resp(Op.READ, ("entries", BYTES), ("next_index", INDEX), ("committed_index", INDEX))
TAIL_REQUEST = _req(Op.TAIL, ("group", GROUP), ("from_index", INDEX), ("include_control", BOOL), MIN_INDEX,
                    defaults=(NO_MIN_INDEX,))
TAIL_RESPONSE = _resp(Op.TAIL, ("committed_index", INDEX))
TAIL_PUSH = register(Op.TAIL, Kind.ONEWAY, Schema("TailPush", [("entries", BYTES), ("next_index", INDEX),
                                                               ("committed_index", INDEX)]))
UNTAIL_REQUEST = _req(Op.UNTAIL, ("subscription", INT))  # the request id of the TAIL request
UNTAIL_RESPONSE = _resp(Op.UNTAIL)
STATUS_REQUEST = _req(Op.STATUS, ("group", OPT_STR))
STATUS_RESPONSE = _resp(Op.STATUS, ("status", Map(ANY)))
LEADERSHIP_TRANSFER_REQUEST = _req(Op.LEADERSHIP_TRANSFER, ("group", GROUP), ("target", NODE_ID))
LEADERSHIP_TRANSFER_RESPONSE = _resp(Op.LEADERSHIP_TRANSFER, ("leader", OPT_STR), ("term", INT))
# Make `target` the primary of a primary/backup group in epoch `epoch` (through the controller, when
# the group has one: the epoch is then the controller's next).
PROMOTE_REQUEST = _req(Op.PROMOTE, ("group", GROUP), ("target", NODE_ID), ("epoch", Int(0, I64_MAX, "epoch")),
                       ("force", BOOL))
PROMOTE_RESPONSE = _resp(Op.PROMOTE, ("primary", OPT_STR), ("epoch", INT))
# Change a Raft group's members, answered once the change committed with its CONFIG entry's index and the
# configuration it holds. `action`: "add" (a learner), "promote", "remove" or "set-address".
MEMBER_ACTIONS = ("add", "promote", "remove", "set-address")
CHANGE_MEMBERS_REQUEST = _req(Op.CHANGE_MEMBERS, ("group", GROUP), ("action", Str(16)), ("target", NODE_ID),
                              ("address", OPT_STR))
CHANGE_MEMBERS_RESPONSE = _resp(Op.CHANGE_MEMBERS, ("index", INT), ("voters", List(NODE_ID)),
                                ("learners", List(NODE_ID)), ("addresses", Map(STR)))
# The group's end, its committed index and the term (a primary/backup group's epoch) as this node answers:
# "linearizable" (no end older than the request: a ReadIndex, or a primary's controller record) or "local"
# (this replica's own, at once). Any other consistency is refused UNEXPECTED_ARGUMENT (server/ends.py).
CONSISTENCIES = ("linearizable", "local")
END_REQUEST = _req(Op.END, ("group", GROUP), ("consistency", Str(32)))
END_RESPONSE = _resp(Op.END, ("end_index", INDEX), ("committed", INDEX), ("term", TERM))

# --- Raft peer messages -----------------------------------------------------------------------------
# Peers exchange the Raft core's messages as ONEWAY frames (the core is asynchronous: an answer may
# leave long after its request, e.g. a push ack held until fdatasync). The frame's request_id says
# which message of the op's pair the body holds: PEER_REQUEST (0) or PEER_RESPONSE (1).
# Field order is the message dataclasses' order (src/quorumlog/raft/messages.py).
PEER_REQUEST = 0
PEER_RESPONSE = 1
ROUND = Int(0, I64_MAX, "round")  # a heartbeat's ReadIndex round (raft/reads.py)
CTX = Int(0, I64_MAX, "ctx")  # a follower's read-index request, echoed
ACKED = Int(-2, I64_MAX, "acked")  # -2: nothing acknowledged
_PEER_HEAD: tuple[tuple[str, FieldType], ...] = (("group", GROUP), ("sender", NODE_ID), ("target", NODE_ID),
                                                  ("term", TERM))
PEER_MESSAGES: dict[tuple[int, int], Schema] = {
    (Op.VOTE, PEER_REQUEST): Schema("VoteRequest", (*_PEER_HEAD, ("last_index", INDEX), ("last_term", TERM),
                                                   ("pre_vote", BOOL), ("transfer", BOOL))),
    (Op.VOTE, PEER_RESPONSE): Schema("VoteResponse", (*_PEER_HEAD, ("granted", BOOL), ("pre_vote", BOOL),
                                                     ("code", INT))),
    (Op.HEART_BEAT, PEER_REQUEST): Schema("HeartbeatRequest", (*_PEER_HEAD, ("commit_index", INDEX),
                                                              ("last_index", INDEX), ("round", ROUND),
                                                              ("quiet", Int(0, 2, "quiet")))),
    (Op.HEART_BEAT, PEER_RESPONSE): Schema("HeartbeatResponse", (*_PEER_HEAD, ("code", INT),
                                                                ("end_index", INDEX), ("round", ROUND))),
    (Op.PUSH, PEER_REQUEST): Schema("PushRequest", (*_PEER_HEAD, ("kind", Int(0, 4, "push kind")),
                                                   ("index", INDEX), ("prev_term", TERM),
                                                   ("commit_index", INDEX), ("count", U32), ("last_term", TERM),
                                                   ("data", BYTES))),
    (Op.PUSH, PEER_RESPONSE): Schema("PushResponse", (*_PEER_HEAD, ("kind", Int(0, 4, "push kind")),
                                                     ("code", INT), ("index", INDEX), ("acked", ACKED),
                                                     ("end_index", INDEX), ("begin_index", INDEX),
                                                     ("conflict_index", INDEX), ("conflict_term", TERM))),
    (Op.LEADERSHIP_TRANSFER, PEER_REQUEST): Schema("TimeoutNow", _PEER_HEAD),
    (Op.READ_INDEX, PEER_REQUEST): Schema("ReadIndexRequest", (*_PEER_HEAD, ("ctx", CTX))),
    (Op.READ_INDEX, PEER_RESPONSE): Schema("ReadIndexResponse", (*_PEER_HEAD, ("ctx", CTX), ("code", INT),
                                                                ("index", INDEX))),
    (Op.PROBE, PEER_REQUEST): Schema("ProbeRequest", (*_PEER_HEAD, ("nonce", Int(0, I64_MAX, "nonce")))),
    (Op.PROBE, PEER_RESPONSE): Schema("ProbeResponse", (*_PEER_HEAD, ("nonce", Int(0, I64_MAX, "nonce")),
                                                       ("end_index", INDEX), ("begin_index", INDEX))),
    # Primary/backup (src/quorumlog/ha/messages.py): the head also names the epoch's primary.
    (Op.HA_REPORT, PEER_REQUEST): Schema("HaReport", (*_PEER_HEAD, ("primary", OPT_STR),
                                                     ("offset", Int(-1, I64_MAX, "offset")),
                                                     ("recovering", BOOL))),
    (Op.HA_REPORT, PEER_RESPONSE): Schema("HaHandshake", (*_PEER_HEAD, ("primary", OPT_STR),
                                                         ("begin_index", INDEX), ("end_index", INDEX),
                                                         ("epochs", BYTES))),
    (Op.HA_TRANSFER, PEER_REQUEST): Schema("HaTransfer", (*_PEER_HEAD, ("primary", OPT_STR),
                                                         ("committed", INDEX), ("start", INDEX),
                                                         ("frame", BYTES))),
    (Op.HA_TRANSFER, PEER_RESPONSE): Schema("HaTruncate", (*_PEER_HEAD, ("primary", OPT_STR),
                                                          ("keep_index", Int(-2, I64_MAX, "keep_index")),
                                                          ("begin_index", INDEX), ("begin_pos", INDEX),
                                                          ("begin_chain", Int(0, (1 << 32) - 1, "chain")),
                                                          ("begin_term", TERM),
                                                          ("answers", Int(0, I64_MAX, "digest")))),
    # A controller command for the controller group's leader (ha/controller_core.py): only its members send it.
    (Op.CONTROLLER_PROPOSE, PEER_REQUEST): Schema("ControllerProposal", (("group", GROUP), ("sender", NODE_ID),
                                                                        ("target", NODE_ID), ("body", BYTES))),
}
