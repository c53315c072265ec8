"""quorumlog: a replicated, durable commit log with DLedger's Raft replication and store format."""

from .entry import Entry
from .errors import QuorumLogError, ResponseCode

__all__ = ["Entry", "QuorumLogError", "ResponseCode"]
__version__ = "0.1.0"
