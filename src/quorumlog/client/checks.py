"""What the client checks outside the protocol: its callers' arguments before anything is sent or a
sequence drawn, the nodes' answers to appends and reads, and members' logs compared for a promotion."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..entry import Entry, check_entry, entry_at
from ..errors import QuorumLogError, ResponseCode
from ..net.errors import FieldTypeError, FieldValueError


def is_live_primary(d: dict[str, Any]) -> bool:
    return d.get("role") == "leader" and bool(d.get("confirmed"))


def log_key(d: dict[str, Any], *, acknowledged: bool) -> tuple[int, int]:
    """(last epoch, last index) of a member's log, to compare for a promotion. With `acknowledged`, a live
    primary counts up to its committed index: nothing past it was acknowledged, and its producers wait
    there, so a switchover under load is not refused for entries in flight."""
    last = int(d.get("end_index", -1))
    if acknowledged and is_live_primary(d):
        last = min(last, int(d.get("committed_index", last)))
    return int(d.get("last_epoch", 0)), last


def position(last_epoch: int, last: int) -> str:
    return "log is empty" if last < 0 else f"log ends at index {last} (last epoch {last_epoch})"


def describe_ahead(node: str, d: dict[str, Any]) -> str:
    last_epoch, last = log_key(d, acknowledged=True)
    if is_live_primary(d):
        return f"{node}, the live primary (it acknowledged entries up to index {last}, last epoch {last_epoch})"
    what = "the unconfirmed primary" if d.get("role") == "leader" else "backup"
    return f"{what} {node} (its {position(last_epoch, last)})"


def promotion_refusal(target: str, mine: dict[str, Any], docs: dict[str, dict[str, Any]]) -> str | None:
    """Why promoting `target` (its status `mine`) would lose entries another member (`docs`) holds, or None."""
    held = log_key(mine, acknowledged=False)
    ahead = {n: d for n, d in docs.items() if n != target and log_key(d, acknowledged=True) > held}
    if not ahead:
        return None
    them = "; ".join(describe_ahead(n, d) for n, d in sorted(ahead.items()))
    return (f"{target} is behind {them}, while {target}'s {position(*held)}; promoting it would lose what it "
            f"lacks. Let it catch up and retry, or promote the most up-to-date member; pass --force to promote "
            f"{target} anyway and accept that loss")


def decode(buf: bytes, max_body: int) -> list[Entry]:
    """Entries of a READ/GET/TAIL answer, each CRC-checked. The chain CRC is not followed from one entry
    to the next: reads leave NOOP/CONFIG entries out, so consecutive entries need not be neighbours."""
    out = []
    off = 0
    n = len(buf)
    while off < n:
        h = check_entry(buf, off, None, max_body)
        out.append(entry_at(buf, off, h))
        off += h[1]
    return out


def check_answer(first_index: int, sent: int, positions: Sequence[int], idempotent: bool) -> None:
    """A node's SUCCESS to an append names an index and a position for every entry sent: an answer that
    does not would have callers pair entries with the wrong indexes. (With the idempotent producer, a
    retry that the node recognises is answered with the entries the first attempt wrote, however many.)
    O(1): the first position stands for the rest, which a node gives in ascending order."""
    answered = len(positions)
    if first_index < 0 or not answered or positions[0] < 0 or (answered != sent and not idempotent):
        raise QuorumLogError(f"node answered an append of {sent} entries with {answered} positions from index "
                             f"{first_index}", ResponseCode.INCONSISTENT_STATE)


def check_index(name: str, value: int) -> None:
    """A negative index or count is the caller's mistake: refused here, before anything is sent."""
    if type(value) is not int:
        raise FieldTypeError(f"{name}: expected an int, got {type(value).__name__}")
    if value < 0:
        raise FieldValueError(f"{name} must not be negative, got {value}")


def check_bodies(bodies: bytes | list[bytes]) -> None:
    """Every body bytes-like (the encoder would refuse it only after the producer drew a sequence)."""
    if isinstance(bodies, list):
        for i, b in enumerate(bodies):
            if not isinstance(b, bytes | bytearray | memoryview):
                raise FieldTypeError(f"AppendBatchRequest.bodies[{i}]: expected bytes, got {type(b).__name__}")
    elif not isinstance(bodies, bytes | bytearray | memoryview):
        raise FieldTypeError(f"AppendRequest.body: expected bytes, got {type(bodies).__name__}")
