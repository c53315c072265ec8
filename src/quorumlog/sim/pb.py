"""A seeded simulation of a primary/backup group (ha/): HaNodes over MemoryStores, a virtual clock, the
Raft simulator's network (FIFO per link as TCP is, unless "reorder"), lagging flushes, crashes (losing
the unflushed tail), pauses, full disks, expiry, replaced disks, damage found on one member ("rot": a
backup cuts there, a primary hands off, then cuts), rot at rest in a crashed member's newest entries
(its recovery cuts them as a torn tail: "tail"), idempotent SYNC clients, and the controller as nodes run it
(pb_ctl.py): each member hosts a real RaftNode of the controller group, whose log expires, and the
controller core the server ticks.

Checked every step: (a) an append answered SUCCESS was durable on min_in_sync backups, is in the committed
log at its index, term, position and body, and is held by the recorded primary and in-sync set (running or
crashed); (b) one confirmed primary per epoch, the recorded one; (c) committed prefixes agree byte for byte
(chain CRC), with the Raft checker's log matching and leader completeness; (d) with a controller, an
append is answered SUCCESS only in an epoch whose takeover was recorded first; (e) the controller group's
own Raft invariants. After each heal, all caught up.

    python -m quorumlog.sim --mode pb --seeds 0:1000 --steps 2000 [--nodes 5] [--no-controller] [--faults all]
"""

from __future__ import annotations

import random
from collections import Counter, deque
from dataclasses import dataclass, field, replace
from typing import Any

from ..config import HaConfig, RaftConfig, StoreConfig
from ..core.appends import AppendRequest
from ..core.driver import Driver
from ..core.ready import APPEND, Completion, Ready
from ..errors import CorruptEntryError, ResponseCode
from ..ha.controller_core import ControllerProposal
from ..ha.epochs import hand_back_to
from ..ha.messages import FRAME_HEADER, HaHandshake, HaTransfer, unpack_epochs
from ..ha.node import HaNode
from ..ha.record import Assignment
from . import pb_members
from .checker import Checker, InvariantViolation, chain_at
from .clients import Proposal, SimProducer
from .cluster import SIM_MEMBER_TIMEOUT_MS, SIM_RAFT, SIM_RETENTION_MS, SIM_RETRY_MS
from .network import LinkFaults, Network, partition_links
from .nodes import FillableStore, start_persist
from .pb_checker import PbChecker
from .pb_ctl import CTL, CTL_STORE, CtlReplica, ReferenceRecord
from .runner import SeedResult, run_cluster
from .timeline import format_trace, window_phase

GROUP = "pb"
PB_FAULTS = ("drop", "delay", "partition", "crash", "pause", "disk", "full", "expire", "wipe", "rot", "tail",
             "ctlexpire", "members")
EXTRA_FAULTS = ("reorder", "dup")  # beyond what TCP does: the protocol must stay safe, if slower
POLL_MS = 50  # members tick their controller core this often

PB_HA = HaConfig(replication="primary-backup", primary="n0", controller=CTL, min_in_sync=1,  # fast timers
                 max_in_sync_lag=32 * 1024, ha_transfer_batch_bytes=2048, ha_heartbeat_interval_ms=40,
                 ha_ack_timeout_ms=300, failover_timeout_ms=400)
PB_RAFT = RaftConfig(max_pending_requests=32, max_wait_ack_ms=400, push_batch_entries=8, push_batch_bytes=2048)
PB_STORE = StoreConfig(data_segment_bytes=16 * 1024, index_segment_bytes=32 * 1024, max_body_bytes=4096,
                       file_reserved_hours=0)  # entries expire as soon as "expire" allows


@dataclass(slots=True)
class PbConfig:
    nodes: int = 3
    steps: int = 1000
    step_ms: int = 10
    faults: tuple[str, ...] = PB_FAULTS
    controller: bool = True
    window_steps: int = 500
    trace_len: int = 200
    ha: HaConfig = PB_HA
    raft: RaftConfig = PB_RAFT


