"""Clients: `AsyncClient` (asyncio) and `Client` (synchronous, for scripts and Spark workers).

    with Client("127.0.0.1:9000,127.0.0.1:9001,127.0.0.1:9002", group="g0") as c:
        r = c.append(b"event")            # AppendResult(index, term, pos)
        c.append_many([b"a", b"b"])       # one frame, one quorum wait
        e = c.get(r.index)                # Entry(index, term, pos, body)
        for e in c.read(0, 1000): ...     # committed entries only
        c.metadata()                      # leader, term, members, per-node indexes

The client finds the leader through METADATA, follows NOT_LEADER redirects, and retries with back-off
across a leader change until `retry_timeout`. Appends are pipelined: concurrent calls share one
connection and many requests may be in flight.

**A retried append may be written twice.** When an append fails in a way that leaves its fate open
(TERM_CHANGED, WAIT_QUORUM_ACK_TIMEOUT, the connection lost after the request left), the entry may
still commit; the client retries, and the log may then hold it twice (at two indexes). There is no
idempotent producer yet; pass `retry_uncertain=False` to get an AppendUncertainError instead and decide.
Reads never return uncommitted entries; every entry read is CRC-checked on arrival.
"""

from .aio import _BATCH_ANSWER, AppendResult, AsyncClient, Metadata, NotLeaderError, parse_endpoints
from .sync import Client

__all__ = ["AppendResult", "AsyncClient", "Client", "Metadata", "NotLeaderError", "parse_endpoints", "_BATCH_ANSWER"]
