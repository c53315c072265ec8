"""Invariants checked after every simulator step.

The checker keeps a reference copy of the committed log (the encoded entries, which include each
entry's chain CRC). Because an entry's chain CRC covers its header and, through the seed, every entry
before it, two replicas whose entries at index i carry the same chain CRC hold the same prefix 0..i; so
most checks cost one header read per node per step instead of a scan:

- election safety: at most one leader per term;
- log matching: replicas with an entry of the same index and term hold the same entry and prefix;
- leader completeness: a new leader holds every entry known committed;
- state machine safety: committed prefixes are identical on all nodes, and a committed entry never
  changes, also across crashes and restarts;
- a running node's commit index never goes backwards; after a restart it is at least its checkpoint's;
- every acknowledged append is in the committed log at the index, term and position it was given, and
  held by a majority (by a majority of the undamaged nodes while one node recovers from lost data).
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.ready import Completion
from ..entry import HEADER, HEADER_SIZE, MAGIC_CONFIG, META_SIZE, unpack_meta
from ..raft.membership import Membership
from ..raft.messages import VoteRequest, VoteResponse
from ..store.base import LogStore

_HEAD = struct.Struct(">iiqqqiI")  # magic, size, index, term, pos, channel, chain_crc


class InvariantViolation(AssertionError):
    """A safety or liveness property failed."""


def header_at(store: LogStore, index: int) -> tuple[int, int, int, int, int, int, int]:
    raw, n = store.read_raw(index, 1, 1)
    if n != 1:
        raise InvariantViolation(f"read_raw({index}) returned {n} entries")
    return _HEAD.unpack_from(raw, 0)


def chain_at(store: LogStore, index: int) -> int | None:
    """Chain CRC of the entry at `index`, None when the store does not hold it. A store that expired
    entries (or was reset) still vouches for the one before its first: its begin chain is that chain."""
    if index == store.begin_index - 1 and index >= 0:
        return store.begin_chain
    if index < store.begin_index or index > store.end_index:
        return None
    return header_at(store, index)[6]


def split_entries(raw: bytes | memoryview, count: int) -> list[bytes]:
    out = []
    off = 0
    mv = memoryview(raw)
    for _ in range(count):
        size = int.from_bytes(raw[off + 4:off + 8], "big")
        out.append(bytes(mv[off:off + size]))
        off += size
    return out


@dataclass(slots=True)
class AckedAppend:
    first_index: int
    term: int
    positions: list[int]
    bodies: list[bytes]


class Checker:
    """Holds the reference committed log and what clients were told; raises InvariantViolation."""

    def __init__(self, ids: list[str], stores: Callable[[str], LogStore | None],
                 initial: Membership | None = None) -> None:
        self.ids = ids
        # The committed configurations (index, config), from the first: a majority is of the voters then.
        self.ref_configs: list[tuple[int, Membership]] = [(-1, initial or Membership.of(ids))]
        # The majority of every configuration any replica's log held, committed or not: (index, term) -> it.
        self.config_majorities: dict[tuple[int, int], int] = {(-1, 0): self.ref_configs[0][1].majority}
        self.stores = stores  # node id -> its store while the node runs, else None
        self.leaders: dict[int, str] = {}
        self.ref: list[bytes] = []
        self.ref_chain: list[int] = []
        # The highest leader term known when each entry was first seen committed (non-decreasing): a
        # leader of term T must hold the entries committed before T, not those a later term committed
        # while a stale elected-but-paused leader of T had not yet spoken.
        self.ref_seen_term: list[int] = []
        self.last_commit: dict[str, int] = {i: -1 for i in ids}
        self.checkpointed: dict[str, int] = {i: -1 for i in ids}
        self.commit_before_cut: dict[str, int] = {i: -1 for i in ids}  # (on_cut)
        self.end_entries: dict[tuple[int, int], int] = {}  # (index, term) -> chain, of every end seen
        self.max_acked = -1
        self.unverified: list[AckedAppend] = []
        self.acked_entries = 0
        self.damaged: set[str] = set()
        self.producer_seqs: dict[tuple[int, int], int] = {}  # (producer, seq) -> committed index
        self.refused: set[bytes] = set()  # bodies of appends answered "nothing was written"
        # What each node told others: the highest term it spoke in, and whom it voted for in a term. A
        # restarted node must remember both (its store made them durable before the message left).
        self.said_term: dict[str, int] = {i: 0 for i in ids}
        self.said_vote: dict[str, tuple[int, str]] = {}

    # -- events --------------------------------------------------------------------------------
    def on_leader(self, node: str, term: int) -> None:
        prev = self.leaders.setdefault(term, node)
        if prev != node:
            raise InvariantViolation(f"two leaders in term {term}: {prev} and {node}")
        store = self.stores(node)
        if store is None or not self.ref:
            return
        last = bisect.bisect_left(self.ref_seen_term, term) - 1
        if last < 0:
            return
        # Entries the leader expired were committed before; its first held one vouches for them.
        last = max(last, min(store.begin_index - 1, len(self.ref) - 1))
        if chain_at(store, last) != self.ref_chain[last]:
            raise InvariantViolation(f"leader {node} of term {term} lacks committed entries up to {last} "
                                     f"(its end is {store.end_index})")

    def on_ack(self, node: str, c: Completion, bodies: list[bytes]) -> None:
        if c.last_index - c.first_index + 1 != len(bodies) or len(c.positions) != len(bodies):
            raise InvariantViolation(f"{node} acknowledged {len(bodies)} bodies as "
                                     f"{c.first_index}..{c.last_index} with {len(c.positions)} positions")
        self.unverified.append(AckedAppend(c.first_index, c.term, list(c.positions), bodies))
        self.max_acked = max(self.max_acked, c.last_index)
        self.acked_entries += len(bodies)

    def on_refused(self, bodies: list[bytes]) -> None:
        """An append was answered as written nowhere (DISK_FULL, or LEADER_TRANSFERRING): none of its
        bodies may ever commit."""
        self.refused.update(bodies)

    def on_checkpoint(self, node: str, store: LogStore) -> None:
        self.checkpointed[node] = max(self.checkpointed[node], min(store.committed_index, store.durable_index))

    def on_restart(self, node: str, store: LogStore) -> None:
        self._check_stable(node, store)
        c = store.committed_index
        if c < self.checkpointed[node] and store.damage is None:
            raise InvariantViolation(f"{node} restarted with commit {c} below its checkpoint "
                                     f"{self.checkpointed[node]}")
        # A damaged store restores its commit index from the floor it recorded when the damage was
        # found, and a log cut at damage (on_cut) keeps the commit its checkpoint named: above the commit
        # it had before the crash, when that crash came before it fetched the commit again (the
        # _check_commit below still checks the prefix against the committed log).
        had = max(self.last_commit[node], self.checkpointed[node], self.commit_before_cut[node])
        if c > had and store.damage is None:
            raise InvariantViolation(f"{node} restarted with commit {c} above the {had} it had before (or its "
                                     f"checkpoint named)")
        self.last_commit[node] = c
        if store.damage is not None:
            self.damaged.add(node)
        self._check_commit(node, store, restarted=True)

    def on_sent(self, m: Any) -> None:
        """A message left `m.sender`: the term it speaks in (a pre-vote's term is not taken) and its vote."""
        if isinstance(m, (VoteRequest, VoteResponse)) and m.pre_vote:
            return
        sender = m.sender
        if m.term > self.said_term[sender]:
            self.said_term[sender] = m.term
        if isinstance(m, VoteResponse) and m.granted:
            self.said_vote[sender] = (m.term, m.target)

    first_term = 0  # the term a store that saved none starts in (primary/backup: epoch 1, implied)

    def _check_stable(self, node: str, store: LogStore) -> None:
        term, voted_for = store.load_vote()
        term = max(term, self.first_term)
        if term < self.said_term[node]:
            raise InvariantViolation(f"{node} restarted in term {term}, but had spoken in term "
                                     f"{self.said_term[node]}: it left before its term was durable")
        vote = self.said_vote.get(node)
        if vote is not None and vote[0] == term and voted_for != vote[1]:
            raise InvariantViolation(f"{node} restarted voting for {voted_for} in term {term}, but had granted "
                                     f"its vote to {vote[1]}: it left before its vote was durable")

    def on_wipe(self, node: str) -> None:
        """The node's store was replaced by an empty one: it holds nothing until it recovers (and forgot
        what it said)."""
        self.said_term[node] = 0
        self.said_vote.pop(node, None)
        self.checkpointed[node] = -1
        self.last_commit[node] = -1
        self.commit_before_cut[node] = -1
        self.damaged.add(node)

    def on_cut(self, node: str, store: LogStore) -> None:
        """A running node cut its log at damage it found (its commit index with it): it lacks entries until
        it recovers them. Its checkpoint, unlike a wiped store's, still names the commit it had: a restart
        after it recovered may restore up to that commit, above the one a new primary (whose commit lags)
        told it since (the primary/backup simulator's seed 203739: a checker error)."""
        self.commit_before_cut[node] = max(self.commit_before_cut[node], self.last_commit[node])
        self.last_commit[node] = min(self.last_commit[node], store.committed_index)
        self.damaged.add(node)

    def on_reset(self, node: str, store: LogStore) -> None:
        """The node's log was reset to start at the leader's begin (its old log is gone)."""
        self.checkpointed[node] = min(self.checkpointed[node], store.begin_index - 1)

    def on_recovered(self, node: str) -> None:
        self.damaged.discard(node)

    # -- per step ------------------------------------------------------------------------------
    def check(self) -> None:
        for node in self.ids:
            store = self.stores(node)
            if store is None:
                continue
            for index, term, body in store.configs:
                if (index, term) not in self.config_majorities:
                    self.config_majorities[(index, term)] = Membership.decode(body).majority
            self._check_commit(node, store, restarted=False)
            self._check_end(node, store)
        self._verify_acks()
        self._check_acked_majority()

    def _check_commit(self, node: str, store: LogStore, restarted: bool) -> None:
        c = store.committed_index
        if not restarted and c < self.last_commit[node]:
            raise InvariantViolation(f"{node}: commit index went back from {self.last_commit[node]} to {c}")
        if c > store.end_index:
            raise InvariantViolation(f"{node}: commit {c} beyond end {store.end_index}")
        self.last_commit[node] = c
        if c < 0:
            return
        ref = self.ref
        floor = store.begin_index - 1  # entries below it expired (or were skipped by a reset)
        if c < len(ref):
            if c >= floor and chain_at(store, c) != self.ref_chain[c]:
                raise InvariantViolation(f"{node}: committed entry {c} differs from the committed log "
                                         f"(or an earlier one does)")
            return
        if ref and len(ref) - 1 >= floor and chain_at(store, len(ref) - 1) != self.ref_chain[-1]:
            raise InvariantViolation(f"{node}: committed prefix up to {len(ref) - 1} differs from the "
                                     f"committed log")
        if len(ref) <= floor:
            raise InvariantViolation(f"{node}: log begins at {floor + 1}, past the committed log's "
                                     f"known end {len(ref) - 1}")
        start = len(ref)
        while start <= c:
            raw, n = store.read_raw(start, c - start + 1, 1 << 24)
            for e in split_entries(raw, n):
                ref.append(e)
                self.ref_chain.append(_HEAD.unpack_from(e, 0)[6])
                magic, *_, body_size = HEADER.unpack_from(e, 0)
                if magic == MAGIC_CONFIG:
                    self.ref_configs.append((len(ref) - 1, Membership.decode(e[len(e) - body_size:])))
                self.ref_seen_term.append(max(self.leaders, default=0))
                self._check_producer(e, len(ref) - 1)
                if self.refused and e[len(e) - HEADER.unpack_from(e, 0)[8]:] in self.refused:  # the body ends it
                    raise InvariantViolation(f"entry {len(ref) - 1} was committed after its append was refused "
                                             f"as written nowhere (DISK_FULL or LEADER_TRANSFERRING)")
            start += n

    def _check_producer(self, e: bytes, index: int) -> None:
        """The idempotent producer's invariant: no (producer, sequence) twice in the committed log."""
        if HEADER.unpack_from(e, 0)[5] != META_SIZE:  # channel: the metadata run's length
            return
        producer, seq, _count, _wall = unpack_meta(e[HEADER_SIZE:HEADER_SIZE + META_SIZE])
        first = self.producer_seqs.setdefault((producer, seq), index)
        if first != index:
            raise InvariantViolation(f"producer {producer} sequence {seq} is in the committed log twice: "
                                     f"at {first} and at {index}")

    def _check_end(self, node: str, store: LogStore) -> None:
        end = store.end_index
        if end < store.begin_index:
            return
        h = header_at(store, end)
        key = (end, h[3])
        prev = self.end_entries.setdefault(key, h[6])
        if prev != h[6]:
            raise InvariantViolation(f"log matching: {node} holds entry {end} of term {h[3]} with a "
                                     f"different history than another replica")

    def _verify_acks(self) -> None:
        if not self.unverified:
            return
        keep = []
        for a in self.unverified:
            last = a.first_index + len(a.bodies) - 1
            if last >= len(self.ref):
                keep.append(a)  # not yet seen committed on a running node (e.g. the leader crashed)
                continue
            for i, body in enumerate(a.bodies):
                e = self.ref[a.first_index + i]
                h = HEADER.unpack_from(e, 0)
                if h[3] != a.term or h[4] != a.positions[i] or e[len(e) - h[8]:] != body:  # the body ends it
                    raise InvariantViolation(f"acknowledged entry {a.first_index + i} (term {a.term}) is "
                                             f"not what the committed log holds (term {h[3]})")
        self.unverified = keep

    def _check_acked_majority(self) -> None:
        idx = self.max_acked
        if idx < 0 or idx >= len(self.ref):
            return
        want = self.ref_chain[idx]
        holders = 0
        for node in self.ids:
            store = self.stores(node)
            if store is None:
                store = self._stopped_store(node)
            # An entry below a store's begin was committed and then expired there: kept, not lost.
            if store is not None and (idx < store.begin_index - 1 or chain_at(store, idx) == want):
                holders += 1
        # Lost committed data on one node is a storage fault the protocol repairs, not a Raft fault. A leader
        # counts a majority of the last configuration in its log, committed or not, even for earlier entries
        # (membership.py): so a majority of the smallest configuration seen since the entry's (single-server
        # steps keep every two consecutive majorities overlapping).
        since = self.ref_configs[bisect.bisect_right([c[0] for c in self.ref_configs], idx) - 1][0]
        need = min(maj for (index, _t), maj in self.config_majorities.items() if index >= since) - len(self.damaged)
        if holders < need:
            raise InvariantViolation(f"acknowledged entry {idx} is held by {holders} nodes, need {need}")

    # Crashed nodes keep their store (what survived the crash); the cluster sets this hook.
    stopped_store: Callable[[str], LogStore | None] | None = None

    def _stopped_store(self, node: str) -> LogStore | None:
        return self.stopped_store(node) if self.stopped_store is not None else None

    def final(self) -> None:
        """Full log-matching check over every entry of every replica."""
        seen: dict[tuple[int, int], int] = {}
        for node in self.ids:
            store = self.stores(node) or self._stopped_store(node)
            if store is None or store.end_index < store.begin_index:
                continue
            raw, n = store.read_raw(store.begin_index, store.end_index - store.begin_index + 1, 1 << 30)
            for e in split_entries(raw, n):
                h = _HEAD.unpack_from(e, 0)
                prev = seen.setdefault((h[2], h[3]), h[6])
                if prev != h[6]:
                    raise InvariantViolation(f"log matching: entry {h[2]} of term {h[3]} differs on {node}")
