"""The pure Raft core: no sockets, no clock, no threads, no asyncio (DESIGN §1, §3)."""

from .messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    Message,
    PushKind,
    PushRequest,
    PushResponse,
    Role,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from .node import RaftNode
from .ready import Completion, Ready, ReadyApplier, RoleChange

__all__ = ["Completion", "HeartbeatRequest", "HeartbeatResponse", "Message", "PushKind", "PushRequest",
           "PushResponse", "RaftNode", "Ready", "ReadyApplier", "Role", "RoleChange", "TimeoutNow",
           "VoteRequest", "VoteResponse"]
