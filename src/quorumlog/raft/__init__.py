"""The pure Raft core: no sockets, no clock, no threads, no asyncio (DESIGN §1, §3)."""

from .driver import Driver
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
from .ready import Completion, Ready, RoleChange

__all__ = ["Completion", "Driver", "HeartbeatRequest", "HeartbeatResponse", "Message", "PushKind", "PushRequest",
           "PushResponse", "RaftNode", "Ready", "Role", "RoleChange", "TimeoutNow",
           "VoteRequest", "VoteResponse"]
