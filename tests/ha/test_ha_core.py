"""The primary/backup core (ha/) over MemoryStores, driven by a tiny in-test pump: messages are delivered
at once, in order, unless a node is cut off; flushes run at once unless a node's are held."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import replace

import pytest

from quorumlog.config import HaConfig, RaftConfig, StoreConfig
from quorumlog.core.appends import AppendRequest
from quorumlog.core.driver import Driver
from quorumlog.core.ready import Completion, Ready
from quorumlog.core.role import Role
from quorumlog.errors import CorruptEntryError, ResponseCode
from quorumlog.ha.epochs import agreed_end, epoch_list, hand_back_to
from quorumlog.ha.messages import FRAME_HEADER, HaMessage, HaReport, HaTransfer, HaTruncate
from quorumlog.ha.node import HaNode
from quorumlog.sim.nodes import FillableStore
from quorumlog.store.memory import MemoryStore

GROUP = "g"
IDS = ("a", "b", "c")
RAFT = RaftConfig(max_wait_ack_ms=500)
STORE = StoreConfig(data_segment_bytes=4096, index_segment_bytes=4096, max_body_bytes=1024, file_reserved_hours=0)
OK = int(ResponseCode.SUCCESS)


def store() -> MemoryStore:
    return MemoryStore(STORE)


class Pump:
    """HaNodes over MemoryStores, each applied through a real Driver."""

    def __init__(self, ids: tuple[str, ...] = IDS, stores: dict[str, MemoryStore] | None = None,
                 raft: RaftConfig = RAFT, **ha: object) -> None:
        settings: dict[str, object] = {"replication": "primary-backup", "primary": ids[0],
                                       "ha_heartbeat_interval_ms": 100, "ha_ack_timeout_ms": 1000, **ha}
        self.cfg = HaConfig(**settings)  # type: ignore[arg-type]
        self.ids = ids
        self.raft = raft
        self.now = 0
        self.stores = stores if stores is not None else {i: store() for i in ids}
        self.nodes: dict[str, HaNode] = {}
        self.drivers: dict[str, Driver] = {}
        self.queue: deque[HaMessage] = deque()
        self.cut: set[str] = set()  # nodes whose messages, both ways, are dropped
        self.drop: Callable[[HaMessage], bool] = lambda m: False
        self.hold: set[str] = set()  # nodes whose flushes wait for flush()
        self.flush_wanted: set[str] = set()
        self.done: dict[int, Completion] = {}
        self.sent: list[HaMessage] = []
        self._rid = 0
        for i in ids:
            self.start(i)
        for i in ids:  # pristine stores in a new group: the controller finds it new (server/controller.py)
            if self.nodes[i].recovering:
                self.drivers[i].apply(self.nodes[i].recovered(self.now), self.now)

    def start(self, i: str) -> HaNode:
        """(Re)start node `i` over its store, as a process does after a crash."""
        node = self.nodes[i] = HaNode(i, GROUP, list(self.ids), self.stores[i], self.cfg, self.raft, self.now)
        self.drivers[i] = Driver(node, self.queue.append, self._complete, start_flush=lambda: self.flush_wanted.add(i))
        self.flush_wanted.discard(i)
        return node

    def crash(self, i: str) -> HaNode:
        self.stores[i].crash()
        return self.start(i)

    def _complete(self, c: Completion) -> None:
        assert c.request_id not in self.done, f"request {c.request_id} answered twice"
        self.done[c.request_id] = c

    def apply(self, i: str, ready: Ready) -> None:
        self.drivers[i].apply(ready, self.now)
        self.settle()

    def settle(self) -> None:
        while True:
            while self.queue:
                m = self.queue.popleft()
                self.sent.append(m)
                if m.sender in self.cut or m.target in self.cut or self.drop(m):
                    continue
                self.drivers[m.target].apply(self.nodes[m.target].step(m, self.now), self.now)
            due = sorted(self.flush_wanted - self.hold)
            if not due:
                return
            for i in due:
                self.flush(i)

    def flush(self, i: str) -> None:
        self.flush_wanted.discard(i)
        d = self.drivers[i]
        d.flushed(d.node.store.flush(), self.now)
        self.settle()

    def run(self, ms: int, step: int = 10) -> None:
        for _ in range(ms // step):
            self.now += step
            for i in self.ids:
                self.apply(i, self.nodes[i].tick(self.now))

    def append(self, i: str, bodies: list[bytes], producer: int = 0, seq: int = -1) -> int:
        self._rid += 1
        req = AppendRequest(self._rid, bodies, producer, seq)
        self.apply(i, self.nodes[i].propose_many([req], self.now, self.now))
        return self._rid

    def code(self, rid: int) -> int | None:
        c = self.done.get(rid)
        return None if c is None else c.code

    def bodies(self, i: str) -> list[bytes]:
        s = self.stores[i]
        return [e.body for e in s.read(s.begin_index, 1 << 20, 1 << 30)] if s.end_index >= s.begin_index else []

    def chain(self, i: str, index: int) -> int:
        s = self.stores[i]
        raw, n = s.read_raw(index, 1, 1)
        assert n == 1
        return int.from_bytes(raw[36:40], "big")


def started(raft: RaftConfig = RAFT, **ha: object) -> Pump:
    """A fresh group whose primary `a` is confirmed and streaming to both backups."""
    p = Pump(raft=raft, **ha)
    p.run(100)
    assert p.nodes["a"].is_leader
    assert all(b.streaming for b in p.nodes["a"].primary.backups.values())  # type: ignore[union-attr]
    return p


def log_of(terms: list[int], tag: bytes = b"") -> MemoryStore:
    """A store holding one entry per term listed (bodies e<index>, plus `tag` from its first entry on)."""
    s = store()
    for i, t in enumerate(terms):
        s.append([b"e%d" % i + tag], t)
    s.flush()
    return s


# -- replication and the commit rule ---------------------------------------------------------------
def test_fresh_group_replicates_and_commits() -> None:
    p = Pump()
    assert not p.nodes["a"].is_leader  # no backup has followed epoch 1 yet
    p.run(100)
    rid = p.append("a", [b"x", b"y"])
    c = p.done[rid]
    assert c.code == OK and (c.first_index, c.last_index, c.term) == (0, 1, 1)
    p.run(200)  # heartbeats carry the commit
    for i in IDS:
        assert p.bodies(i) == [b"x", b"y"] and p.stores[i].committed_index == 1
        assert p.chain(i, 1) == p.chain("a", 1)
    assert p.nodes["b"].role == Role.FOLLOWER and p.nodes["b"].leader_id == "a"


def test_sync_append_needs_every_in_sync_backup() -> None:
    p = started()
    p.hold.add("c")  # c receives and writes, but never flushes, so never acks
    rid = p.append("a", [b"x"])
    assert p.stores["b"].durable_index == 0 and p.stores["c"].end_index == 0
    assert p.code(rid) is None and p.stores["a"].committed_index == -1
    p.flush("c")
    assert p.code(rid) == OK and p.stores["a"].committed_index == 0


def test_sync_append_refused_when_backups_fall_silent() -> None:
    p = started(min_in_sync=1)
    assert p.code(p.append("a", [b"x"])) == OK
    p.cut |= {"b", "c"}
    p.run(p.cfg.ha_ack_timeout_ms + 100)
    a = p.nodes["a"]
    assert a.primary is not None and a.primary.isr == set() and a.stats["isr_shrinks"] == 2
    end = p.stores["a"].end_index
    rid = p.append("a", [b"y"])
    assert p.code(rid) == int(ResponseCode.SLAVE_NOT_AVAILABLE) == 601
    assert p.stores["a"].end_index == end  # nothing written
    p.cut.clear()
    p.run(300)  # they handshake again and rejoin: writes succeed again
    assert a.primary.isr == {"b", "c"} and p.code(p.append("a", [b"z"])) == OK
    assert p.bodies("b") == [b"x", b"z"]


def test_sync_append_refused_when_backups_never_connected() -> None:
    """With a controller the primary is confirmed by its record; backups that never connect leave the
    in-sync set after the ack timeout, and effectively so at once, before the controller records it."""
    p = Pump(controller="ctl", min_in_sync=1)
    p.cut |= {"b", "c"}
    a = p.nodes["a"]
    a.confirm({"b", "c"})
    p.run(p.cfg.ha_ack_timeout_ms - 100)
    assert a.primary is not None and a.primary.wanted_isr() is None
    p.run(200)
    assert a.primary.wanted_isr() == set() and a.primary.isr == {"b", "c"}  # leaving, not yet recorded
    rid = p.append("a", [b"x"])
    assert p.code(rid) == int(ResponseCode.SLAVE_NOT_AVAILABLE)
    assert p.stores["a"].end_index == -1
    a.confirm(set())
    assert p.code(p.append("a", [b"y"])) == int(ResponseCode.SLAVE_NOT_AVAILABLE) and p.stores["a"].end_index == -1


def test_sync_append_times_out_when_an_in_sync_backup_stops_acking() -> None:
    p = started()
    p.hold.add("c")  # alive (its heartbeat reports keep it in the set) but its flushes never end
    rid = p.append("a", [b"x"])
    p.run(RAFT.max_wait_ack_ms - 10)
    assert p.code(rid) is None
    p.run(20)
    c = p.done[rid]
    assert c.code == int(ResponseCode.FLUSH_SLAVE_TIMEOUT) == 600 and c.first_index == 0
    assert p.stores["a"].committed_index == -1 and "c" in p.nodes["a"].primary.commit_set  # type: ignore[union-attr]


def test_async_append_is_answered_after_the_local_flush() -> None:
    p = started(ack="async")
    p.cut |= {"b", "c"}  # no backup acks anything
    p.hold.add("a")
    rid = p.append("a", [b"x"])
    p.run(50)
    assert p.code(rid) is None and p.stores["a"].committed_index == -1
    p.flush("a")
    assert p.code(rid) == OK and p.stores["a"].committed_index == 0


@pytest.mark.parametrize("where", ["beyond_sent", "inside_entry"])


def test_report_not_at_a_sent_frame_boundary_is_refused(where: str) -> None:
    p = started()
    p.hold.add("b")  # b holds the frame but does not ack it; c acks
    rid = p.append("a", [b"x" * 100])
    a, sa = p.nodes["a"], p.stores["a"]
    assert sa.durable_index == 0 and p.stores["b"].end_index == 0
    offset = sa.write_pos + 148 if where == "beyond_sent" else 10
    p.apply("a", a.step(HaReport(GROUP, "b", "a", a.epoch, "a", offset), p.now))
    assert a.stats["ha_refused_reports"] == 1
    assert a.primary is not None and a.primary.refusals[-1].startswith(f"b: reported offset {offset}")
    assert sa.committed_index == -1 and p.code(rid) is None and a.primary.backup_acked("b") == -1
    p.flush("b")  # b's real ack arrives now, but b must handshake again before it is trusted
    assert sa.committed_index == -1 and p.code(rid) is None
    p.run(10)  # b left the in-sync set (recorded at once without a controller): c's ack commits it
    assert p.code(rid) == OK and a.primary.isr == {"c"}
    p.hold.clear()
    p.run(1000)  # b handshakes again, catches up and rejoins
    assert a.primary.isr == {"b", "c"} and a.primary.backups["b"].streaming
    assert p.code(p.append("a", [b"y"])) == OK and p.bodies("b") == [b"x" * 100, b"y"]


# -- where a backup's log and its primary's agree --------------------------------------------------
def test_epoch_list_and_agreed_end() -> None:
    assert epoch_list(log_of([1, 1, 2, 2, 2, 5])) == [(1, 1), (2, 4), (5, 5)]
    assert epoch_list(store()) == []
    primary = [(1, 5), (2, 9)]
    assert agreed_end(primary, [(1, 7)]) == 5  # entries 6, 7 of epoch 1 never reached the new primary
    assert agreed_end(primary, [(1, 5), (2, 12)]) == 9  # a longer log of the same epoch: cut to ours
    assert agreed_end(primary, [(1, 3)]) == 3  # a prefix: nothing to cut
    assert agreed_end(primary, [(1, 4), (3, 8)]) == 4  # epoch 3 was never the primary's
    assert agreed_end(primary, []) is None and agreed_end(primary, [(0, 2)]) is None


def test_a_member_that_knows_its_epoch_but_no_primary_takes_the_records() -> None:
    p = Pump(controller="ctl")
    b = p.nodes["b"]
    p.apply("b", b.follow(3, None, p.now))  # told of epoch 3 by a withheld primary, which names nobody
    assert b.behind(3, "a") and b.behind(4, "c") and not b.behind(2, "a") and not b.behind(3, "b")
    p.apply("b", b.follow(3, "a", p.now))
    assert b.leader_id == "a" and not b.behind(3, "a") and not b.behind(3, "c")


def test_a_pristine_store_in_a_controlled_group_is_joining_until_the_controller_tells() -> None:
    """A pristine store may be new or a replaced disk: it is held back (recovering, no primary role) until the
    controller tells, and reported meanwhile as joining, never as recovering: nothing is known lost (a member
    that starts late in a new group and a replaced disk look alike to it and to the controller). Damage found
    later is recovering, never joining."""
    cfg = HaConfig(replication="primary-backup", primary="a", controller="ctl")
    new, late, damaged = (HaNode(i, GROUP, list(IDS), store(), cfg, RAFT, 0) for i in IDS)
    assert all(n.recovering and n.joining for n in (new, late, damaged))
    assert new.primary_id is None  # the configured primary, withheld
    new.recovered(0)  # the controller found the group new
    assert not new.recovering and not new.joining and new.role == Role.LEADER and not new.confirmed
    late.follow(2, "a", 0)  # the record's primary, of an epoch elected since
    assert late.recovering and late.joining and not late.caught_up(2, "a")
    damaged._cut_at(0)  # (what report_corruption does on a backup)
    assert damaged.recovering and not damaged.joining
    plain = HaNode("b", GROUP, list(IDS), store(), HaConfig(replication="primary-backup", primary="a"), RAFT, 0)
    assert not plain.recovering and not plain.joining


@pytest.mark.parametrize("controller", [None, "ctl"])
def test_a_primary_whose_recovery_cut_a_torn_tail_is_recovering_a_backup_is_not(controller: str | None) -> None:
    """Past its checkpoint a store's recovery cannot tell a torn write from rot in entries acknowledged since
    (tests/server/test_server_controller.py has the story): the primary by its own store, which would lead
    with that log, is recovering; a backup is not (after a power cut every member may have a torn tail)."""
    stores = {i: log_of([2, 2, 2]) for i in IDS}
    for s in stores.values():
        s.save_vote(2, "a")
    p = Pump(stores=stores, **({"controller": controller} if controller else {}))
    for i in ("a", "b"):
        stores[i].tail_cut = 3  # what FileStore sets when its recovery cut a tail: restarted so
    a, b = p.start("a"), p.start("b")
    assert a.recovering and not a.is_leader and a.stats["log_lost_entries_at_start"] == 1
    assert not b.recovering and b.stats["log_lost_entries_at_start"] == 0


def test_a_backup_whose_recovery_cut_a_tail_takes_no_epoch_until_it_caught_up() -> None:
    """The simulator's "tail" fault found it (seeds 19 and 31 of `--mode pb --seeds 0:60 --steps 1000`): an
    in-sync backup whose recovery cut entries it had acknowledged was elected while down and, back, led with
    its shorter log, cutting the others to it. Elected so (or named primary by a peer), it is recovering
    instead, for the controller to elect another member or hand the epoch back; it forgets the cut, in its
    store, once it caught up with a primary."""
    stores = {i: log_of([2, 2, 2, 2]) for i in IDS}
    for s in stores.values():
        s.save_vote(2, "a")
    p = Pump(stores=stores, controller="ctl")
    stores["b"].rot_tail(2)  # b lost entries 2 and 3 past its checkpoint, as FileStore cuts a torn tail
    b = p.start("b")
    assert b.tail_unverified and not b.recovering
    p.apply("b", b.promote(3, p.now, {"c"}, confirmed=False))  # the controller's election
    assert b.recovering and not b.is_leader and b.term == 2 and b.stats["ha_primary_refused_tail_cut"] == 1
    assert stores["b"].tail_cut == 2  # (forgotten only once it caught up: recovered)
    b = p.start("b")  # restarted, still recovering; caught up with the primary, the cut is made good
    p.run(300)
    assert b.caught_up(2, "a") and stores["b"].end_index == 3
    p.apply("b", b.recovered(p.now))
    assert not b.tail_unverified and stores["b"].tail_cut is None

    stores["c"].rot_tail(3)
    c = p.start("c")
    p.cut.add("c")
    p.apply("c", c.step(HaReport(GROUP, "a", "c", 4, "c", -1), p.now))  # a peer's word naming c primary of 4
    assert c.recovering and not c.is_leader and c.stats["ha_primary_refused_tail_cut"] == 1


def test_a_backup_streamed_back_to_its_primary_forgets_its_tail_cut_and_an_operator_may_promote_it() -> None:
    stores = {i: log_of([2, 2, 2, 2]) for i in IDS}
    for s in stores.values():
        s.save_vote(2, "a")
    p = Pump(stores=stores, controller="ctl")
    stores["b"].rot_tail(1)
    b = p.start("b")
    p.settle()
    p.run(300)
    assert stores["b"].end_index == 3 and stores["b"].tail_cut is None and b.stats["ha_tail_cut_made_good"] == 1
    stores["c"].rot_tail(2)
    c = p.start("c")
    p.apply("c", c.promote(3, p.now, {"b"}))  # an operator's promotion, confirmed: its word
    assert c.is_leader and stores["c"].tail_cut is None


def test_a_lost_primary_hands_its_epoch_back_only_when_no_lost_backup_can_have_acknowledged_in_it() -> None:
    # (taken, holder, isr_seen): never taken, the holder holds everything
    assert hand_back_to(False, "n0", True) == "n0"
    assert hand_back_to(False, "", False) == ""  # no holder known: nobody
    assert hand_back_to(True, "n1", False) == "n1"  # nobody in sync since the takeover: its own acks are gone anyway
    assert hand_back_to(True, "n2", True) == ""  # a backup since gone may have acked: an operator's call


def test_divergent_tail_of_an_old_epoch_is_cut() -> None:
    # a leads epoch 2 with entries 0..5 of epoch 1 and 6..9 of its own; b holds 0..5, and 6, 7 of epoch 1
    # that a never had (an old primary wrote them); c holds the same history as a up to 7.
    stores = {"a": log_of([1] * 6 + [2] * 4), "b": log_of([1] * 6), "c": log_of([1] * 6 + [2] * 2)}
    for i in (6, 7):
        stores["b"].append([b"old%d" % i], 1)
    stores["b"].flush()
    for s in stores.values():
        s.save_vote(2, "a")
    p = Pump(stores=stores)
    p.run(100)
    assert p.nodes["b"].stats["ha_truncated_entries"] == 2 and p.nodes["c"].stats["ha_truncated_entries"] == 0
    assert p.nodes["a"].is_leader and p.code(p.append("a", [b"new"])) == OK
    for i in IDS:
        assert p.stores[i].end_index == 10 and p.chain(i, 10) == p.chain("a", 10)
    assert epoch_list(p.stores["b"]) == [(1, 5), (2, 10)]


def test_wiped_backup_streams_from_the_first_entry() -> None:
    stores = {"a": log_of([1] * 8), "b": log_of([1] * 8), "c": store()}  # c's disk was replaced
    p = Pump(stores=stores)
    p.run(100)
    assert p.nodes["c"].stats["ha_resets"] == 0 and p.nodes["a"].stats["ha_frames_sent"] >= 1
    assert p.code(p.append("a", [b"x"])) == OK
    assert p.bodies("c") == p.bodies("a") and p.chain("c", 8) == p.chain("a", 8)


def test_backup_behind_the_primary_begin_is_reset() -> None:
    a = log_of([1] * 40, tag=b"." * 200)  # ~10 entries per 4 KiB segment
    a.set_committed(a.end_index)
    assert a.expire(a.end_index, 1.0) > 0
    begin = a.begin_index
    b = log_of([1] * 3, tag=b"." * 200)  # the same first entries, long expired on a
    c = log_of([1] * 40, tag=b"." * 200)
    assert begin > 3
    p = Pump(stores={"a": a, "b": b, "c": c})
    p.run(100)
    assert p.nodes["b"].stats["ha_resets"] == 1 and p.nodes["c"].stats["ha_resets"] == 0
    assert p.stores["b"].begin_index == begin and p.stores["b"].begin_chain == a.begin_chain
    assert p.code(p.append("a", [b"x"])) == OK
    assert p.stores["b"].end_index == 40 and p.chain("b", 40) == p.chain("a", 40)


def test_backup_with_an_old_epoch_tail_where_the_primary_expired_is_reset() -> None:
    """a leads epoch 3 and expired every entry of epoch 1, so it shares no epoch with b, an old primary
    of epoch 2 whose own tail a never had. a can only keep b at the entry before its first, which b
    holds from epoch 2, not 3: b once kept it, and its committed log differed from a's there."""
    a = log_of([1] * 20 + [3] * 20, tag=b"." * 200)
    a.set_committed(a.end_index)
    assert a.expire(32, 1.0) == 32 and a.begin_index == 32 and epoch_list(a) == [(3, 39)]
    b = log_of([1] * 20 + [2] * 16, tag=b"!" * 200)  # (other bodies: its own epoch-2 entries differ too)
    c = log_of([1] * 20 + [3] * 20, tag=b"." * 200)
    for s in (a, b, c):
        s.save_vote(3, "a")
    p = Pump(stores={"a": a, "b": b, "c": c})
    p.run(100)
    assert p.code(p.append("a", [b"x"])) == OK
    begin = p.stores["a"].begin_index
    assert all(p.chain("b", i) == p.chain("a", i) for i in range(begin, 41))
    assert p.stores["b"].begin_index == begin and p.bodies("b") == p.bodies("a")
    assert p.nodes["b"].stats["ha_kept_entry_differs"] == 1


