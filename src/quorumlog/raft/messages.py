"""Messages between Raft nodes: frozen, slotted dataclasses with primitive fields only.

They are independent of any wire encoding: the network layer maps each to a msgpack array. Entries travel
as the encoded bytes a leader's store returns from `read_raw`, written by the follower with
`append_encoded`. Every message names its group, sender and target so a node hosting several groups (or a
misrouted frame) can be checked before anything else happens.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass


class PushKind:
    """PushRequest types, DLedger's PushEntryRequest.Type. Plain ints so the wire layer needs no mapping."""

    APPEND = 0
    COMMIT = 1
    COMPARE = 2
    TRUNCATE = 3
    RESET = 4  # quorumlog's own: the follower's log restarts at the leader's begin (no snapshots)

    NAMES = ("APPEND", "COMMIT", "COMPARE", "TRUNCATE", "RESET")


@dataclass(frozen=True, slots=True)
class VoteRequest:
    """A (pre-)vote request. `term` is the term the candidate would take (its term + 1 for a pre-vote).

    `transfer` marks a campaign started by a leadership transfer: voters then ignore their leader lease.
    """

    group: str
    sender: str
    target: str
    term: int
    last_index: int
    last_term: int
    pre_vote: bool = False
    transfer: bool = False


@dataclass(frozen=True, slots=True)
class VoteResponse:
    """Answer to a VoteRequest; a granted pre-vote carries the request's term, a refusal the voter's own."""

    group: str
    sender: str
    target: str
    term: int
    granted: bool
    pre_vote: bool
    code: int


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """Leader liveness, sent every heartbeat interval; carries the leader's commit and end index (a node
    recovering lost entries must commit up to that end before it votes again)."""

    group: str
    sender: str
    target: str
    term: int
    commit_index: int
    last_index: int = -1
    round: int = 0  # ReadIndex (reads.py): the follower echoes it, confirming the leader at this round
    # 1: the group goes quiet, stop the election timer while this node lives; 2: it is no longer quiet, this
    # node stopped leading: run it again (quiesce.py). A heartbeat of 2 asserts nothing else.
    quiet: int = 0


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    """`end_index` is the follower's ledger end, so an idle leader notices a follower that lost entries it
    acknowledged (a wiped data directory) and repairs it without waiting for the next append."""

    group: str
    sender: str
    target: str
    term: int
    code: int
    end_index: int = -1
    round: int = 0  # the request's round, echoed


@dataclass(frozen=True, slots=True)
class ReadIndexRequest:
    """A follower asks its leader for a read index (reads.py) for the requests it holds under `ctx`."""

    group: str
    sender: str
    target: str
    term: int
    ctx: int


@dataclass(frozen=True, slots=True)
class ReadIndexResponse:
    """The leader's answer: `index` once a majority confirmed it leads (code SUCCESS), else a refusal."""

    group: str
    sender: str
    target: str
    term: int
    ctx: int
    code: int
    index: int


@dataclass(frozen=True, slots=True)
class PushRequest:
    """One EntryDispatcher request (DLedger's PushEntryRequest).

    - APPEND: `count` entries starting at `index`, encoded in `data`; `prev_term` is the leader's term at
      index - 1 and `last_term` the term of the last entry.
    - COMPARE: does the follower hold `index` with term `prev_term`?
    - TRUNCATE: drop everything after `index` (whose term is `prev_term`).
    - COMMIT: the leader's commit index, for an idle follower (sent at the leader's next tick).
    - RESET: the follower needs entries below the leader's first one: drop everything and start the log
      at `index` (the leader's begin index), `prev_term` being the term of entry index - 1 and `data`
      the begin position (i64) and the chain CRC before it (u32), packed as RESET_DATA.
    `commit_index` is always the leader's commit; the follower applies only the part it knows matches.
    """

    group: str
    sender: str
    target: str
    term: int
    kind: int
    index: int
    prev_term: int
    commit_index: int
    count: int = 0
    last_term: int = 0
    data: bytes | memoryview = b""  # a leader's view of a batch it encoded; bytes off the wire


@dataclass(frozen=True, slots=True)
class PushResponse:
    """Answer to a PushRequest. `index` echoes the request's index so the leader can match it.

    `acked` is the highest index the follower holds durably and knows to match the leader (-2 when the
    response acknowledges nothing). `end_index` is the follower's ledger end; on INCONSISTENT_TERM,
    `conflict_term` is the follower's term at the compared index and `conflict_index` the first index the
    follower holds with that term, so the leader skips a whole term per round trip.
    """

    group: str
    sender: str
    target: str
    term: int
    kind: int
    code: int
    index: int
    acked: int
    end_index: int
    begin_index: int = 0
    conflict_index: int = -1
    conflict_term: int = 0


@dataclass(frozen=True, slots=True)
class ProbeRequest:
    """Sent by a node whose store is pristine (new, or wiped) before it may vote: has this group ever
    had a log? `nonce` is drawn once per process start, so only answers given after it count."""

    group: str
    sender: str
    target: str
    term: int
    nonce: int


