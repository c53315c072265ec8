"""The pure Raft core: no sockets, no clock, no threads, no asyncio (docs/design.md §1, §4). It builds on
quorumlog.core (Ready, Driver, Appends, the producer table, Role), which primary/backup (ha/) shares."""

from .messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    Message,
    PushKind,
    PushRequest,
    PushResponse,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from .node import RaftNode

__all__ = ["HeartbeatRequest", "HeartbeatResponse", "Message", "PushKind", "PushRequest", "PushResponse",
           "RaftNode", "TimeoutNow", "VoteRequest", "VoteResponse"]