def test_backup_ending_where_the_primary_expired_a_segment_blank_end_is_reset() -> None:
    """b ends at the last entry of a's first segment, whose blank end a expired with the segment. a keeps
    b there and streams from its first entry, at the next segment; b's next write position was inside
    the blank, so every report mismatched and b handshook for ever. Now b starts again at a's first."""
    a = log_of([1] * 40, tag=b"." * 200)
    a.set_committed(a.end_index)
    seg = STORE.data_segment_bytes
    assert a.expire(16, 1.0) == 16 and a.begin_pos == seg  # 16 entries a segment, then a blank
    b = log_of([1] * 16, tag=b"." * 200)
    assert b.write_pos < seg
    c = log_of([1] * 40, tag=b"." * 200)
    p = Pump(stores={"a": a, "b": b, "c": c})
    p.run(300)
    assert p.code(p.append("a", [b"x"])) == OK
    assert p.stores["b"].end_index == 40 and p.chain("b", 40) == p.chain("a", 40)
    assert p.nodes["b"].stats["ha_kept_entry_differs"] == 1


def test_backup_that_expired_further_than_the_primary_goes_on_from_its_end() -> None:
    """b's log is empty and begins at a's entry 16, in the segment after a blank end (an earlier primary
    that had expired further reset it there). a has expired nothing. They share no epoch a can compare
    on, and a told b to start again at a's first entry, which b (rightly) took for a stale answer: it
    never caught up. Now a keeps b at its end (what b skipped was committed, and a holds the committed
    log) and takes b's report from the next segment, where a's entry 16 starts past the blank."""
    a = log_of([1] * 40, tag=b"." * 200)
    a.set_committed(a.end_index)
    old = log_of([1] * 40, tag=b"." * 200)  # the earlier primary, expired through entry 15
    old.set_committed(old.end_index)
    assert old.expire(16, 1.0) == 16
    b = store()
    b.reset(old.begin_index, old.begin_pos, old.begin_chain, old.begin_term)
    b.set_committed(15)
    assert (b.begin_index, b.end_index) == (16, 15)
    assert b.begin_pos == STORE.data_segment_bytes != a.end_pos(15)  # past the blank: a's entry 16 is there
    c = log_of([1] * 40, tag=b"." * 200)
    p = Pump(stores={"a": a, "b": b, "c": c})
    p.run(300)
    assert p.code(p.append("a", [b"x"])) == OK
    assert p.stores["b"].end_index == 40 and p.chain("b", 40) == p.chain("a", 40)
    assert p.nodes["a"].primary.backups["b"].streaming  # type: ignore[union-attr]


