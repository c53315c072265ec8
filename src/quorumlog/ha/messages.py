"""Messages between a primary and its backups (RocketMQ's HA protocol, with epochs).

Each names its group, sender, target, the sender's epoch and the primary of that epoch as the sender
knows it, so a node that meets a higher epoch learns who leads it. They travel as one-way frames of
the HA ops (server/codec.py), beside the Raft messages:

- `HaHandshake` (backup -> primary): the backup's log, as the last index of each epoch it holds; the
  primary answers with the point where the two logs agree (`HaTruncate`), RocketMQ 5's epoch check.
- `HaReport` (backup -> primary): the backup's max offset (8 bytes), written and durable: its ack.
  `recovering`: the backup's store may lack entries it acknowledged (a replaced disk, a cut at damage) and
  its controller has not cleared it yet; its report is then progress, never an acknowledgement (primary.py).
- `HaTransfer` (primary -> backup): a 12-byte header (offset i64, size i32) and `size` bytes of raw
  log, entries as they are on the primary's disk; size 0 is a heartbeat. `committed` is the index
  readers may see; `start` the primary's log end when its epoch began (its commit may lag it for a while,
  while every entry acknowledged in an earlier epoch lies at or below it).
- `HaTruncate` (primary -> backup): keep the log up to `keep_index`, then report; when the backup's
  entries expired on the primary, restart the log at the primary's begin (the begin_* fields). `answers`
  is the digest of the handshake it answers (`handshake_digest`): the backup takes only an answer about
  the log it holds now, never a late one about an earlier state (or an earlier incarnation's).
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

FRAME_HEADER = struct.Struct(">qi")  # offset, size
EPOCH_PAIR = struct.Struct(">qq")  # epoch, last index of that epoch in the log
_LOG_SPAN = struct.Struct(">qq")  # begin index, end index


@dataclass(frozen=True, slots=True)
class HaHandshake:
    group: str
    sender: str
    target: str
    term: int  # the epoch the backup follows
    primary: str | None
    begin_index: int
    end_index: int
    epochs: bytes  # EPOCH_PAIR records, oldest first


@dataclass(frozen=True, slots=True)
class HaReport:
    group: str
    sender: str
    target: str
    term: int
    primary: str | None
    offset: int  # the backup's max offset: where its next entry goes
    recovering: bool = False  # not yet cleared by its controller: this offset acknowledges nothing


@dataclass(frozen=True, slots=True)
class HaTransfer:
    group: str
    sender: str
    target: str
    term: int
    primary: str | None
    committed: int
    start: int  # the primary's log end when its epoch began: every earlier acknowledged entry is at or below it
    frame: bytes  # FRAME_HEADER + raw log bytes


@dataclass(frozen=True, slots=True)
class HaTruncate:
    group: str
    sender: str
    target: str
    term: int
    primary: str | None
    keep_index: int
    begin_index: int
    begin_pos: int
    begin_chain: int
    begin_term: int
    answers: int  # handshake_digest of the handshake answered


HaMessage = HaHandshake | HaReport | HaTransfer | HaTruncate


def pack_epochs(pairs: list[tuple[int, int]]) -> bytes:
    return b"".join(EPOCH_PAIR.pack(e, last) for e, last in pairs)


def handshake_digest(begin_index: int, end_index: int, epochs: bytes) -> int:
    """63 bits that name the log a handshake described. Two logs with the same span and epoch list hold
    the same entries (epochs.py), so an answer naming them is about the log the backup holds now."""
    h = hashlib.blake2b(_LOG_SPAN.pack(begin_index, end_index) + epochs, digest_size=8)
    return int.from_bytes(h.digest(), "big") >> 1


def unpack_epochs(data: bytes) -> list[tuple[int, int]]:
    """The (epoch, last index) pairs of a handshake; ValueError when the bytes are not whole pairs."""
    if len(data) % EPOCH_PAIR.size:
        raise ValueError(f"epoch list of {len(data)} bytes is not a whole number of pairs")
    return [EPOCH_PAIR.unpack_from(data, i) for i in range(0, len(data), EPOCH_PAIR.size)]
