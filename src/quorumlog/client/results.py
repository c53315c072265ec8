"""What the clients return and accept: append results, group metadata, a group's end, endpoints, and the
batch answer's schema with its fast positions check."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import QuorumLogError, ResponseCode
from ..net.bodies import FieldType, Schema
from ..net.errors import ProtocolError
from ..net.schemas import APPEND_BATCH_RESPONSE


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where an appended entry landed."""

    index: int
    term: int
    pos: int


@dataclass(frozen=True, slots=True)
class Metadata:
    """A group's leader, term and members, and each member's indexes (None for a node that did not answer)."""

    group: str
    leader: str | None
    term: int
    peers: dict[str, str]
    # Each member's whole status document (its histograms included): kept out of the repr, which prints
    # the leader, term and members.
    nodes: dict[str, dict[str, Any] | None] = field(default_factory=dict, repr=False)


@dataclass(frozen=True, slots=True)
class EndInfo:
    """A group's end (its last index), committed index and term (a primary/backup group's epoch), as node
    `node` answered an END (AsyncClient.end)."""

    end: int
    committed: int
    term: int
    node: str


def parse_endpoints(endpoints: str | Sequence[str]) -> list[str]:
    """The "host:port" addresses of a comma-separated list (or a sequence); an item may name the node it
    reaches, "n1=host:port" (as a group's `peers` do): see endpoint_ids."""
    out = [addr for _node, addr in _endpoint_items(endpoints)]
    if not out:
        raise QuorumLogError("no endpoints given", ResponseCode.UNEXPECTED_ARGUMENT)
    return out


def endpoint_ids(endpoints: str | Sequence[str]) -> dict[str, str]:
    """{address: node id} of the items given as "id=host:port": the node a client reaches there must be that
    one (it names that id in HELLO, and proves it with the secret), else the connection is refused."""
    return {addr: node for node, addr in _endpoint_items(endpoints) if node is not None}


def _endpoint_items(endpoints: str | Sequence[str]) -> list[tuple[str | None, str]]:
    items = endpoints.split(",") if isinstance(endpoints, str) else list(endpoints)
    out: list[tuple[str | None, str]] = []
    for item in (e.strip() for e in items):
        if not item:
            continue
        name, sep, rest = item.partition("=")
        node, addr = (name.strip(), rest.strip()) if sep else (None, item)
        host, _, port = addr.rpartition(":")
        if not host or not port.isdigit() or node == "":
            raise QuorumLogError(f"bad endpoint {item!r}: expected host:port or node=host:port",
                                 ResponseCode.UNEXPECTED_ARGUMENT)
        out.append((node, addr))
    return out


def _split(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


class _PositionsList(FieldType):
    """list[int] checked with one pass of type() calls: an APPEND_BATCH answer holds a position per
    entry, and the generic per-element check cost a fifth of a producer's CPU."""

    __slots__ = ()
    name = "list[int]"

    def check(self, value: Any, where: str) -> None:
        if not isinstance(value, list | tuple) or not all(type(p) is int for p in value):
            raise ProtocolError(f"{where}: expected list[int]")


_BATCH_ANSWER = Schema("AppendBatchResponse", [(n, _PositionsList() if n == "positions" else t)
                                               for n, t in APPEND_BATCH_RESPONSE.fields])