# -- epochs: fencing, restarts, promotion ----------------------------------------------------------
def test_old_primary_is_fenced_by_a_higher_epoch_and_its_tail_cut() -> None:
    p = started()
    assert p.code(p.append("a", [b"x"])) == OK
    p.cut.add("a")  # a loses its backups: its next append is written and durable, never acked
    rid = p.append("a", [b"lost1", b"lost2"])
    assert p.stores["a"].end_index == 2 and p.stores["a"].durable_index == 2 and p.code(rid) is None
    p.apply("b", p.nodes["b"].promote(2, p.now, isr={"c"}))  # the controller's (or operator's) choice
    p.apply("c", p.nodes["c"].follow(2, "b", p.now))
    p.run(100)
    assert p.code(p.append("b", [b"y"])) == OK
    a = p.nodes["a"]
    assert a.is_leader and a.epoch == 1  # it has heard of nothing yet
    p.cut.clear()
    p.run(100)  # b's heartbeat reaches a: epoch 2 > 1
    assert p.code(rid) == int(ResponseCode.TERM_CHANGED)  # its pending append: outcome unknown
    assert a.role == Role.FOLLOWER and (a.epoch, a.leader_id) == (2, "b") and a.store.load_vote() == (2, "b")
    assert a.stats["ha_truncated_entries"] == 2 and p.bodies("a") == [b"x", b"y"]
    for _ in range(3):  # and it never takes a write again
        assert p.code(p.append("a", [b"z"])) == int(ResponseCode.NOT_LEADER)
        assert p.done[p._rid].leader_id == "b"
        p.run(500)
    assert p.bodies("a") == [b"x", b"y"] and p.nodes["b"].primary.isr == {"a", "c"}  # type: ignore[union-attr]


