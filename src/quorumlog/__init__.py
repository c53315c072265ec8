"""quorumlog: a replicated, durable commit log with DLedger's Raft replication and store format."""

from .client import AppendResult, AsyncClient, Client, Metadata
from .entry import Entry
from .errors import (
    AppendUncertainError,
    IndexExpiredError,
    IndexOutOfRangeError,
    InvalidArgumentError,
    LeaderUnavailableError,
    NotLeaderError,
    QuorumLogError,
    RequestError,
    ResponseCode,
    TransferError,
    UnknownGroupError,
    UnknownMemberError,
)

__all__ = [
    "AppendResult", "AppendUncertainError", "AsyncClient", "Client", "Entry", "IndexExpiredError",
    "IndexOutOfRangeError", "InvalidArgumentError", "LeaderUnavailableError", "Metadata", "NotLeaderError",
    "QuorumLogError", "RequestError", "ResponseCode", "TransferError", "UnknownGroupError", "UnknownMemberError",
]
__version__ = "0.1.0"
