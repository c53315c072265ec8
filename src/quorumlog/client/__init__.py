"""Clients: `AsyncClient` (asyncio) and `Client` (synchronous, for scripts and Spark workers).

    with Client("127.0.0.1:9000,127.0.0.1:9001,127.0.0.1:9002", group="g0") as c:
        r = c.append(b"event")            # AppendResult(index, term, pos)
        c.append_many([b"a", b"b"])       # one frame, one quorum wait
        e = c.get(r.index)                # Entry(index, term, pos, body, magic, meta)
        for e in c.read(0, 1000): ...     # committed entries only
        c.metadata()                      # leader, term, members; .nodes: each member's status

An endpoint may name its node, "n0=127.0.0.1:9000" (as a group's `peers` do): the node answering there
must then be n0, as must the members at the addresses METADATA names (docs/security.md).

The client finds the leader through METADATA, follows NOT_LEADER redirects, and retries with back-off
across a leader change until `retry_timeout`; reads and METADATA, too, try again while no node answers
(`stalled` says what a call waits for meanwhile). An address that answers in HTTP is no node: the call
fails at once with NotANodeError when no other endpoint answers. Appends are pipelined: concurrent calls
share one connection and many requests may be in flight.

**Retries never write twice.** Each client is an idempotent producer: it draws a random 63-bit
producer id and numbers its appends; the leader recognises a retry (after TERM_CHANGED,
WAIT_QUORUM_ACK_TIMEOUT, a lost connection or a leader change) and answers it with the original
entries. At most `max_in_flight` appends are out at once. An append that fails for good raises, and
the client continues under a new producer id. Producers idle for a day (the group's
`producer_idle_ms`) are forgotten. `idempotent=False` turns this off: then a retried append may be
written twice, and `retry_uncertain=False` raises AppendUncertainError instead of retrying.

`append(body, expected_end=I)` writes only if the group's last client entry is index I (-1: none),
else raises ExpectedEndMismatchError with `actual_end`: optimistic concurrency for a single writer.
Reads never return uncommitted entries; every entry read is CRC-checked on arrival. Nor, by default, less
than the client has seen committed (its appends, its reads, `end()`), whichever node answers: the client
sends that index as `min_index`, and a node behind waits for it or names the leader (`read_your_writes`,
client/seen.py).
"""

from .aio import AsyncClient, NotLeaderError
from .results import _BATCH_ANSWER, AppendResult, Metadata, parse_endpoints
from .sync import Client

__all__ = ["AppendResult", "AsyncClient", "Client", "Metadata", "NotLeaderError", "parse_endpoints", "_BATCH_ANSWER"]