def test_stale_primary_learns_the_epoch_from_a_member_answering_its_message() -> None:
    p = started()
    p.cut.add("a")
    p.apply("b", p.nodes["b"].promote(2, p.now, isr={"c"}))
    p.apply("c", p.nodes["c"].follow(2, "b", p.now))
    p.drop = lambda m: m.sender == "b" and m.target == "a"  # a never hears b itself
    p.cut.clear()
    p.run(200)  # a's heartbeat to c is answered with epoch 2 and its primary
    assert p.nodes["a"].role == Role.FOLLOWER and p.nodes["a"].leader_id == "b"
    assert p.nodes["c"].stats["stale_epoch_messages"] >= 1


def test_restarted_primary_takes_writes_once_a_backup_follows_its_epoch() -> None:
    p = started()
    assert p.code(p.append("a", [b"x"])) == OK
    p.cut.add("a")
    a = p.crash("a")
    assert a.role == Role.LEADER and not a.is_leader
    rid = p.append("a", [b"y"])
    assert p.code(rid) == int(ResponseCode.LEADER_NOT_READY) and p.stores["a"].end_index == 0
    p.cut.clear()
    p.run(p.cfg.ha_heartbeat_interval_ms + 10)
    assert a.is_leader
    assert p.code(p.append("a", [b"y"])) == OK and p.bodies("b") == p.bodies("c") == [b"x", b"y"]


