"""The simulated clients' side of a request: what was proposed, and an idempotent producer that resends
until it is acknowledged. Shared by the Raft simulator (cluster.py) and the primary/backup one (pb.py)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Proposal:
    kind: str
    bodies: list[bytes]
    at: int
    producer: SimProducer | None = None
    pid: int = 0
    seq: int = -1
    floor: int = -1  # a read: the committed end known when it was asked (its answer may not be below)


@dataclass(slots=True)
class SimProducer:
    """An idempotent client: numbered requests, each resent (same sequence, same bodies) until acknowledged,
    sometimes while the first copy is still in flight."""

    pid: int
    next_seq: int = 0
    unacked: dict[int, list[bytes]] = field(default_factory=dict)  # seq -> bodies
    since: int = 0  # when the oldest unacknowledged request was first sent

    def retire(self, pid: int) -> None:
        self.pid = pid
        self.next_seq = 0
        self.unacked.clear()
