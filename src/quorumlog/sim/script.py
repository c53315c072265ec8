"""A hand-driven cluster for scripted scenarios (etcd's datadriven tests, kept simple).

Every node has its own clock, advanced only when the script says so; sent messages wait in one queue until
the script delivers them, optionally dropping some; flushes happen at once unless `auto_flush` is off.
Everything that happens is written to `transcript` as readable lines, so a scenario can assert on them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from ..config import RaftConfig, StoreConfig
from ..core.driver import Driver
from ..core.ready import Completion, Ready, RoleChange
from ..core.role import Role
from ..raft.member import members_digest
from ..raft.membership import Membership
from ..raft.messages import Message, describe
from ..raft.node import RaftNode
from ..store.base import LogStore
from ..store.memory import MemoryStore

SCRIPT_RAFT = RaftConfig(heartbeat_interval_ms=100, max_heartbeat_leak=5, election_backoff_ms=100,
                         max_pending_requests=100, max_wait_ack_ms=2000, max_push_timeout_ms=500,
                         max_inflight_pushes=4, push_batch_bytes=4096, push_batch_entries=4,
                         max_transfer_lag=20, transfer_timeout_ms=1000)

Filter = Callable[[Message], bool]


def store_with_terms(terms: Sequence[int], vote_term: int = 0, config: StoreConfig | None = None) -> MemoryStore:
    """A MemoryStore holding one entry per term given (index i has terms[i]). Bodies depend only on
    (index, term), so two stores with the same index and term there hold the same entry, as Raft's
    log matching property requires of real logs."""
    store = MemoryStore(config)
    for i, t in enumerate(terms):
        store.append([f"e{i}t{t}".encode()], t)
    store.flush()
    if vote_term:
        store.save_vote(vote_term, None)
    return store


class Script:
    def __init__(self, ids: Sequence[str], config: RaftConfig = SCRIPT_RAFT, group: str = "g0",
                 stores: dict[str, LogStore] | None = None, seed: int = 0, bootstrapped: bool = True,
                 members: Sequence[str] | None = None) -> None:
        """With `bootstrapped` (the default) every store starts as a member of an existing group, so
        scenarios begin at their first election; without it, pristine stores probe first (joining.py).
        `members` (default: every id) are the group's configured members; the other ids are spare nodes
        that join it (a CONFIG entry must name them before they count)."""
        self.ids = list(ids)
        self.members = list(members) if members is not None else list(ids)
        self.config = config
        self.group = group
        self.stores: dict[str, LogStore] = {i: (stores or {}).get(i) or MemoryStore() for i in self.ids}
        if bootstrapped:
            for i, store in self.stores.items():
                if not store.identity:
                    store.set_identity(members_digest(group, self._peers(i)))
        self.clock = {i: 0 for i in self.ids}
        self.queue: list[Message] = []
        self.completions: dict[str, list[Completion]] = {i: [] for i in self.ids}
        self.transcript: list[str] = []
        self._next_read = 1 << 40  # read request ids, apart from the nodes' own
        self.auto_flush = True
        self.owed: set[str] = set()
        self.rngs = {i: random.Random(seed * 1000 + k) for k, i in enumerate(self.ids)}
        self.nodes: dict[str, RaftNode] = {}
        self.drivers: dict[str, Driver] = {}
        for i in self.ids:
            self.restart(i)

    def _driver(self, node: RaftNode) -> Driver:
        node_id = node.node_id

        def send(m: Message) -> None:
            self.queue.append(m)
            self.transcript.append(describe(m))

        def complete(c: Completion) -> None:
            self.completions[node_id].append(c)
            self.transcript.append(f"{node_id} complete {c.kind} #{c.request_id} code={c.code} "
                                   f"{c.first_index}..{c.last_index}")

        def changed(ch: RoleChange) -> None:
            self.transcript.append(f"{node_id} {ch.role.name} t{ch.term} leader={ch.leader_id}")

        def start_flush() -> None:
            if self.auto_flush:
                self.flush(node_id)
            else:
                self.owed.add(node_id)

        return Driver(node, send, complete, changed, start_flush)

    def _peers(self, node_id: str) -> list[str]:
        return self.members if node_id in self.members else [*self.members, node_id]

    def restart(self, node_id: str) -> RaftNode:
        """A (new) RaftNode over the node's store, as after a process restart."""
        node = RaftNode(node_id, self.group, self._peers(node_id), self.stores[node_id], self.config,
                        self.rngs[node_id], joining=node_id not in self.members)
        self.nodes[node_id] = node
        self.drivers[node_id] = self._driver(node)
        self.owed.discard(node_id)
        return node

    def wipe(self, node_id: str) -> RaftNode:
        """Replace the node's store by a pristine one of the same config (a lost data directory) and
        restart it; the new store has no identity, so the node probes before it votes."""
        old = self.stores[node_id]
        config = old.config if isinstance(old, MemoryStore) else None
        self.stores[node_id] = MemoryStore(config)
        return self.restart(node_id)

    def apply(self, node_id: str, ready: Ready) -> Ready:
        return self.drivers[node_id].apply(ready, self.clock[node_id])

    def flush(self, node_id: str) -> None:
        self.owed.discard(node_id)
        self.drivers[node_id].flushed(self.stores[node_id].flush(), self.clock[node_id])

    # -- driving -------------------------------------------------------------------------------
    def tick(self, node_id: str, advance_ms: int = 0) -> Ready:
        self.clock[node_id] += advance_ms
        return self.apply(node_id, self.nodes[node_id].tick(self.clock[node_id]))

    def tick_all(self, advance_ms: int) -> None:
        for i in self.ids:
            self.tick(i, advance_ms)

    def deliver(self, drop: Filter | None = None, only: Filter | None = None) -> int:
        """Deliver what is queued now (one batch per target), dropping messages `drop` matches and
        keeping back those `only` does not match. Returns how many were delivered."""
        queue, self.queue = self.queue, []
        batches: dict[str, list[Message]] = {}
        n = 0
        for m in queue:
            if only is not None and not only(m):
                self.queue.append(m)
                continue
            if drop is not None and drop(m):
                self.transcript.append(f"drop {describe(m)}")
                continue
            batches.setdefault(m.target, []).append(m)
            n += 1
        for target in self.ids:
            msgs = batches.get(target)
            if msgs:
                self.apply(target, self.nodes[target].step_batch(msgs, self.clock[target]))
        return n

    def settle(self, drop: Filter | None = None, rounds: int = 200) -> None:
        """Deliver until nothing is in flight."""
        for _ in range(rounds):
            if not self.queue:
                return
            self.deliver(drop=drop)
        raise AssertionError("messages still flowing after many rounds")

    def run(self, ms: int, step_ms: int = 10, drop: Filter | None = None) -> None:
        """Advance every clock by `ms` in steps, delivering everything after each step."""
        for _ in range(ms // step_ms):
            self.tick_all(step_ms)
            self.settle(drop=drop)

    def elect(self, node_id: str, drop: Filter | None = None) -> None:
        """Make `node_id` time out first and campaign; deliver until the election settles."""
        node = self.nodes[node_id]
        self.tick(node_id)  # arms its timer if this is its first tick
        deadline = node.elector.deadline
        assert deadline is not None
        self.tick(node_id, max(0, deadline - self.clock[node_id]))
        self.settle(drop=drop)

    def propose(self, node_id: str, bodies: Sequence[bytes], **kw: object) -> int:
        ready = self.apply(node_id, self.nodes[node_id].propose(bodies, self.clock[node_id], **kw))  # type: ignore[arg-type]
        assert ready.request_id is not None
        return ready.request_id

    def change(self, node_id: str, change: Callable[[Membership], Membership]) -> int:
        """Ask `node_id` to change the group's members (RaftNode.change_members); the request id."""
        ready = self.apply(node_id, self.nodes[node_id].change_members(change, self.clock[node_id]))
        assert ready.request_id is not None
        return ready.request_id

    def read_index(self, node_id: str, count: int = 1) -> list[int]:
        """Ask `node_id` for `count` linearizable read points at once (RaftNode.read_index); their ids."""
        rids = [self._next_read + i for i in range(count)]
        self._next_read += count
        self.apply(node_id, self.nodes[node_id].read_index(rids, self.clock[node_id]))
        return rids

    def transfer(self, node_id: str, target: str) -> int:
        ready = self.apply(node_id, self.nodes[node_id].transfer_leader(target, self.clock[node_id]))
        assert ready.request_id is not None
        return ready.request_id

    # -- looking -------------------------------------------------------------------------------
    def leader(self) -> str | None:
        leaders = [i for i in self.ids if self.nodes[i].role == Role.LEADER]
        return max(leaders, key=lambda i: self.nodes[i].term) if leaders else None

    def result(self, node_id: str, request_id: int) -> Completion | None:
        for c in self.completions[node_id]:
            if c.request_id == request_id:
                return c
        return None

    def terms(self, node_id: str) -> list[int]:
        s = self.stores[node_id]
        return [s.term_at(i) for i in range(s.begin_index, s.end_index + 1)]