def test_restarted_primary_with_a_controller_waits_for_it() -> None:
    p = Pump(controller="ctl")
    p.nodes["a"].confirm({"b", "c"})
    p.run(100)
    assert p.code(p.append("a", [b"x"])) == OK
    a = p.crash("a")
    p.run(500)  # backups follow epoch 1 and report, but only the controller confirms
    assert not a.is_leader and p.code(p.append("a", [b"y"])) == int(ResponseCode.LEADER_NOT_READY)
    p.apply("a", a.promote(2, p.now, {"b", "c"}))  # the controller elects it again (server/controller.py)
    p.run(100)  # the backups learn epoch 2 from its messages
    assert a.is_leader and p.nodes["b"].epoch == p.nodes["c"].epoch == 2
    assert p.code(p.append("a", [b"y"])) == OK and p.bodies("b") == p.bodies("c") == [b"x", b"y"]


def test_an_elected_primary_commits_nothing_before_its_takeover_is_recorded() -> None:
    """The controller promotes unconfirmed and confirms once the record holds the takeover: an epoch whose
    takeover was never recorded acknowledged nothing, so it may go back to the last primary that took one."""
    p = Pump(controller="ctl")
    a, b, c = (p.nodes[i] for i in IDS)
    a.confirm({"b", "c"})
    p.run(100)
    assert p.code(p.append("a", [b"x"])) == OK
    p.cut.add("a")
    p.apply("b", b.promote(2, p.now, {"c"}, confirmed=False))
    p.apply("c", c.follow(2, "b", p.now))
    p.run(300)  # c follows and acks epoch 2, yet b neither takes nor commits a write
    assert not b.is_leader and p.code(p.append("b", [b"y"])) == int(ResponseCode.LEADER_NOT_READY)
    assert p.stores["b"].end_index == 0
    b.confirm({"c"})  # the takeover is recorded
    assert b.is_leader and p.code(p.append("b", [b"y"])) == OK and p.bodies("c") == [b"x", b"y"]


@pytest.mark.parametrize("controller", [None, "ctl"])
def test_primary_with_a_full_disk_names_an_in_sync_backup_for_the_controller_to_elect(controller: str | None) -> None:
    """With a controller, an append the primary's full disk refused is answered LEADER_TRANSFERRING (nothing
    written; the client retries at the next primary) and `hand_off_to` names an in-sync backup, the furthest
    along, for the controller to elect (server/controller.py). Without one nobody could elect it: DISK_FULL.
    Once an append fits again the primary stays."""
    stores: dict[str, MemoryStore] = {i: FillableStore(STORE) for i in IDS}
    p = Pump(stores=stores, **({"controller": controller} if controller else {}))
    a = p.nodes["a"]
    if controller:
        a.confirm({"b", "c"})
    p.run(100)
    assert p.code(p.append("a", [b"x"])) == OK
    stores["a"].full = True  # type: ignore[attr-defined]
    end = stores["a"].end_index
    c = p.done[p.append("a", [b"z"])]
    assert stores["a"].end_index == end  # nothing written either way
    primary = a.primary
    assert primary is not None
    if controller is None:
        assert c.code == int(ResponseCode.DISK_FULL) and primary.hand_off_to is None
        return
    assert c.code == int(ResponseCode.LEADER_TRANSFERRING) and "nothing was written" in c.reason
    first = primary.hand_off_to
    assert first in ("b", "c")
    other = "b" if first == "c" else "c"
    p.cut.add(first)  # it falls silent: only the other, still heard, may take over
    p.run(1100)
    p.append("a", [b"z"])
    assert primary.hand_off_to == other
    stores["a"].full = False  # type: ignore[attr-defined]
    p.cut.clear()
    p.run(100)
    assert p.code(p.append("a", [b"w"])) is not None and primary.hand_off_to is None


def test_promoted_backup_answers_producer_duplicates_from_its_log() -> None:
    p = started()
    assert p.code(p.append("a", [b"p0"], producer=9, seq=0)) == OK
    rid = p.append("a", [b"p1a", b"p1b"], producer=9, seq=1)
    first = p.done[rid].first_index
    assert p.code(rid) == OK  # ... but say the answer never reached the client, which retries
    p.cut.add("a")
    p.stores["b"].crash()  # b restarts: its producer table is rebuilt from the log
    b = p.start("b")
    assert 9 in b.producers.producers
    p.apply("b", b.promote(2, p.now, isr={"c"}))
    p.apply("c", p.nodes["c"].follow(2, "b", p.now))
    p.run(100)
    end = p.stores["b"].end_index
    retry = p.append("b", [b"p1a", b"p1b"], producer=9, seq=1)
    c = p.done[retry]
    assert c.code == OK and (c.first_index, c.last_index, c.term) == (first, first + 1, 1)
    assert p.stores["b"].end_index == end and b.stats["append_duplicates"] == 1
    assert p.code(p.append("b", [b"p0"], producer=9, seq=0)) == OK and p.stores["b"].end_index == end
    assert p.code(p.append("b", [b"p3"], producer=9, seq=3)) == int(ResponseCode.OUT_OF_ORDER_SEQUENCE)
    assert p.code(p.append("b", [b"p2"], producer=9, seq=2)) == OK and p.stores["b"].end_index == end + 1


