"""Operation numbers: the u8 `op` field of a frame, and the DLedger request code each one stands for.

The frame header has one byte for the operation (docs/design.md §6), so every operation gets a compact number
here; DLedger's request codes (50000, 51001, ...) do not fit a byte and are kept as documented metadata
in DLEDGER_CODES, for logs and for readers who know DLedger. docs/protocol.md lists both.
"""

from __future__ import annotations

from enum import IntEnum


class Op(IntEnum):
    """Operation numbers (u8). Ranges: 1-9 connection, 10-29 client, 30-39 Raft peers, 40-49 HA."""

    # Connection management.
    HELLO = 1  # request: version, cluster, node id -> nonce
    AUTH = 2  # request: HMAC proof over the nonce
    GOODBYE = 3  # one-way: code and reason, sent just before a side closes the connection
    # Client operations.
    METADATA = 10
    APPEND = 11
    APPEND_BATCH = 12
    GET = 13
    READ = 14
    TAIL = 15  # request subscribes; the server then sends one-way TAIL frames with the same request id
    UNTAIL = 16
    STATUS = 17
    LEADERSHIP_TRANSFER = 18
    PROMOTE = 19  # primary/backup: make a backup the primary (RocketMQ's manual switch)
    CHANGE_MEMBERS = 20  # Raft: add a learner, promote it, remove a member or move one (raft/membership.py)
    END = 21  # the group's end, committed index and term, linearizable or local (server/ends.py)
    # Raft, between peers.
    VOTE = 30
    HEART_BEAT = 31
    PULL = 32
    PUSH = 33
    PROBE = 34  # a node with a pristine store asks whether the group already has a log
    READ_INDEX = 35  # a follower asks its leader for a linearizable read point (raft/reads.py)
    NODE_PING = 36  # one-way, no body: this node is alive (raft/quiesce.py: quiet groups send no heartbeats)
    # Primary/backup (HA) frames, between a primary and its backups.
    HA_REPORT = 40  # backup -> primary: its max offset (direction 0), or its handshake (1)
    HA_TRANSFER = 41  # primary -> backup: offset, size and raw log bytes or a heartbeat (0), or a cut (1)
    CONTROLLER_PROPOSE = 42  # a controller command, to the node taken for the controller group's leader


VALID_OPS: frozenset[int] = frozenset(int(o) for o in Op)

# DLedger's request codes (DLedgerRequestCode) for the operations it has.
DLEDGER_CODES: dict[Op, int] = {
    Op.METADATA: 50000,
    Op.APPEND: 50001,
    Op.APPEND_BATCH: 50001,  # DLedger appends a batch through the same APPEND code
    Op.GET: 50002,
    Op.VOTE: 51001,
    Op.HEART_BEAT: 51002,
    Op.PULL: 51003,
    Op.PUSH: 51004,
    Op.LEADERSHIP_TRANSFER: 51005,
}


def op_name(op: int) -> str:
    """A readable name for an op number, also for unknown ones (logs)."""
    try:
        return Op(op).name
    except ValueError:
        return f"op#{op}"


def from_dledger_code(code: int) -> Op:
    """The operation for a DLedger request code (APPEND maps to the single APPEND); KeyError if none."""
    for op, c in DLEDGER_CODES.items():
        if c == code:
            return op
    raise KeyError(code)
