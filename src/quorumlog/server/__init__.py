"""The node process: drives RaftNodes on an asyncio loop, serves peers and clients, admin HTTP."""

from .node import NodeServer, StartupError

__all__ = ["NodeServer", "StartupError"]
