"""A whole simulated cluster: real RaftNodes over real stores, a virtual clock, a faulty network, disks
whose flushes lag, crashes, restarts, pauses, skewed clocks and clients, all driven by one seeded RNG so
a seed replays exactly.

Time moves in steps of `step_ms`. A run is a sequence of windows: faults for the first part of a window,
then everything heals (partitions end, the network behaves, crashed nodes restart, paused ones resume)
and the cluster must elect a leader within a few election timeouts and resolve every client request.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from ..config import RaftConfig, StoreConfig
from ..core.driver import Driver
from ..core.ready import APPEND, READ_INDEX, Completion, Ready, RoleChange
from ..core.role import Role
from ..errors import ResponseCode
from ..raft.membership import Membership
from ..raft.messages import HeartbeatRequest, Message, describe
from ..raft.node import RaftNode
from ..store.base import LogStore
from ..store.memory import MemoryStore
from .checker import Checker, InvariantViolation
from .clients import Proposal, SimProducer
from .faults import SIM_MEMBER_TIMEOUT_MS, FaultInjection
from .liveness import check_liveness
from .members import draw_change, spare_ids
from .network import Network, Ping
from .nodes import FillableStore, SimNode, start_persist
from .quiet import QuietGroups
from .timeline import format_trace, full_window, window_phase

GROUP = "g0"
_PRODUCER_FORGOTTEN = (ResponseCode.UNKNOWN_PRODUCER, ResponseCode.SEQUENCE_TOO_OLD)
# Answers that say the append was written nowhere (a full disk; a leader handing over, its own disk full).
_NOTHING_WRITTEN = (ResponseCode.DISK_FULL, ResponseCode.LEADER_TRANSFERRING)
ALL_FAULTS = ("drop", "dup", "delay", "partition", "crash", "pause", "skew", "disk", "corrupt", "transfer",
              "wipe", "expire", "full", "rot", "members", "deposed", "idle")
SPARES = 2  # nodes beside the first members that "members" adds and removes (members.py)
# A single node has no peer to be cut from, to hand leadership to, or to recover lost data from.
SINGLE_NODE_FAULTS = ("drop", "dup", "delay", "crash", "pause", "skew", "expire", "idle")
# A producer gives up a request after SIM_RETRY_MS (as a client after its retry_timeout) and continues
# under a new id; entries expire only SIM_RETENTION_MS after they committed. Retention longer than any
# retry is the idempotent producer's operating condition (a forgotten producer's retry is new to the
# leader): docs/protocol.md.
SIM_RETRY_MS = 1000
SIM_RETENTION_MS = 2 * SIM_RETRY_MS

# Fast timers keep runs short in virtual time; the ratios match the defaults (docs/design.md §7).
SIM_RAFT = RaftConfig(heartbeat_interval_ms=30, max_heartbeat_leak=4, election_backoff_ms=80,
                      max_pending_requests=32, max_wait_ack_ms=400, max_push_timeout_ms=150,
                      max_inflight_pushes=4, push_batch_bytes=2048, push_batch_entries=8,
                      max_transfer_lag=50, transfer_timeout_ms=300, learner_promote_lag=50)


@dataclass(slots=True)
class SimConfig:
    nodes: int = 3
    steps: int = 600
    step_ms: int = 10
    faults: tuple[str, ...] = ALL_FAULTS
    file_store: bool = False
    # "async": a store is durable as soon as it is written (StoreConfig.flush), so commits never wait for
    # a flush. Its links are then FIFO, as TCP's are: with reordering links a lagging follower's catch-up
    # (every overtaken heartbeat answer costs a compare round) fell behind clients that commit at write.
    flush: Literal["sync", "async"] = "sync"
    trace_len: int = 300
    window_steps: int = 600
    raft: RaftConfig = SIM_RAFT


class Cluster(FaultInjection, QuietGroups):
    def __init__(self, seed: int, cfg: SimConfig) -> None:
        if cfg.nodes == 1 and not set(cfg.faults) <= set(SINGLE_NODE_FAULTS):
            raise ValueError(f"a single node takes only the faults {', '.join(SINGLE_NODE_FAULTS)}")
        self.seed = seed
        self.cfg = cfg
        self.faults = set(cfg.faults)
        self.rng = random.Random(seed)
        self.rot_rng = random.Random(seed + (4 << 32))  # its own stream: the other faults' runs stay as they were
        self.persist_rng = random.Random(seed + (6 << 32))  # the disk latency of term and vote writes
        self.members = [f"n{i}" for i in range(cfg.nodes)]  # the group's first configuration
        # Spare nodes run from the start, as new machines would, and join when a change names them.
        spares = spare_ids(cfg.nodes, SPARES) if "members" in self.faults and cfg.nodes >= 3 else []
        self.ids = self.members + spares
        self.members_rng = random.Random(seed + (8 << 32))
        self.reads_rng = random.Random(seed + (10 << 32))  # linearizable reads (ends): their own stream
        # "deposed": one seed in four runs without check-quorum, so a leader cut off keeps believing it leads
        # until it hears of a newer term; reads asked of it must still never be answered stale.
        deposed = "deposed" in self.faults and random.Random(seed + (12 << 32)).random() < 0.25
        self.raft = replace(cfg.raft, check_quorum=False) if deposed else cfg.raft
        # "idle": clients pause now and then amid the faults, long enough for the group to go quiet
        # (raft/quiesce.py), so crashes, partitions and pauses also meet quiet groups.
        self.idle_rng = random.Random(seed + (14 << 32))
        self.idle_until = 0
        self.time = 0
        self.step_no = 0
        self.net = Network(random.Random(self.rng.getrandbits(64)))
        self.net.fifo = cfg.flush == "async"
        self.trace: deque[tuple[int, str, object]] = deque(maxlen=cfg.trace_len)
        self.stats: Counter[str] = Counter()
        self.outstanding: dict[tuple[str, int, int], Proposal] = {}
        self.producers = [SimProducer(pid) for pid in (7, 1 << 40, (1 << 63) - 1)]
        self.commit_history: deque[tuple[int, int]] = deque()
        self.known_leader: str | None = None
        self.partition_until = 0
        self.heal_started: int | None = None
        self.heal_commits: dict[str, int] = {}  # each node's commit index when the faults last healed
        self.leader_seen_after_heal = False
        self._tmp = tempfile.mkdtemp(prefix="quorumlog-sim-") if cfg.file_store else None
        self.sims: dict[str, SimNode] = {}
        for i in self.ids:
            sim = SimNode(i, self._open_store(i))
            if "skew" in self.faults:
                sim.offset = self.rng.randint(0, 10_000_000)
                sim.rate = 1.0 + self.rng.uniform(-0.05, 0.05)
            self.sims[i] = sim
            self._start(sim)
        self.checker = Checker(self.ids, self._running_store, Membership.of(self.members))
        self.checker.stopped_store = lambda n: self.sims[n].store

    # -- stores ----------------------------------------------------------------------------------
    def _store_config(self) -> StoreConfig:
        # Small segments and no retention period, so expiry happens many times in a run.
        return StoreConfig(data_segment_bytes=16 * 1024, index_segment_bytes=32 * 1024, max_body_bytes=4096,
                           file_reserved_hours=0, flush=self.cfg.flush)

    def _open_store(self, node_id: str) -> LogStore:
        if self._tmp is None:
            return FillableStore(self._store_config(), defer_stable=True)
        from ..store.file_store import FileStore  # only when asked for: the sim runs without it

        return FileStore(os.path.join(self._tmp, node_id), self._store_config(), repair=True, defer_stable=True)

    def _crash_store(self, sim: SimNode) -> None:
        store = sim.store
        self.stats["crashes_losing_a_term_or_vote"] += store.stable_unsaved
        crash: Callable[[], None] | None = getattr(store, "crash", None)
        if crash is not None:
            crash()
        else:
            # A FileStore on a real file system keeps its page cache across a process crash; a clean
            # reopen runs recovery, which is what a restart exercises.
            store.close()
            sim.store = self._open_store(sim.id)

    def close(self) -> None:
        for sim in self.sims.values():
            if self._tmp is not None:
                sim.store.close()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def _running_store(self, node_id: str) -> LogStore | None:
        sim = self.sims[node_id]
        return sim.store if sim.node is not None else None

    # -- node lifecycle ------------------------------------------------------------------------
    def _start(self, sim: SimNode) -> None:
        node_id = sim.id
        member = node_id in self.members
        sim.node = RaftNode(node_id, GROUP, self.members if member else [*self.members, node_id], sim.store,
                            self.raft, random.Random(self.rng.getrandbits(64)), joining=not member)
        sim.driver = Driver(sim.node, self._send, lambda c: self._complete(node_id, c),
                            lambda ch: self._changed(node_id, ch), lambda: self._start_flush(sim),
                            lambda: self._start_persist(sim))
        sim.incarnation += 1
        sim.heard = {}
        sim.started_at = sim.now(self.time)
        sim.resets_seen = 0
        sim.crashed_until = None
        sim.next_checkpoint = self.time + self.rng.randint(100, 400)

    def crash(self, node_id: str, until: int) -> None:
        sim = self.sims[node_id]
        if sim.node is None:
            return
        sim.node = None
        sim.driver = None
        sim.flush_at = sim.persist_at = None
        sim.paused_until = None
        sim.backlog.clear()
        sim.crashed_until = until
        self._crash_store(sim)
        self.stats["crashes"] += 1
        lost = [k for k in self.outstanding if k[0] == node_id]
        for k in lost:  # the client's connection broke: outcome unknown
            del self.outstanding[k]
        self.stats["requests_unknown_outcome"] += len(lost)
        note = ""
        store = sim.store
        # One storage fault at a time: a second node losing its data while another recovers can leave a
        # 3-node group without a majority able to vote (docs/operations.md), which is not a Raft fault.
        calm = self._calm(node_id)
        # A wiped node re-fetches the whole log after the heal: not in a shortened last window, whose heal is
        # too short for that (seed 33046: five members, 650 entries, the run ended first).
        if ("wipe" in self.faults and calm and self.rng.random() < 0.15
                and full_window(self.step_no, self.cfg.window_steps, self.cfg.steps)):
            self._wipe(sim)
            return
        if ("corrupt" in self.faults and calm and self.rng.random() < 0.3
                and isinstance(store, MemoryStore) and store.end_index >= max(store.begin_index, 0)):
            # Anything durable may be damaged: committed entries, and acknowledged ones past the commit.
            c = store.committed_index
            cut = self.rng.randint(max(store.begin_index, min(c, store.end_index) - 10), store.end_index)
            store.lose_from(cut)
            self.checker.damaged.add(node_id)
            self.stats["corruptions"] += 1
            note = f", lost entries from {cut} (committed {c})"
        self._trace(node_id, f"CRASH until {until}{note}; durable end {store.end_index}")

    def _calm(self, but: str | None = None) -> bool:
        """No node (but `but`) recovers lost data or has yet to find its group."""
        return not self.checker.damaged and not any(
            s.store.identity is None or s.store.recovering or (s.node is not None and s.node.recovering)
            for s in self.sims.values() if s.id != but)

    def _wipe(self, sim: SimNode) -> None:
        """The disk is replaced: the node comes back with an empty store under its old id. A disk that
        kept `currterm` but lost the log is refused by FileStore at open, and the operator replaces it
        the same way (docs/operations.md), so both cases restart pristine."""
        kept_currterm = self.rng.random() < 0.5
        if self._tmp is not None:
            sim.store.close()
            shutil.rmtree(os.path.join(self._tmp, sim.id), ignore_errors=True)
        sim.store = self._open_store(sim.id)
        self.checker.on_wipe(sim.id)
        self.stats["wipes"] += 1
        self.stats["wipes_refused_currterm_kept" if kept_currterm else "wipes_whole"] += 1
        self._trace(sim.id, "CRASH and WIPE: the node restarts with an empty store")

    def restart(self, node_id: str) -> None:
        sim = self.sims[node_id]
        self._start(sim)
        self.stats["restarts"] += 1
        if sim.node is not None:
            self.stats["restarts_from_a_producer_snapshot"] += sim.node.stats["producers_from_snapshot"]
        self._trace(node_id, f"RESTART term {sim.store.load_vote()} end {sim.store.end_index} "
                             f"commit {sim.store.committed_index} damage {sim.store.damage}")
        self.checker.on_restart(node_id, sim.store)

    def pause(self, node_id: str, until: int) -> None:
        sim = self.sims[node_id]
        if sim.node is not None and sim.paused_until is None:
            sim.paused_until = until
            self.stats["pauses"] += 1
            self._trace(node_id, f"PAUSE until {until}")

    def resume(self, node_id: str) -> None:
        sim = self.sims[node_id]
        sim.paused_until = None
        self._trace(node_id, "RESUME")
        if sim.backlog and sim.node is not None:
            msgs, sim.backlog = sim.backlog, []
            now = sim.now(self.time)
            for m in msgs:  # (a resumed process reads what its sockets buffered, pings too)
                sim.heard[m.sender] = now
            msgs = [m for m in msgs if type(m) is not Ping]
            self._apply(sim, sim.node.step_batch(msgs, now))

    # -- Ready plumbing ------------------------------------------------------------------------
    def _apply(self, sim: SimNode, ready: Ready) -> None:
        assert sim.driver is not None
        sim.driver.apply(ready, sim.now(self.time))

    def _start_flush(self, sim: SimNode) -> None:
        """The driver asks for a flush: with disk faults it usually lands a few steps later (a crash in
        between loses the unflushed tail); the driver starts no other meanwhile (group commit)."""
        assert sim.driver is not None
        if "disk" in self.faults and self.rng.random() < 0.6:
            sim.flush_at = self.time + self.rng.randint(1, 3) * self.cfg.step_ms
        else:
            sim.driver.flushed(sim.store.flush(), sim.now(self.time))

    def _start_persist(self, sim: SimNode) -> None:
        start_persist(sim, self.faults, self.persist_rng, self.time, self.cfg.step_ms)

    def _send(self, m: Message) -> None:
        self.checker.on_sent(m)
        if type(m) is HeartbeatRequest and m.quiet == 1:
            self.stats["quiesce_heartbeats"] += 1
        if self.net.send(m, self.time):
            self.trace.append((self.time, "send", m))

    def _changed(self, node_id: str, ch: RoleChange) -> None:
        self._trace(node_id, f"{ch.role.name} term {ch.term} leader {ch.leader_id}")
        if ch.role == Role.LEADER:
            self.known_leader = node_id
            self.stats["elections"] += 1
            self.checker.on_leader(node_id, ch.term)

    def _complete(self, node_id: str, c: Completion) -> None:
        sim = self.sims[node_id]
        p = self.outstanding.pop((node_id, sim.incarnation, c.request_id), None)
        if p is None:
            raise InvariantViolation(f"{node_id} completed request {c.request_id} twice or never received it")
        code = ResponseCode(c.code)
        self.stats[f"{p.kind}_{code.name}"] += 1
        self._trace(node_id, f"COMPLETE {p.kind} #{c.request_id} {code.name} {c.first_index}..{c.last_index} "
                             f"t{c.term}")
        if c.kind == READ_INDEX and code == ResponseCode.SUCCESS:
            self._check_read(node_id, p, c)
        elif c.kind == APPEND and code == ResponseCode.SUCCESS:
            self.checker.on_ack(node_id, c, p.bodies)  # a duplicate's answer names the original entries
            if p.producer is not None and p.producer.pid == p.pid:
                p.producer.unacked.pop(p.seq, None)
                p.producer.since = self.time
        elif c.kind == APPEND and code in _NOTHING_WRITTEN and p.producer is None:
            self.checker.on_refused(p.bodies)  # (a producer's refused request is retried, and may land)
        elif (p.producer is not None and p.producer.pid == p.pid and code in _PRODUCER_FORGOTTEN
              and p.producer.unacked):
            # The leader no longer knows this producer (its entries expired, or it was reset past them):
            # the client reports the failure and continues under a new producer id, as the real one does.
            self.stats["producer_retired"] += 1
            p.producer.retire(self.rng.getrandbits(63) or 1)
        if c.leader_id is not None and c.leader_id in self.sims:
            self.known_leader = c.leader_id

    def _trace(self, node_id: str, text: str) -> None:
        self.trace.append((self.time, node_id, text))

    def format_trace(self) -> str:
        return format_trace(self.trace, describe)

    # -- one step --------------------------------------------------------------------------------
    def phase(self, step: int) -> str:
        return window_phase(step, self.cfg.window_steps, self.cfg.steps)

    def step(self) -> None:
        step = self.step_no
        self.step_no += 1
        self.time += self.cfg.step_ms
        phase = self.phase(step)
        if phase == "faults":
            self.heal_started = None
            self._inject_faults()
        elif self.heal_started is None:
            self._heal()
        self._lifecycle()
        self._flushes()
        self._deliver()
        self._tick()
        if phase != "quiet" and not self._idle(phase):
            self._clients()
        if phase == "faults":  # (a learner added then has the heal period to catch up)
            self._change_members()
        self._maintenance()
        self.checker.check()
        if phase != "faults":
            check_liveness(self, step)

    def _heal(self) -> None:
        self.heal_started = self.time
        self.heal_commits = {i: s.store.committed_index for i, s in self.sims.items()}
        self.leader_seen_after_heal = False
        self.net.heal()
        self._trace("net", "HEAL: network repaired, crashed nodes restart, paused nodes resume")
        for i in self.ids:
            sim = self.sims[i]
            if sim.node is None:
                sim.crashed_until = self.time
            if sim.paused_until is not None:
                sim.paused_until = self.time
            self._free_disk(sim)

    def _lifecycle(self) -> None:
        t = self.time
        for i in self.ids:
            sim = self.sims[i]
            if sim.node is None and sim.crashed_until is not None and t >= sim.crashed_until:
                self.restart(i)
            elif sim.paused_until is not None and t >= sim.paused_until:
                self.resume(i)
            if sim.full_until is not None and t >= sim.full_until:
                self._free_disk(sim)

    def _flushes(self) -> None:
        t = self.time
        for i in self.ids:
            sim = self.sims[i]
            if sim.flush_at is not None and t >= sim.flush_at and sim.driver is not None and sim.paused_until is None:
                sim.flush_at = None
                sim.driver.flushed(sim.store.flush(), sim.now(t))
            if (sim.persist_at is not None and t >= sim.persist_at and sim.driver is not None
                    and sim.paused_until is None):
                sim.persist_at = None
                sim.store.persist_stable()
                sim.driver.persisted()

    def _deliver(self) -> None:
        by_target: dict[str, list[Message]] = {}
        for m in self.net.due(self.time):
            by_target.setdefault(m.target, []).append(m)
        for i in self.ids:
            msgs = by_target.get(i)
            if not msgs:
                continue
            sim = self.sims[i]
            if sim.node is None:
                continue
            if sim.paused_until is not None:
                sim.backlog.extend(msgs)
                continue
            now = sim.now(self.time)
            for m in msgs:  # any message is word that its node lives (as the server counts any peer frame)
                sim.heard[m.sender] = now
            msgs = [m for m in msgs if type(m) is not Ping]
            if msgs:
                self._apply(sim, sim.node.step_batch(msgs, now))

    def _tick(self) -> None:
        for i in self.ids:
            sim = self.sims[i]
            if sim.node is not None and sim.paused_until is None:
                self._apply(sim, sim.node.tick(sim.now(self.time)))
                self._liveness(sim)

    def _clients(self) -> None:
        rng = self.rng
        if rng.random() < 0.2:
            self._producer_requests(rng.choice(self.producers))
        elif rng.random() < 0.35:
            leader = self.known_leader
            target = leader if leader is not None and rng.random() < 0.85 else rng.choice(self.ids)
            sim = self.sims[target]
            if sim.node is None or sim.paused_until is not None:
                return
            n = rng.randint(1, 6)
            base = f"s{self.seed}-{self.step_no}-".encode()
            bodies = [base + str(j).encode() + b"." * rng.randint(0, 300) for j in range(n)]
            rid = sim.node._request_id(None)
            self.outstanding[(target, sim.incarnation, rid)] = Proposal(APPEND, bodies, self.time)
            self._trace(target, f"PROPOSE #{rid} {n} entries")
            self._apply(sim, sim.node.propose(bodies, sim.now(self.time), request_id=rid))
        if self.reads_rng.random() < 0.1:
            self._read()
        if "transfer" in self.faults and rng.random() < 0.004:
            leaders = [s for s in self.sims.values() if s.node is not None and s.node.is_leader]
            if leaders:
                src = leaders[0]
                assert src.node is not None
                target = rng.choice(self.ids)
                rid = src.node._request_id(None)
                self.outstanding[(src.id, src.incarnation, rid)] = Proposal("transfer", [], self.time)
                self._trace(src.id, f"TRANSFER #{rid} to {target}")
                self._apply(src, src.node.transfer_leader(target, src.now(self.time), request_id=rid))

    def _read(self) -> None:
        """A linearizable read point (an END query) of a random node, leader or follower (raft/reads.py)."""
        rng = self.reads_rng
        target = self.known_leader if self.known_leader is not None and rng.random() < 0.5 else rng.choice(self.ids)
        sim = self.sims[target]
        if sim.node is None or sim.paused_until is not None:
            return
        rid = sim.node._request_id(None)
        floor = len(self.checker.ref) - 1  # committed before the request: a read must see all of it
        self.outstanding[(target, sim.incarnation, rid)] = Proposal("end", [], self.time, floor=floor)
        self._trace(target, f"END #{rid} (committed end known: {floor})")
        self._apply(sim, sim.node.read_index([rid], sim.now(self.time)))

    def _check_read(self, node_id: str, p: Proposal, c: Completion) -> None:
        """A linearizable end is never below what was committed when it was asked (a deposed leader's or a
        lagging follower's own commit would be), and the answering node has committed that far."""
        store = self.sims[node_id].store
        if c.last_index < p.floor:
            raise InvariantViolation(f"{node_id} answered a linearizable end {c.last_index}, below {p.floor}, "
                                     f"committed before the request (at {p.at} ms)")
        if store.committed_index < c.last_index:
            raise InvariantViolation(f"{node_id} answered read index {c.last_index} with its commit at "
                                     f"{store.committed_index}")
        self.stats["end_reads_checked"] += 1

    def _change_members(self) -> None:
        """Now and then the leader is asked for a membership change (members.py)."""
        if len(self.ids) == len(self.members):
            return
        sim = self.sims[self.known_leader] if self.known_leader is not None else None
        node = sim.node if sim is not None else None
        if sim is None or node is None or not node.is_leader or sim.paused_until is not None:
            return
        drawn = draw_change(self.members_rng, node, self.ids, self._calm())
        if drawn is None:
            return
        what, change = drawn
        rid = node._request_id(None)
        self.outstanding[(sim.id, sim.incarnation, rid)] = Proposal("config", [], self.time)
        self._trace(sim.id, f"CHANGE #{rid} {what}")
        self._apply(sim, node.change_members(change, sim.now(self.time), request_id=rid))

    def _producer_requests(self, producer: SimProducer) -> None:
        """A new numbered request, or (as after a timeout) every unacknowledged one again, in order."""
        rng = self.rng
        target = self.known_leader if self.known_leader is not None and rng.random() < 0.9 else rng.choice(self.ids)
        sim = self.sims[target]
        if sim.node is None or sim.paused_until is not None:
            return
        if producer.unacked and self.time - producer.since > SIM_RETRY_MS:
            self.stats["producer_gave_up"] += 1
            producer.retire(rng.getrandbits(63) or 1)
        if len(producer.unacked) < 4 and rng.random() < 0.7:
            if not producer.unacked:
                producer.since = self.time
            seq = producer.next_seq
            producer.next_seq += 1
            base = f"p{producer.pid}-{seq}-".encode()
            producer.unacked[seq] = [base + str(j).encode() + b"." * rng.randint(0, 200)
                                     for j in range(rng.randint(1, 4))]
            seqs = [seq]
        else:
            seqs = sorted(producer.unacked)
        pid = producer.pid
        for seq in seqs:
            bodies = producer.unacked.get(seq)
            if bodies is None or producer.pid != pid:
                return  # answered meanwhile (the producer may have been retired)
            rid = sim.node._request_id(None)
            self.outstanding[(target, sim.incarnation, rid)] = Proposal(APPEND, bodies, self.time, producer,
                                                                             producer.pid, seq)
            self._trace(target, f"PROPOSE #{rid} producer {producer.pid} seq {seq}")
            self._apply(sim, sim.node.propose(bodies, sim.now(self.time), request_id=rid, producer=producer.pid,
                                              seq=seq, wall_ms=self.time))
            if sim.node is None:
                return

    def _committed_before(self, t: int) -> int:
        """The highest index seen committed SIM_RETENTION_MS before `t` (what retention lets expire)."""
        history = self.commit_history
        while len(history) > 1 and history[1][0] <= t - SIM_RETENTION_MS:
            history.popleft()
        return history[0][1] if history[0][0] <= t - SIM_RETENTION_MS else -1

    def _maintenance(self) -> None:
        t = self.time
        self.commit_history.append((t, len(self.checker.ref) - 1))
        for i in self.ids:
            sim = self.sims[i]
            node = sim.node
            if node is None:
                continue
            if t >= sim.next_checkpoint:
                sim.store.checkpoint()
                node.producers.save(sim.store)  # (as the server does now and then)
                self.checker.on_checkpoint(i, sim.store)
                sim.next_checkpoint = t + self.rng.randint(100, 400)
            if node.stats["log_resets"] != sim.resets_seen:
                # A reset rewrote the checkpoint: the durable commit is now the new begin's predecessor.
                sim.resets_seen = node.stats["log_resets"]
                self.checker.on_reset(i, sim.store)
            if "expire" in self.faults and self.rng.random() < 0.02:
                # The checker must have seen entries committed before they may vanish.
                safe = min(node.expiry_safe_index(sim.now(t), SIM_MEMBER_TIMEOUT_MS), self._committed_before(t))
                dropped = sim.store.expire(safe, 0.0)
                if dropped:
                    self.stats["expired_entries"] += dropped
                    self._trace(i, f"EXPIRE {dropped} entries, log begins at {sim.store.begin_index}")
            if (i in self.checker.damaged and not node.recovering and not node.joining
                    and sim.store.damage is None):
                self.checker.on_recovered(i)
                self._trace(i, "recovered the lost committed entries")
            bugs = [k for k in node.stats if k.startswith("bug_")]
            if bugs:
                raise InvariantViolation(f"{i} counted internal inconsistencies: {bugs}")
            if node.is_leader:  # (committed as it knows, or as the cluster does: a restarted leader's lags)
                committed = max(sim.store.committed_index, len(self.checker.ref) - 1)
                open_changes = [c[0] for c in sim.store.configs if c[0] > committed]
                if len(open_changes) > 1:
                    raise InvariantViolation(f"leader {i} holds {len(open_changes)} uncommitted configuration "
                                             f"changes, at {open_changes}: one at a time")