@dataclass(slots=True)
class Member:
    id: str
    store: FillableStore
    node: HaNode | None = None
    driver: Driver | None = None
    incarnation: int = 0
    down_until: int | None = None
    paused_until: int | None = None
    flush_at: int | None = None
    persist_at: int | None = None  # when its epoch and primary (held by the driver meanwhile) become durable
    backlog: list[Any] = field(default_factory=list)
    ctl: CtlReplica | None = None  # its replica of the controller group (None: down, or no controller)
    ctl_store: FillableStore = field(default_factory=lambda: FillableStore(CTL_STORE, defer_stable=True))
    full_until: int | None = None  # the "full" fault: its disk has space again then
    rot_pending: bool = False  # the "rot" fault struck it as primary: it cuts once it follows another
    resets_seen: int = 0  # its node's log resets the checker has heard of


class PbCluster:
    def __init__(self, seed: int, cfg: PbConfig) -> None:
        self.seed, self.cfg = seed, cfg
        self.rng, self.faults = random.Random(seed), set(cfg.faults)
        # The faults added later draw from streams of their own: the other faults' runs stay as they were.
        self.full_rng = random.Random(seed + (1 << 32))
        self.expire_rng = random.Random(seed + (2 << 32))
        self.wipe_rng = random.Random(seed + (3 << 32))
        self.rot_rng = random.Random(seed + (4 << 32))
        self.tail_rng = random.Random(seed + (5 << 32))
        self.persist_rng = random.Random(seed + (6 << 32))
        self.commit_history: deque[tuple[int, int]] = deque([(0, -1)])  # (time, committed index seen)
        self.ids = [f"n{i}" for i in range(cfg.nodes)]
        self.ha = replace(cfg.ha, primary=self.ids[0], controller=CTL if cfg.controller else None)
        self.time = self.step_no = self.partition_until = 0
        self.net = Network(random.Random(self.rng.getrandbits(64)))
        self.net.fifo = True
        self.trace: deque[tuple[int, str, object]] = deque(maxlen=cfg.trace_len)
        self.stats: Counter[str] = Counter()
        self.ctl_rng = random.Random(seed + (7 << 32))  # the controller replicas' election timers
        self.ctl_expire_rng = random.Random(seed + (8 << 32))
        self.members_rng = random.Random(seed + (9 << 32))  # the "members" fault (pb_members.py)
        # The controller group's own Raft checks, and the record it committed (the ground truth of the checks).
        self.ctl_checker = Checker(self.ids, lambda i: self.members[i].ctl_store if self.members[i].ctl else None)
        self.ctl_checker.stopped_store = lambda i: self.members[i].ctl_store
        self.reference = ReferenceRecord(Assignment(1, self.ids[0], frozenset(self.ids[1:])))
        self.ctl_history: deque[tuple[int, int]] = deque([(0, -1)])  # (time, controller commit seen)
        self.members: dict[str, Member] = {i: Member(i, FillableStore(PB_STORE, defer_stable=True)) for i in self.ids}
        self.outstanding: dict[tuple[str, int, int], Proposal] = {}
        self.producers = [SimProducer(pid) for pid in (5, 1 << 40, (1 << 63) - 1)]
        self.next_rid = 1
        self.heal_started: int | None = None
        self.checker = PbChecker(self)
        for m in self.members.values():
            self._start(m)

    # -- members -------------------------------------------------------------------------------
    def _start(self, m: Member) -> None:
        i = m.id
        node = m.node = HaNode(i, GROUP, self.ids, m.store, self.ha, self.cfg.raft, self.time)
        m.driver = Driver(node, self._send, lambda c: self._complete(i, c),
                          lambda ch: self._trace(i, f"{ch.role.name} epoch {ch.term} primary {ch.leader_id}"),
                          lambda: self._start_flush(m), lambda: self._start_persist(m))
        m.incarnation, m.down_until, m.resets_seen = m.incarnation + 1, None, 0
        if self.cfg.controller:
            m.ctl = CtlReplica(i, self.ids, m.ctl_store, self.ha, SIM_RAFT, random.Random(self.ctl_rng.getrandbits(64)),
                               self._send, lambda term: self.ctl_checker.on_leader(i, term), self._start_flush,
                               self._start_persist)

    def crash(self, m: Member, until: int) -> None:
        may_rot = self._one_storage_fault(m)  # (judged while it runs: the primary's wish for the record counts)
        m.node = m.driver = m.flush_at = m.persist_at = m.paused_until = None
        self.stats["crashes_losing_an_epoch"] += m.store.stable_unsaved
        if m.ctl is not None:
            if "ctlexpire" in self.faults and self.ctl_expire_rng.random() < 0.3:
                # Its controller log expired up to its last snapshot just before the crash (record.py's cap,
                # what a long-running node reaches): it restarts with a log that starts past index 0.
                self.stats["controller_logs_expired_at_a_crash"] += m.ctl_store.expire(m.ctl.expiry_cap(), 0.0) > 0
            m.ctl = None
            self.stats["crashes_losing_a_controller_term"] += m.ctl_store.stable_unsaved
            m.ctl_store.crash()
        m.backlog, m.down_until, m.rot_pending = [], until, False  # (a real store's scrub finds it again)
        m.store.crash()
        self.outstanding = {k: p for k, p in self.outstanding.items() if k[0] != m.id}  # outcome unknown
        self.stats["crashes"] += 1
        self._trace(m.id, f"CRASH until {until}; durable end {m.store.end_index}")
        s, tr = m.store, self.tail_rng
        if ("tail" in self.faults and self.cfg.controller and tr.random() < 0.2 and s.checkpointed_end < s.end_index
                and may_rot):  # rot at rest in its newest entries: cut as a torn tail
            self.checker.tail_cut[m.id] = s.end_index
            s.rot_tail(tr.randint(s.checkpointed_end + 1, s.end_index))
            self.stats["tail_cuts"] += 1
            self._trace(m.id, f"TAIL: recovery will cut from entry {s.tail_cut} as torn")

    def _no_copy_lost(self) -> bool:
        """No member lacks what it acknowledged, nor is about to: one lost copy at a time (wipe, rot, tail),
        in the controller group too (as the Raft simulator's wipes: a second lost store while another
        recovers can leave it without a majority that holds what it committed). A recovery is over once its
        end is durable: a member whose cleared flag a crash loses recovers again (seed 100384: it then asked
        to leave the in-sync set while the primary's disk was being replaced, and nobody could lead)."""
        return not (self.checker.damaged or self.checker.tail_cut or self.ctl_checker.damaged) and not any(
            o.store.recovering or o.store.recovering_durably or o.rot_pending or o.ctl_store.identity is None
            or o.ctl_store.recovering or (o.ctl is not None and (o.ctl.node.recovering or o.ctl.node.joining))
            for o in self.members.values())

    def _calm_at_rest(self) -> bool:
        """_no_copy_lost, the network whole and every member running (the wipe and rot faults)."""
        return self._no_copy_lost() and not self.net.blocked and all(
            m.node is not None and m.paused_until is None for m in self.members.values()) and pb_members.whole(self)

    @property
    def record(self) -> Assignment:
        """The record as the controller group committed it (without a controller: the configured start)."""
        return self.reference.current

    def _record_settled(self) -> bool:
        """No change of the record in flight: no controller log holds an entry not yet seen committed, and
        the primary wants no other in-sync set recorded."""
        p = self.members[self.record.primary].node
        return (all(m.ctl_store.end_index <= self.reference.state.applied for m in self.members.values())
                and (p is None or p.primary is None or p.primary.wanted_isr() is None))

    def _one_storage_fault(self, m: Member) -> bool:
        """_no_copy_lost, and `m` is not the only recorded copy (nor soon: an in-sync change in flight)."""
        r = self.record
        return (self._no_copy_lost() and bool({r.primary, *r.isr} - {m.id}) and self._record_settled()
                and pb_members.whole(self))

    def _apply(self, m: Member, ready: Ready) -> None:
        assert m.driver is not None
        m.driver.apply(ready, self.time)

    def _start_flush(self, r: Member | CtlReplica) -> None:
        """A flush: with disk faults it usually lands a few steps later (group commit meanwhile)."""
        assert r.driver is not None
        if "disk" in self.faults and self.rng.random() < 0.6:
            r.flush_at = self.time + self.rng.randint(1, 3) * self.cfg.step_ms
        else:
            r.driver.flushed(r.store.flush(), self.time)

    def _start_persist(self, r: Member | CtlReplica) -> None:
        start_persist(r, self.faults, self.persist_rng, self.time, self.cfg.step_ms)

    def _disk_due(self, r: Member | CtlReplica, t: int) -> None:
        """Complete the flush and the term write that are due."""
        if r.flush_at is not None and t >= r.flush_at and r.driver is not None:
            r.flush_at = None
            r.driver.flushed(r.store.flush(), t)
        if r.persist_at is not None and t >= r.persist_at and r.driver is not None:
            r.persist_at = None
            r.store.persist_stable()
            r.driver.persisted()

    def _send(self, msg: Any) -> None:
        if msg.group == CTL:
            if not isinstance(msg, ControllerProposal):
                self.ctl_checker.on_sent(msg)
        else:
            self.checker.on_sent(msg)
        if self.net.send(msg, self.time):
            self.trace.append((self.time, "send", msg))

    def _trace(self, who: str, text: str) -> None:
        self.trace.append((self.time, who, text))

    def close(self) -> None:
        """Nothing to release (the stores are in memory): the controller's figures go into the stats."""
        self.stats.update(self.reference.counts)

    def format_trace(self) -> str:
        return format_trace(self.trace, describe)

    # -- the controller ----------------------------------------------------------------------------
    def _tick_controller(self, m: Member) -> None:
        """The node's controller core, as server/controller.py ticks it (its notes go to the trace)."""
        assert m.ctl is not None
        recovering = m.node is not None and m.node.recovering
        state = m.ctl.core.states[CTL]
        rebuilt = state.rebuilt
        actions = m.ctl.tick(self.time, m.node)
        self.stats["ctl_records_rebuilt_from_a_snapshot"] += state.rebuilt - rebuilt
        for _, ready in actions.readies:
            self._apply(m, ready)
        for _, line in actions.notes:
            self._trace(m.id, line)
            self.stats["ctl_replicas_waiting_for_a_snapshot"] += "waiting for the next snapshot" in line
        self.stats.update("ctl_" + e for e in actions.events)
        if recovering and m.node is not None and not m.node.recovering:
            self.checker.on_recovered(m.id)

    def _ctl_expire(self, m: Member) -> None:
        """The controller log's expiry, as a node's: up to what every replica heard from holds, what the
        checker saw committed SIM_RETENTION_MS ago, and never the last snapshot (record.py)."""
        assert m.ctl is not None
        history, t = self.ctl_history, self.time
        while len(history) > 1 and history[1][0] <= t - SIM_RETENTION_MS:
            history.popleft()
        seen = history[0][1] if history[0][0] <= t - SIM_RETENTION_MS else -1
        safe = min(m.ctl.node.expiry_safe_index(t, SIM_MEMBER_TIMEOUT_MS), seen, m.ctl.expiry_cap())
        dropped = m.ctl_store.expire(safe, 0.0)
        if dropped:
            self.stats["controller_entries_expired"] += dropped
            self._trace(m.id, f"EXPIRE {dropped} controller entries, its log begins at {m.ctl_store.begin_index}")

    # -- clients -------------------------------------------------------------------------------
    def _clients(self) -> None:
        """A producer sends a new numbered request, or every unanswered one again, in order (a retry)."""
        rng = self.rng
        m = self.members[self.record.primary if rng.random() < 0.9 else rng.choice(self.ids)]  # they know the primary
        if m.node is None or m.paused_until is not None or rng.random() >= 0.4:
            return
        p = rng.choice(self.producers)
        if p.unacked and self.time - p.since > SIM_RETRY_MS:  # it gives up, and goes on under a new id
            p.retire(rng.getrandbits(63) or 1)
        if len(p.unacked) < 4 and rng.random() < 0.7:
            if not p.unacked:
                p.since = self.time
            seqs = [p.next_seq]
            p.unacked[p.next_seq] = [b"p%d-%d-%d" % (p.pid, p.next_seq, j) + b"." * rng.randint(0, 200)
                                     for j in range(rng.randint(1, 4))]
            p.next_seq += 1
        else:
            seqs = sorted(p.unacked)
        for seq in seqs:
            if seq not in p.unacked or m.node is None:
                continue  # answered meanwhile (or the producer retired), or the member crashed
            rid, self.next_rid = self.next_rid, self.next_rid + 1
            self.outstanding[(m.id, m.incarnation, rid)] = Proposal(APPEND, p.unacked[seq], self.time, p, p.pid, seq)
            self._trace(m.id, f"PROPOSE #{rid} producer {p.pid} seq {seq}")
            self._apply(m, m.node.propose_many([AppendRequest(rid, p.unacked[seq], p.pid, seq)], self.time,
                                               self.time))

    def _complete(self, i: str, c: Completion) -> None:
        m = self.members[i]
        p = self.outstanding.pop((i, m.incarnation, c.request_id), None)
        if p is None:
            raise InvariantViolation(f"{i} answered request {c.request_id} twice, or one it never had")
        code = ResponseCode(c.code)
        self.stats[f"append_{code.name}"] += 1
        self._trace(i, f"COMPLETE #{c.request_id} {code.name} {c.first_index}..{c.last_index} e{c.term}")
        producer = p.producer if p.producer is not None and p.producer.pid == p.pid else None
        if code == ResponseCode.SUCCESS:
            self._on_ack(m, c, p.bodies)
            if producer is not None:
                producer.unacked.pop(p.seq, None)
                producer.since = self.time
        elif producer and code in (ResponseCode.UNKNOWN_PRODUCER, ResponseCode.SEQUENCE_TOO_OLD) and producer.unacked:
            producer.retire(self.rng.getrandbits(63) or 1)  # the primary forgot it: go on under a new id

    def _taken(self, epoch: int) -> bool:
        """Whether the controller group committed `epoch`'s takeover, up to this moment of the step (a primary
        may learn its takeover and answer a duplicate from its log before the step's end checks)."""
        if epoch not in self.reference.taken:  # (only then: the step's end follows the record anyway)
            self.ctl_checker.check()
            self.reference.follow(self.ctl_checker)
        return epoch in self.reference.taken

    def _on_ack(self, m: Member, c: Completion, bodies: list[bytes]) -> None:
        if m.node is None or not m.node.is_leader:  # (the checker checks the entries against the committed log)
            raise InvariantViolation(f"{m.id} acknowledged {c.first_index}..{c.last_index}, not a confirmed primary")
        if self.cfg.controller and not self._taken(m.node.epoch):  # (d)
            raise InvariantViolation(f"{m.id} acknowledged {c.first_index}..{c.last_index} in epoch {m.node.epoch}, "
                                     f"whose takeover was never recorded")
        chain = chain_at(m.store, c.last_index)  # durable then on min_in_sync backups (crashed ones too)
        lost = self.checker.damaged | self.checker.tail_cut.keys()
        held = sum(1 for b in self.members.values() if b is not m and (b.id in lost or (
            b.store.durable_index >= c.last_index and chain_at(b.store, c.last_index) == chain)))  # (a wipe or
        # rot after its ack was sent is a lost copy, not a false ack: such a store reports only what it holds)
        if self.ha.ack == "sync" and held < self.ha.min_in_sync:
            raise InvariantViolation(f"{m.id} acknowledged {c.first_index}..{c.last_index}, held by {held} "
                                     f"backups (min_in_sync {self.ha.min_in_sync})")
        self.checker.on_ack(m.id, c, bodies)

    # -- one step ------------------------------------------------------------------------------
    def phase(self, step: int) -> str:
        return window_phase(step, self.cfg.window_steps, self.cfg.steps)

    def step(self) -> None:
        step = self.step_no
        self.step_no += 1
        t = self.time = self.time + self.cfg.step_ms
        phase = self.phase(step)
        if phase == "faults":
            self.heal_started = None
            self._inject()
            if "members" in self.faults and self.cfg.controller:
                pb_members.draw(self, self.members_rng)
        elif self.heal_started is None:
            self._heal()
        if phase != "faults" and "members" in self.faults and self.cfg.controller:
            pb_members.restore(self)
        for m in self.members.values():
            if m.node is None and m.down_until is not None and t >= m.down_until:
                self._start(m)
                self.stats["restarts"] += 1
                if m.node is not None:
                    self.stats["restarts_from_a_producer_snapshot"] += m.node.stats["producers_from_snapshot"]
                self._trace(m.id, f"RESTART epoch {m.store.load_vote()} end {m.store.end_index}")
                self.checker.on_restart(m.id, m.store)
                if m.ctl is not None:
                    self.ctl_checker.on_restart(m.id, m.ctl_store)
            if m.full_until is not None and t >= m.full_until:
                m.store.full, m.full_until = False, None
                self._trace(m.id, "disk space back")
            if m.paused_until is not None and t >= m.paused_until and m.node is not None:
                m.paused_until, msgs, m.backlog = None, m.backlog, []
                self._deliver(m, msgs)
            if m.paused_until is None:
                self._disk_due(m, t)
                if m.ctl is not None:
                    self._disk_due(m.ctl, t)
        by_target: dict[str, list[Any]] = {}
        for msg in self.net.due(t):
            by_target.setdefault(msg.target, []).append(msg)
        for i, msgs in by_target.items():
            m = self.members[i]
            if m.paused_until is not None:
                m.backlog.extend(msgs)
            else:
                self._deliver(m, msgs)
        for m in self.members.values():
            if m.node is not None and m.paused_until is None:
                self._apply(m, m.node.tick(t))
                if m.ctl is not None:
                    m.ctl.apply(m.ctl.node.tick(t), t)
                    cn = m.ctl.node
                    if m.id in self.ctl_checker.damaged and not (cn.recovering or cn.joining or m.ctl_store.damage):
                        self.ctl_checker.on_recovered(m.id)  # (its replica of the controller group caught up)
                    if t % POLL_MS == 0:
                        self._tick_controller(m)
                if self.rng.random() < 0.03:
                    m.store.checkpoint()
                    if m.node is not None:
                        m.node.producers.save(m.store)
                    self.checker.on_checkpoint(m.id, m.store)
                    if m.ctl is not None:
                        m.ctl_store.checkpoint()
                        self.ctl_checker.on_checkpoint(m.id, m.ctl_store)
                if "expire" in self.faults and self.expire_rng.random() < 0.02 and m.node is not None:
                    self._expire(m, m.node)
                    if m.ctl is not None:
                        self._ctl_expire(m)
        if phase != "quiet":
            self._clients()
        for m in self.members.values():
            if m.rot_pending and m.node is not None and m.node.damaged_at is None:  # replaced: it cut its log
                m.rot_pending = False
                self.checker.on_cut(m.id, m.store)
        self.check()
        self.commit_history.append((t, len(self.checker.ref) - 1))
        self.ctl_history.append((t, len(self.ctl_checker.ref) - 1))
        if phase != "faults" and (step == self.cfg.steps - 1 or self.phase(step + 1) == "faults"):
            self._check_converged()

    def _expire(self, m: Member, node: HaNode) -> None:
        """Segment expiry as a node runs it: up to what every member heard from holds (the primary knows),
        and only entries the checker saw committed SIM_RETENTION_MS ago (as retention outlives retries)."""
        history, t = self.commit_history, self.time
        while len(history) > 1 and history[1][0] <= t - SIM_RETENTION_MS:
            history.popleft()
        seen = history[0][1] if history[0][0] <= t - SIM_RETENTION_MS else -1
        dropped = m.store.expire(min(node.expiry_safe_index(t, SIM_MEMBER_TIMEOUT_MS), seen), 0.0)
        if dropped:
            self.stats["expired_entries"] += dropped
            self._trace(m.id, f"EXPIRE {dropped} entries, log begins at {m.store.begin_index}")

    def _deliver(self, m: Member, msgs: list[Any]) -> None:
        for msg in msgs:
            if m.node is None:
                return
            if msg.group == CTL:
                if m.ctl is None:
                    continue
                if isinstance(msg, ControllerProposal):
                    m.ctl.append(msg.body, self.time)
                else:
                    m.ctl.apply(m.ctl.node.step(msg, self.time), self.time)
                    if m.ctl.node.stats["log_resets"] != m.ctl.resets_seen:  # its checkpoint names the new begin
                        m.ctl.resets_seen = m.ctl.node.stats["log_resets"]
                        self.ctl_checker.on_reset(m.id, m.ctl_store)
            else:
                self._apply(m, m.node.step(msg, self.time))
                if m.node.stats["ha_resets"] != m.resets_seen:  # its checkpoint now names the new begin
                    m.resets_seen = m.node.stats["ha_resets"]
                    self.checker.on_reset(m.id, m.store)

    def check(self) -> None:
        if self.cfg.controller:  # (e), and the record the controller group committed
            self.ctl_checker.check()
            self.reference.follow(self.ctl_checker)
        primaries = self.reference.primaries
        for m in self.members.values():
            if (node := m.node) is not None and node.is_leader:  # (b): one per epoch, the recorded one
                self.checker.on_leader(m.id, node.epoch)
                if self.cfg.controller and primaries.get(node.epoch) != m.id:
                    raise InvariantViolation(f"{m.id} is a confirmed primary of epoch {node.epoch}, recorded for "
                                             f"{primaries.get(node.epoch)}")
        self.checker.check()

    def _inject(self) -> None:
        rng, f, t = self.rng, self.faults, self.time
        if self.step_no % 100 == 1:
            self.net.fifo = "reorder" not in f
            self.net.faults = LinkFaults(drop=rng.uniform(0, 0.1) if "drop" in f else 0.0,
                                         duplicate=rng.uniform(0, 0.1) if "dup" in f else 0.0,
                                         max_delay_ms=rng.randint(5, 60) if "delay" in f else 5)
        if "partition" in f:
            if self.net.blocked and t >= self.partition_until:
                self.net.partition("", ())
                self._trace("net", "partition healed")
            elif not self.net.blocked and rng.random() < 0.02:
                ids = list(self.ids)
                rng.shuffle(ids)
                k = rng.randint(1, len(ids) - 1)
                bridges = [ids[0]] if rng.random() < 0.3 else []  # one side hears both
                self.net.partition("halves", partition_links([ids[:k], ids[k:]], bridges))
                self.partition_until = t + rng.randint(100, 1500)
                self.stats["partitions"] += 1
                self._trace("net", f"PARTITION {ids[:k]} | {ids[k:]} bridges {bridges}")
        running = [m for m in self.members.values() if m.node is not None]
        if "crash" in f and running and rng.random() < 0.012:
            victim, until = rng.choice(running), t + rng.randint(20, 1200)
            if "expire" in f and self.expire_rng.random() < 0.2:  # down past the member timeout: expired past
                until = t + self.expire_rng.randint(2 * SIM_MEMBER_TIMEOUT_MS, 6 * SIM_MEMBER_TIMEOUT_MS)
            self.crash(victim, until)
        if "pause" in f and running and rng.random() < 0.005 and (m := rng.choice(running)).paused_until is None:
            m.paused_until = t + rng.randint(20, 800)
            self.stats["pauses"] += 1
            self._trace(m.id, f"PAUSE until {m.paused_until}")
        wr, r = self.wipe_rng, self.record
        # The only recorded copy, where the record names who else holds every acknowledged entry (its primary
        # never took the epoch, or nobody was recorded in sync in it: with a controller a SYNC append needs a
        # recorded backup, primary.py's `counted`; controller_core.py's _vouched then elects that one). Drawn
        # often while a backup joins and the record does not name it yet: the window in which fault 2 of
        # issue 30 lost an entry acknowledged with the joiner's ack alone.
        back = hand_back_to(r.taken, r.holder, r.isr_seen)
        only = not r.isr and (back not in ("", r.primary) or (back == r.primary and bool(r.holder_isr - {back})))
        p = self.members[r.primary].node
        joining = only and p is not None and p.primary is not None and bool(p.primary.isr_joining)
        if ("wipe" in f and self.cfg.controller and wr.random() < (0.3 if joining else 0.02 if only else 0.002)
                and (self._no_copy_lost() and pb_members.whole(self) if only
                     else len(running) == len(self.ids) and self._calm_at_rest())):
            # One disk replaced at a time, while every other member runs, is heard and holds what it acked.
            # (A failover that picks the wiped member before it asked to be left out leaves the group to
            # the operator: controller.py logs it. That takes a second fault at once, left out here.)
            m = self.members[r.primary] if only else wr.choice(running)
            # Not the only recorded copy (nor soon: a change in flight): beyond one lost disk, but for `only`,
            # drawn even while a joiner's recording is in flight (the window fault 2 needs).
            if m.node is not None and (only or ({r.primary, *r.isr} - {m.id} and self._record_settled())):
                self.crash(m, t + wr.randint(20, 600))
                m.store = FillableStore(PB_STORE, defer_stable=True)  # the whole disk: the controller's log too
                m.ctl_store = FillableStore(CTL_STORE, defer_stable=True)
                self.checker.on_wipe(m.id)
                self.ctl_checker.on_wipe(m.id)
                self.stats["wipes"] += 1
                self.stats["wipes_of_the_primary"] += m.id == r.primary
                self.stats["wipes_of_the_only_recorded_copy"] += only
                self._trace(m.id, "WIPE: it restarts with empty stores" + (" (the only recorded copy)" * only))
        rr = self.rot_rng
        if ("rot" in f and self.cfg.controller and len(running) == len(self.ids) and rr.random() < 0.002
                and self._calm_at_rest()):
            self._rot(rr.choice(running))
        fr = self.full_rng
        if "full" in f and running and fr.random() < 0.004 and not (m := fr.choice(running)).store.full:
            m.store.full, m.full_until = True, t + fr.randint(50, 1500)
            self.stats["disks_full"] += 1
            self._trace(m.id, f"DISK FULL until {m.full_until}")

    def _rot(self, m: Member) -> None:
        """A read (or the scrub) meets a damaged committed entry of `m`'s (one damaged copy at a time, as a
        wipe): a backup cuts there at once; a primary asks for a backup in its place and cuts once it follows."""
        s, node = m.store, m.node
        if node is None or s.committed_index < s.begin_index or not {self.record.primary, *self.record.isr} - {m.id}:
            return
        index, end = self.rot_rng.randint(s.begin_index, s.committed_index), s.end_index
        self._apply(m, node.report_corruption(CorruptEntryError("bit rot", index=index), self.time))
        if s.end_index < end:
            self.checker.on_cut(m.id, s)
        m.rot_pending = node.damaged_at is not None
        self.stats["rots"] += 1
        self.stats["rots_of_the_primary"] += m.rot_pending
        self._trace(m.id, f"ROT: entry {index} found damaged")

    def _heal(self) -> None:
        self.heal_started = self.time
        self.net.heal()
        self.net.fifo = True
        self._trace("net", "HEAL: crashed members restart, paused ones resume")
        for m in self.members.values():
            if m.node is None:
                m.down_until = self.time
            if m.paused_until is not None:
                m.paused_until = self.time
            if m.full_until is not None:
                m.full_until = self.time

    def _check_converged(self) -> None:
        p = self.members[self.record.primary].node
        if p is None or not p.is_leader or p.epoch != self.record.epoch:
            raise InvariantViolation(f"no confirmed primary of epoch {self.record.epoch} after the heal period")
        if self.outstanding:
            raise InvariantViolation(f"requests never answered after the heal: {list(self.outstanding)[:5]}")
        want = (p.epoch, p.node_id, p.store.end_index, p.store.end_index)
        for m in self.members.values():  # the primary too: everything committed, and held by everyone
            got = None if m.node is None else (m.node.epoch, m.node.leader_id, m.store.committed_index,
                                                m.store.end_index)
            if got != want:
                raise InvariantViolation(f"{m.id} has not caught up after the quiet period: (epoch, primary, "
                                         f"commit, end) {got}, want {want}")
        if self.checker.unverified:
            raise InvariantViolation(f"acknowledged entries never committed: {self.checker.unverified[0]}")


def describe(m: Any) -> str:
    """One trace line per message: its fields, a frame as (offset, size), a handshake's epochs unpacked."""
    fields = {k: getattr(m, k) for k in m.__dataclass_fields__ if k not in ("group", "sender", "target")}
    if isinstance(m, HaTransfer):
        fields["frame"] = FRAME_HEADER.unpack_from(m.frame)
    elif isinstance(m, HaHandshake):
        fields["epochs"] = unpack_epochs(m.epochs)
    return f"{m.sender}->{m.target} {type(m).__name__} " + " ".join(f"{k}={v}" for k, v in fields.items())


def run_pb_seed(seed: int, cfg: PbConfig) -> SeedResult:
    """Run one seed to the end or to the first violated invariant (an exception of the core is one too)."""
    return run_cluster(seed, PbCluster(seed, cfg), cfg.steps)