# -- found by the simulator: python -m quorumlog.sim --mode pb --seeds N fails with the fix undone --
def test_sync_append_is_not_acknowledged_by_the_primary_alone() -> None:
    """Seed 1: once the in-sync set shrank to nothing, "acked by every in-sync backup" held vacuously,
    so appends written while backups were in sync were answered SUCCESS with no backup holding them."""
    p = started(ha_ack_timeout_ms=200)
    p.cut |= {"b", "c"}
    rid = p.append("a", [b"x"])
    p.run(300)  # both backups left the in-sync set; the entry is durable on a alone
    a = p.nodes["a"]
    assert a.primary is not None and a.primary.isr == set() and p.stores["a"].durable_index == 0
    assert p.code(rid) is None and p.stores["a"].committed_index == -1
    p.run(RAFT.max_wait_ack_ms)
    assert p.code(rid) == int(ResponseCode.FLUSH_SLAVE_TIMEOUT)
    p.cut.clear()
    p.run(300)  # a backup is back in sync: the entry commits with it
    assert a.primary.isr == {"b", "c"} and p.stores["a"].committed_index == 0 == p.stores["b"].committed_index


def test_joining_backup_leaves_the_commit_set_only_through_the_controller() -> None:
    """Seed 0: with a controller, a joining backup (counted for commit, its addition asked for) that fell
    silent was dropped without a record while the request adding it could still land (an answer lost, a
    retry): the recorded set then held a backup lacking acknowledged entries, which may be promoted."""
    p = Pump(controller="ctl", ha_ack_timeout_ms=200)
    a = p.nodes["a"]
    a.confirm({"b"})
    p.run(50)
    pa = a.primary
    assert pa is not None and pa.isr_joining == {"c"} and pa.wanted_isr() == {"b", "c"}
    p.cut.add("c")  # the controller records {b, c}, but its answer is lost; then c falls silent
    p.run(300)
    rid = p.append("a", [b"x"])
    assert "c" in pa.commit_set and p.code(rid) is None and p.stores["a"].committed_index == -1
    a.confirm({"b", "c"})  # the answer arrives at last: c leaves like any in-sync backup
    p.run(10)
    assert pa.wanted_isr() == {"b"} and p.code(rid) is None
    a.confirm({"b"})
    p.run(10)
    assert p.code(rid) == OK and pa.commit_set == {"b"}


def test_with_a_controller_only_recorded_backups_count_towards_min_in_sync() -> None:
    """Issue fault 2: b was elected with an empty recorded set, c joined, and b acknowledged an entry with
    c's ack alone; b's disk was then lost before the change adding c was recorded, the controller saw an
    epoch in which nobody was ever in sync and handed it back to the previous primary, whose log ended
    before the entry: c was cut back and the acknowledged entry was gone. A joiner still acks before an
    entry commits, but only a backup the controller recorded makes a SYNC append possible."""
    p = Pump(controller="ctl", ha_ack_timeout_ms=200)
    a = p.nodes["a"]
    a.confirm(set())  # elected with nobody recorded in sync
    p.run(50)
    pa = a.primary
    assert pa is not None and pa.isr_joining == {"b", "c"} and pa.wanted_isr() == {"b", "c"}
    rid = p.append("a", [b"x"])
    assert p.code(rid) == int(ResponseCode.SLAVE_NOT_AVAILABLE) and p.stores["a"].end_index == -1
    a.confirm({"c"})  # the controller recorded c: now it counts
    rid = p.append("a", [b"y"])
    p.run(20)
    assert p.code(rid) == OK and all(p.stores[i].durable_index == 0 for i in ("b", "c"))  # (b acked too)


def test_backup_joins_the_in_sync_set_only_holding_the_log_the_primary_started_with() -> None:
    """Seed 8: a new primary's commit index can be behind what was acknowledged (a restart reloads it
    from a checkpoint), so "holds everything committed" let an empty backup join the in-sync set, and the
    controller could then promote it. A joiner must hold the log the primary started its epoch with, as
    in Kafka (the leader epoch's start offset)."""
    p = Pump(controller="ctl", ha_ack_timeout_ms=200)
    a = p.nodes["a"]
    a.confirm({"b", "c"})
    p.cut.add("c")
    p.run(300)
    assert a.primary is not None and a.primary.wanted_isr() == {"b"}
    a.confirm({"b"})  # the controller recorded c's leaving
    assert p.code(p.append("a", [b"x"])) == OK
    p.cut = {"a"}  # a is gone; b restarts, and its commit index with it (no checkpoint yet)
    b = p.crash("b")
    assert p.stores["b"].end_index == 0 and p.stores["b"].committed_index == -1
    p.apply("b", b.promote(2, p.now, isr=set()))  # the controller elects b; c is not in the recorded set
    p.apply("c", p.nodes["c"].follow(2, "b", p.now))
    p.hold.add("c")  # c writes what it is streamed, but has acked none of it yet
    p.run(20)
    assert b.primary is not None and b.primary.backups["c"].streaming and p.stores["c"].durable_index == -1
    assert b.primary.wanted_isr() is None  # c lacks entry 0, acknowledged in epoch 1
    p.hold.clear()
    p.flush("c")
    p.run(10)
    assert b.primary.wanted_isr() == {"c"}


def test_commit_never_ends_inside_a_request() -> None:
    """Seed 58: frames end anywhere, so acks, and with them the commit, could end inside a producer's
    multi-entry request; a backup promoted holding only its start cut it as a torn tail (cut_partial_tail),
    rewriting entries others had committed. A request commits whole."""
    p = started(raft=replace(RAFT, push_batch_entries=2), ha_ack_timeout_ms=200)
    p.cut.add("c")
    p.run(300)  # c left the in-sync set: b's acks alone commit

    def second_frame_to_b(m: HaMessage) -> bool:
        return isinstance(m, HaTransfer) and m.target == "b" and FRAME_HEADER.unpack_from(m.frame)[0] > 0

    p.drop = second_frame_to_b
    rid = p.append("a", [b"r0", b"r1", b"r2"], producer=7, seq=0)
    a = p.nodes["a"].primary
    assert a is not None and a.isr == {"b"} and a.backup_acked("b") == 1  # the frame of entries 0, 1
    assert p.stores["a"].committed_index == -1 and p.code(rid) is None
    p.drop = lambda m: False
    p.run(300)  # b handshakes again and gets the rest
    assert p.code(rid) == OK and p.stores["a"].committed_index == 2