@dataclass(frozen=True, slots=True)
class ProbeResponse:
    """A member's term and log extent, echoing the probe's nonce."""

    group: str
    sender: str
    target: str
    term: int
    nonce: int
    end_index: int
    begin_index: int


@dataclass(frozen=True, slots=True)
class TimeoutNow:
    """Leadership transfer: the leader tells a caught-up target to campaign at once (DLedger's
    LeadershipTransferRequest as forwarded to the transferee)."""

    group: str
    sender: str
    target: str
    term: int


Message = (VoteRequest | VoteResponse | HeartbeatRequest | HeartbeatResponse | PushRequest | PushResponse | TimeoutNow
           | ProbeRequest | ProbeResponse | ReadIndexRequest | ReadIndexResponse)

RESET_DATA = struct.Struct(">qI")  # PushRequest RESET: begin position, chain CRC before the begin index
# ... then, when the leader's log holds one below its begin, the configuration in force there: its CONFIG
# entry's index and term, and its body (membership.py).
RESET_BASE = struct.Struct(">qq")


def reset_data(begin_pos: int, begin_chain: int, base: tuple[int, int, bytes] | None) -> bytes:
    data = RESET_DATA.pack(begin_pos, begin_chain)
    return data if base is None else data + RESET_BASE.pack(base[0], base[1]) + base[2]


def parse_reset(data: bytes | memoryview) -> tuple[int, int, tuple[int, int, bytes] | None] | None:
    """(begin position, chain CRC, base configuration or None) of a RESET's data; None when malformed."""
    n = len(data)
    if n == RESET_DATA.size:
        pos, chain = RESET_DATA.unpack(data)
        return pos, chain, None
    if n < RESET_DATA.size + RESET_BASE.size:
        return None
    pos, chain = RESET_DATA.unpack_from(data, 0)
    index, term = RESET_BASE.unpack_from(data, RESET_DATA.size)
    return pos, chain, (index, term, bytes(data[RESET_DATA.size + RESET_BASE.size:]))

NO_ACK = -2  # PushResponse.acked when nothing is acknowledged (-1 is a real value: the empty prefix)


def refusal(msg: Message, me: str, term: int, code: int, end_index: int, begin_index: int) -> Message | None:
    """The refusing answer to a request, or None for a message that gets no answer."""
    if isinstance(msg, PushRequest):
        return PushResponse(msg.group, me, msg.sender, term, msg.kind, code, msg.index, -2, end_index, begin_index)
    if isinstance(msg, HeartbeatRequest):
        return HeartbeatResponse(msg.group, me, msg.sender, term, code, -1, msg.round)
    if isinstance(msg, VoteRequest):
        return VoteResponse(msg.group, me, msg.sender, term, False, msg.pre_vote, code)
    return None


def describe(m: Message) -> str:
    """A one-line, human-readable form for traces (entry bytes are summarised, not printed)."""
    name = type(m).__name__
    head = f"{name} {m.sender}->{m.target} t{m.term}"
    if isinstance(m, PushRequest):
        kind = PushKind.NAMES[m.kind] if 0 <= m.kind < 5 else str(m.kind)
        extra = f" n={m.count} last_t{m.last_term}" if m.kind == PushKind.APPEND else ""
        return f"{head} {kind} i={m.index} prev_t{m.prev_term} commit={m.commit_index}{extra}"
    if isinstance(m, PushResponse):
        kind = PushKind.NAMES[m.kind] if 0 <= m.kind < 5 else str(m.kind)
        conflict = f" conflict=({m.conflict_index},t{m.conflict_term})" if m.conflict_index >= 0 else ""
        return f"{head} {kind} code={m.code} i={m.index} acked={m.acked} end={m.end_index}{conflict}"
    if isinstance(m, VoteRequest):
        pre = " pre" if m.pre_vote else ""
        tr = " transfer" if m.transfer else ""
        return f"{head}{pre}{tr} last=({m.last_index},t{m.last_term})"
    if isinstance(m, VoteResponse):
        return f"{head} {'pre ' if m.pre_vote else ''}granted={m.granted} code={m.code}"
    if isinstance(m, HeartbeatRequest):
        quiet = ("", " QUIESCE", " QUIET ENDED")[m.quiet]
        return f"{head} commit={m.commit_index} last={m.last_index} round={m.round}{quiet}"
    if isinstance(m, HeartbeatResponse):
        return f"{head} code={m.code} end={m.end_index} round={m.round}"
    if isinstance(m, ReadIndexRequest):
        return f"{head} ctx={m.ctx}"
    if isinstance(m, ReadIndexResponse):
        return f"{head} ctx={m.ctx} code={m.code} index={m.index}"
    if isinstance(m, ProbeResponse):
        return f"{head} nonce={m.nonce} log=[{m.begin_index}, {m.end_index}]"
    return head