def test_backup_ignores_a_truncate_answering_an_earlier_handshake() -> None:
    """Seed 7 with --faults all: a backup applied any truncate arriving while it waited for one, so a
    late answer to an earlier handshake (a retry, a duplicate) cut entries it had acked since, even
    committed ones, on a member of the in-sync set."""
    p = started()
    assert p.code(p.append("a", [b"x", b"y"])) == OK
    p.run(20)  # the commit reaches the backups
    first_frame = next(m for m in p.sent if isinstance(m, HaTransfer) and m.target == "b" and len(m.frame) > 12)
    first_truncate = next(m for m in p.sent if isinstance(m, HaTruncate) and m.target == "b")
    assert first_truncate.keep_index == -1
    b = p.nodes["b"]
    assert b.backup is not None and p.stores["b"].committed_index == 1
    p.apply("b", b.step(first_frame, p.now))  # a frame again: not where its log ends, so it handshakes again
    assert not b.backup.streaming
    p.apply("b", b.step(first_truncate, p.now))  # ... and the answer to its first handshake arrives late
    assert p.bodies("b") == [b"x", b"y"] and p.stores["b"].committed_index == 1
    assert b.stats["ha_stale_truncates"] == 1
    p.run(300)  # the answer to its latest handshake: streaming again
    assert b.backup.streaming and p.code(p.append("a", [b"z"])) == OK and p.bodies("b") == [b"x", b"y", b"z"]


def test_backup_follows_a_forced_promotion_that_lost_committed_entries() -> None:
    """The stale-truncate guard must not assume committed entries are in every later primary: a forced
    promotion (an operator's, outside the in-sync set) may lack some, and the backups must follow it."""
    p = started(ha_ack_timeout_ms=200)
    assert p.code(p.append("a", [b"x"])) == OK
    p.cut.add("c")
    p.run(300)  # c left the in-sync set
    assert p.code(p.append("a", [b"y"])) == OK
    p.run(50)
    assert p.stores["b"].committed_index == 1 and p.bodies("c") == [b"x"]
    p.cut = {"a"}
    p.apply("c", p.nodes["c"].promote(2, p.now, isr={"b"}))  # forced: c lacks y
    p.apply("b", p.nodes["b"].follow(2, "c", p.now))
    p.run(300)
    b = p.nodes["b"]
    assert b.stats["ha_stale_truncates"] == 0 and b.stats["ha_truncated_entries"] == 1
    assert b.backup is not None and b.backup.streaming and p.bodies("b") == [b"x"]
    assert p.code(p.append("c", [b"z"])) == OK and p.bodies("b") == [b"x", b"z"]


def test_backup_notices_a_lost_last_frame_from_the_next_heartbeat() -> None:
    """Seed 86 with --faults all: a lost frame was noticed only when a later frame arrived, so after the
    last one was lost the backup stayed in sync acking nothing new, and nothing committed again."""
    p = started()
    p.drop = lambda m: isinstance(m, HaTransfer) and m.target == "b" and len(m.frame) > FRAME_HEADER.size
    rid = p.append("a", [b"x"])
    p.drop = lambda m: False
    assert p.code(rid) is None and p.stores["b"].end_index == -1
    p.run(2 * p.cfg.ha_heartbeat_interval_ms)  # a heartbeat names the offset a sent up to: b asks again
    assert p.nodes["b"].stats["ha_frames_out_of_order"] == 1
    assert p.code(rid) == OK and p.bodies("b") == [b"x"]


def test_a_burst_past_max_in_sync_lag_does_not_drop_a_backup_that_keeps_up() -> None:
    """A backup more than max_in_sync_lag bytes behind leaves the set only when it stays behind for
    ha_ack_timeout_ms: a burst of writes puts every backup behind for a moment, and dropping them then
    refused the next SYNC appends (SLAVE_NOT_AVAILABLE) for no reason (found by the 1 KiB benchmark)."""
    p = started(max_in_sync_lag=256)
    primary = p.nodes["a"].primary
    assert primary is not None
    p.hold.update({"b", "c"})  # the backups fall behind for a moment: their flushes wait
    rid = p.append("a", [b"x" * 500, b"y" * 500])
    p.run(50)  # beyond the lag limit, but for far less than the ack timeout
    assert primary.isr == {"b", "c"} and not primary.isr_leaving
    p.hold.clear()
    p.flush("b")
    p.flush("c")
    p.run(20)
    assert p.code(rid) == OK and primary.available()
    # Behind for longer than the ack timeout: it leaves.
    p.hold.add("c")
    p.append("a", [b"w" * 600])
    p.run(1200)
    assert "c" in primary.isr_leaving or "c" not in primary.isr


def test_promotion_epochs_are_above_everything_seen_and_never_shared_by_two_targets() -> None:
    from quorumlog.ha.epochs import promotion_epoch

    members = ["n2", "n0", "n1"]
    for seen in range(0, 40):
        epochs = {t: promotion_epoch(seen, members, t) for t in members}
        assert all(e > seen for e in epochs.values())
        assert len(set(epochs.values())) == 3
    # Two operators promoting at once from different views still pick different epochs for different targets.
    a = {promotion_epoch(s, members, "n1") for s in range(50)}
    b = {promotion_epoch(s, members, "n2") for s in range(50)}
    assert not a & b


def test_primary_named_by_a_peer_commits_nothing_before_the_controller_confirms_it() -> None:
    """Seed 130524 with --faults all (a controller's hand-off of the time): a member learned its election
    from a backup's handshake before the controller's record reached it, and committed with the in-sync
    set of its previous epoch. The record's in-sync member lacked what it committed; the controller then
    elected that member, and committed entries were gone. A primary now commits only once confirmed,
    with the recorded set."""
    p = Pump(controller="ctl")
    a, b, c = (p.nodes[i] for i in IDS)
    a.confirm({"b", "c"})
    p.run(100)
    assert p.code(p.append("a", [b"x"])) == OK
    p.cut.add("a")  # a is unheard: the controller elects b in epoch 2 with c in sync
    p.apply("b", b.promote(2, p.now, {"c"}))
    p.apply("c", c.follow(2, "b", p.now))
    p.run(100)
    assert p.code(p.append("b", [b"y"])) == OK
    p.cut.clear()  # b is unheard: c is elected in epoch 3 and a, back, joins its in-sync set with b
    p.apply("c", c.promote(3, p.now, {"b"}))
    p.apply("a", a.follow(3, "c", p.now))
    p.apply("b", b.follow(3, "c", p.now))
    p.run(200)
    c.confirm({"a", "b"})
    assert p.code(p.append("c", [b"z"])) == OK
    committed = p.stores["c"].committed_index
    # c writes w; it reaches b, not a, so it does not commit
    p.drop = lambda m: (m.sender, m.target) in {("c", "a"), ("a", "c")}
    rid = p.append("c", [b"w"])
    assert p.code(rid) is None and p.bodies("b") == [b"x", b"y", b"z", b"w"] and p.bodies("a") == [b"x", b"y", b"z"]
    # c is unheard by the controller, which elects b in epoch 4 with a in sync. c hears of it first and
    # follows b; b learns its election from c's handshake, the record has not reached it yet.
    p.apply("c", c.follow(4, "b", p.now))
    p.run(100)
    assert b.epoch == 4 and b.primary is not None and not b.is_leader
    assert p.stores["b"].committed_index == committed, "committed before the record named its in-sync set"
    b.confirm({"a"})  # the record arrives: w commits once a holds it too
    p.run(100)
    assert b.is_leader and p.bodies("a")[-1] == b"w" and p.stores["b"].committed_index == committed + 1


def test_a_backup_that_cuts_a_damaged_entry_is_recovering_with_a_controller_and_streams_it_again() -> None:
    """A read or the scrub found an entry of backup b damaged: b cuts its log there. Entries it acknowledged
    are gone until streamed again, so with a controller it is `recovering` (never elected, out of the
    in-sync set) until the controller clears it, as after a replaced disk."""
    p = Pump(controller="ctl")
    p.nodes["a"].confirm({"b", "c"})
    p.run(100)
    assert all(p.code(p.append("a", [b"x%d" % i])) == OK for i in range(5))
    b = p.nodes["b"]
    assert b.caught_up(1, "a")
    p.apply("b", b.report_corruption(CorruptEntryError("bad body crc", index=2), p.now))
    assert b.recovering and p.stores["b"].end_index == 1
    assert not b.caught_up(1, "a")  # (what the primary had committed when b first streamed is no measure now)
    p.run(300)
    assert p.bodies("b") == p.bodies("a") == [b"x%d" % i for i in range(5)] and b.caught_up(1, "a")


def test_a_damaged_primary_with_a_controller_asks_for_a_backup_in_its_place_and_cuts_once_it_follows() -> None:
    """The primary's copy is the one its backups are made from: it names an in-sync backup for the controller
    to elect (as for a full disk) and keeps its log meanwhile; once it follows the new primary it cuts at
    the damage, is `recovering`, and is streamed the rest again. Without a controller it waits for an
    operator's promotion of a backup, and cuts once it follows."""
    p = Pump(controller="ctl")
    a = p.nodes["a"]
    a.confirm({"b", "c"})
    p.run(100)
    assert all(p.code(p.append("a", [b"x%d" % i])) == OK for i in range(5))
    p.apply("a", a.report_corruption(CorruptEntryError("bad body crc", index=2), p.now))
    p.run(100)
    assert a.primary is not None and a.primary.hand_off_to in ("b", "c")
    assert p.code(p.append("a", [b"x5"])) == OK and a.primary.hand_off_to is not None  # an append fits: still asks
    assert p.stores["a"].end_index == 5
    target = a.primary.hand_off_to
    p.apply(target, p.nodes[target].promote(2, p.now, {"b", "c"} - {target}))  # the controller elects it
    p.run(300)
    assert a.role == Role.FOLLOWER and a.recovering and a.damaged_at is None
    assert p.bodies("a") == p.bodies(target) == [b"x%d" % i for i in range(6)]

    plain = started()  # without a controller: reported, nothing else
    pa = plain.nodes["a"]
    assert plain.code(plain.append("a", [b"y"])) == OK
    plain.apply("a", pa.report_corruption(CorruptEntryError("bad body crc", index=0), plain.now))
    plain.run(100)
    assert pa.is_leader and pa.primary is not None and pa.primary.hand_off_to is None and not pa.recovering
    plain.apply("b", plain.nodes["b"].promote(2, plain.now))  # an operator promotes b: a follows it, and cuts
    plain.run(300)
    assert pa.role == Role.FOLLOWER and pa.damaged_at is None and plain.bodies("a") == plain.bodies("b") == [b"y"]


def test_a_replaced_primary_that_leads_again_because_every_log_is_empty_must_be_elected_in_a_new_epoch() -> None:
    """Seed 190205 of the primary/backup simulator (`--faults all`): primary a of epoch 2 streamed entries
    nobody acknowledged (its backups' disks were full), then its disk was replaced. Back, it learned epoch 2
    from a backup's handshake, found every other log empty and led again: in epoch 2, where frames of its
    earlier incarnation may still be on their way to a backup, which cannot tell them from the new ones.
    It leads again by its own word, so only an election above epoch 2 confirms it (`own_epoch`)."""
    p = Pump(controller="ctl")
    a = p.nodes["a"]
    p.apply("a", a.promote(2, p.now, {"b", "c"}))
    p.run(100)
    assert p.nodes["b"].epoch == p.nodes["c"].epoch == 2 and p.bodies("b") == p.bodies("c") == []
    p.stores["a"] = store()  # a replaced disk
    a = p.start("a")
    assert a.recovering and a.epoch == 1 and a.primary is None
    p.run(3000)  # the backups hear nothing from it and handshake again: epoch 2, and empty logs
    assert a.stats["ha_withheld_primary_cleared"] == 1 and a.primary is not None and a.epoch == 2
    assert a.own_epoch == 2 and not a.confirmed  # the record's epoch 2 does not confirm it: an election above
    p.apply("a", a.promote(3, p.now, {"b", "c"}))  # what the controller does when asked (server/controller.py)
    p.run(100)
    assert a.is_leader and p.code(p.append("a", [b"x"])) == OK and p.bodies("b") == [b"x"]
    assert p.nodes["b"].epoch == 3


def test_a_restarted_backup_ignores_an_answer_to_a_handshake_of_its_earlier_incarnation() -> None:
    """Seed 260073 of the primary/backup simulator (`--faults all`): backup b of epoch 2 handshook with
    entries 0..4 of epoch 1, was streamed 5..9 (also of epoch 1) and committed them, then crashed. A paused
    primary answered b's old handshake only once b was back: "keep up to 4". Restarted, b could not tell
    that 5..9 came from this primary (they are of an older epoch), took the answer, and cut entries the
    group had committed. A truncate names the handshake it answers, and b takes only an answer to its
    current log."""
    stores = {"a": log_of([1] * 10), "b": log_of([1] * 5), "c": log_of([1] * 10)}
    for s in stores.values():
        s.save_vote(2, "a")
    p = Pump(stores=stores)
    p.run(200)
    first = [m for m in p.sent if isinstance(m, HaTruncate) and m.target == "b"]
    assert first and first[0].keep_index == 4  # the answer to b's handshake of entries 0..4
    b = p.stores["b"]
    assert b.end_index == 9 and b.committed_index == 9
    b.checkpoint()
    nb = p.crash("b")
    assert b.end_index == 9 and b.committed_index == 9 and not nb.backup.streaming  # type: ignore[union-attr]
    p.apply("b", nb.step(first[0], p.now))  # the late answer to the earlier incarnation
    assert b.end_index == 9 and b.committed_index == 9
    assert nb.stats["ha_stale_truncates"] == 1
    p.run(500)  # the answer to its own handshake: it streams again from 9
    assert nb.backup.streaming and b.end_index == 9 and p.bodies("b") == p.bodies("a")  # type: ignore[union-attr]
    assert p.code(p.append("a", [b"y"])) == OK and p.bodies("b") == p.bodies("a")
