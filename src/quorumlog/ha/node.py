"""One member of a primary/backup group: the primary of its epoch, or a backup following one.

Pure like the Raft core (no sockets, no clock): the server drives it with the same Driver and Ready
contract as a RaftNode (core/driver.py), and exposes it through the same Group. Its role maps onto the
Raft roles (primary = LEADER, backup = FOLLOWER) and its epoch onto the term, so status, metadata,
redirects and the client's leader search work unchanged.

Epochs. (epoch, primary) is persisted in the store's vote file before the node acts on it. A node
meeting a higher epoch in any HA message follows that epoch's primary at once (an old primary is fenced:
it never accepts another write, and its handshake cuts the tail the new primary does not hold). Who
starts an epoch: `promote` (an operator, or the controller, which records it in a Raft group first).
A primary that restarts, or learns of its election from a peer, takes no write and commits nothing until
it is confirmed: by a backup that follows its epoch (without a controller) or by the controller's record,
whose in-sync set it then commits with. With a controller an elected primary waits too, until the record
holds its takeover (server/controller.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from ..config import HaConfig, RaftConfig
from ..core.appends import AppendRequest, RequestId
from ..core.producers import ProducerTable
from ..core.ready import APPEND, TRANSFER, Completion, Ready, RoleChange
from ..core.replica import PRIMARY_BACKUP
from ..core.role import Role
from ..errors import CorruptEntryError, ResponseCode
from ..store.base import LogStore
from .backup import Backup
from .messages import HaHandshake, HaMessage, HaReport, HaTransfer, HaTruncate
from .primary import Primary


class HaNode:
    """A primary/backup member: a core/replica.py ReplicaCore, as a RaftNode is."""

    replication = PRIMARY_BACKUP

    def __init__(self, node_id: str, group: str, members: Sequence[str], store: LogStore, cfg: HaConfig,
                 raft: RaftConfig, now: int) -> None:
        self.node_id = node_id
        self.group = group
        self.members = list(members)
        self.store = store
        self.cfg = cfg
        self.config = raft
        self.stats: Counter[str] = Counter()
        self.producers = ProducerTable(raft.producer_window, raft.producer_idle_ms)
        if store.damage is not None or (store.tail_cut is not None and self._primary_by_store()):
            self._lost_at_start()
        if self.producers.rebuild(store, self._cut_damaged, store.producer_snapshot()):
            self.stats["producers_from_snapshot"] += 1
        self.epoch, primary = store.load_vote()
        # Recovering only because its store started pristine (not for entries it lost since): the controller
        # may find the whole group new (controller_core.py, _vouched). A cut at damage ends it.
        self.started_pristine = False
        if self.epoch == 0:  # a new group: epoch 1 led by the configured primary
            self.epoch, primary = 1, cfg.primary
            if cfg.controller is not None and store.end_index < 0 and store.begin_index <= 0:
                self.started_pristine = True
                # A pristine store: new, or a replaced disk that lost entries the controller's record
                # counts on. Until the controller tells which (server/controller.py), this node takes no
                # primary role from the record. Persisted: a restart midway must not forget it.
                store.set_recovering(True)
        self.primary_id: str | None = primary
        # The epoch this node is primary of by its own word (its store's at start), not by an election it
        # was told of: the controller confirms it only by an election above (a new epoch).
        self.own_epoch = self.epoch
        self.isr: set[str] = {m for m in self.members if m != node_id}
        self.primary: Primary | None = None
        self.backup: Backup | None = None
        self._withheld = False  # primary of its epoch by its own store, withheld while recovering
        self._empty_logs: dict[str, bool] = {}  # while withheld: whose handshakes showed an empty log
        self._next_request_id = 1
        self.damaged_at: int | None = None  # a primary's damaged entry, cut once it is a backup
        self._start(now, Ready())

    # -- what the server reads ---------------------------------------------------------------------
    @property
    def role(self) -> Role:
        return Role.LEADER if self.primary is not None else Role.FOLLOWER

    @property
    def term(self) -> int:
        return self.epoch

    @property
    def leader_id(self) -> str | None:
        return self.primary_id

    @property
    def confirmed(self) -> bool:
        """A primary takes writes, and commits, once confirmed (see the module docstring)."""
        return self.primary is not None and self.primary.confirmed

    @property
    def is_leader(self) -> bool:
        return self.confirmed

    @property
    def joining(self) -> bool:
        """A pristine store in a controlled group, not yet cleared by the controller: it waits as `recovering`
        does (what it could have acknowledged is unknown), but nothing is known lost, so the server reports it
        as joining (server/group.py). Whether the group exists does not change that: a member that starts a
        moment after the others finds its group touched (a takeover recorded) exactly as a replaced disk
        does, and a fresh cluster must raise no recovery alert (the controller test's start race found it)."""
        return self.started_pristine and self.store.recovering

    quiesced = False  # (a backup reports, and a primary streams, whatever the load: ha/backup.py)

    def peer_down(self, peer: str, now_ms: int) -> Ready:
        return Ready()

    @property
    def recovering(self) -> bool:
        """May lack entries it acknowledged (damage, a cut tail, a pristine store), and not yet cleared: it
        takes no primary role (joining included)."""
        return self.store.recovering

    @property
    def tail_unverified(self) -> bool:
        """A tail cut at recovery (store.tail_cut, kept across restarts) may have held entries this node
        acknowledged (rot past the checkpoint): until it catches up with a primary it takes no epoch the
        controller elects it to, nor one a peer names it primary of (promote, _start)."""
        return self.cfg.controller is not None and self.store.tail_cut is not None and not self.store.recovering

    def caught_up(self, epoch: int, primary: str) -> bool:
        """A backup of `primary` in `epoch` holding, durable, what that primary had acknowledged when it began
        streaming to us (its commit, and the log it started its epoch with, which holds every entry
        acknowledged before it: a new primary's commit lags that for a while); later ones needed our ack,
        or we were out of the in-sync set."""
        b = self.backup
        return (b is not None and self.epoch == epoch and self.primary_id == primary and b.commit_seen > -2
                and self.store.durable_index >= b.commit_seen)

    def recovered(self, now_ms: int) -> Ready:
        """The controller found the group new, or this node out of the record's primary and in-sync set:
        a primary of its epoch by its own store (a new group's configured one) takes that role again."""
        out = Ready()
        self.store.set_recovering(False)
        self.store.clear_tail_cut()  # (caught up with the record's primary, or out of the record)
        if self._withheld:
            self._withheld = False
            if self.primary_id is None:
                self.primary_id = self.node_id
                self._start(now_ms, out)
        return out

    def set_members(self, members: Sequence[str], now_ms: int) -> None:
        """The members the controller's record names (they follow its group's configuration: ha/record.py).
        A member removed is out of the in-sync set already; this node, removed, keeps its log and serves no
        primary role (the record never names a non-member primary)."""
        self.members = list(members)
        self.isr &= set(members)
        if self.primary is not None:
            self.primary.set_members(self.members, now_ms)

    def expiry_safe_index(self, now_ms: int, member_timeout_ms: int) -> int:
        """What every member holds (the primary knows); a backup keeps to its commit."""
        committed = self.store.committed_index
        p = self.primary
        if p is None:
            return committed
        safe = committed
        for b in p.backups.values():
            if now_ms - b.heard_ms <= member_timeout_ms:
                safe = min(safe, b.acked_index)
        return safe

    def peer_match(self, peer: str) -> int:
        return self.primary.backup_acked(peer) if self.primary is not None else -1

    def waiting_requests(self) -> list[RequestId]:
        """The request ids of the client appends this primary has not answered yet."""
        return self.primary.appends.waiting() if self.primary is not None else []

    def peers_disk_full(self) -> list[str] | None:
        return None  # (a backup whose disk is full goes quiet and leaves the in-sync set: backup.py)

    def status(self) -> dict[str, object]:
        doc: dict[str, object] = {"replication": self.replication, "ack": self.cfg.ack, "epoch": self.epoch,
                                  "primary": self.primary_id, "confirmed": self.confirmed,
                                  "last_epoch": self.store.end_term, "members": sorted(self.members)}
        if self.store.tail_cut is not None:  # declines elections until caught up (tail_unverified)
            doc["tail_cut"] = self.store.tail_cut
        p = self.primary
        if p is not None:
            doc["in_sync"] = sorted(p.isr)
            doc["in_sync_effective"] = sorted(p.commit_set - p.isr_leaving)
            doc["backup_offsets"] = {b.id: b.acked_offset for b in p.backups.values()}
            doc["refused_reports"] = list(p.refusals)
        elif self.backup is not None:
            doc["streaming"] = self.backup.streaming
            if self.backup.last_error:
                doc["last_frame_error"] = self.backup.last_error
        return doc

    # -- inputs ------------------------------------------------------------------------------------
    def tick(self, now_ms: int) -> Ready:
        out = Ready()
        if self.primary is not None:
            self.primary.tick(now_ms, out)
        elif self.backup is not None:
            self.backup.tick(now_ms, out)
        return out

    def step(self, message: HaMessage, now_ms: int) -> Ready:
        return self.step_batch((message,), now_ms)

    def step_batch(self, messages: Iterable[HaMessage], now_ms: int) -> Ready:
        out = Ready()
        for m in messages:
            self._route(m, now_ms, out)
        return out

    def propose_many(self, requests: Sequence[AppendRequest], now_ms: int, wall_ms: int = 0) -> Ready:
        out = Ready()
        p = self.primary
        if p is None or not self.confirmed:
            code = ResponseCode.NOT_LEADER if p is None else ResponseCode.LEADER_NOT_READY
            leader = self.primary_id if p is None else self.node_id
            for r in requests:
                out.completions.append(Completion(r.request_id, int(code), APPEND, term=self.epoch, leader_id=leader))
            return out
        p.propose(requests, now_ms, wall_ms, out)
        return out

    def propose(self, bodies: Sequence[bytes], now_ms: int, request_id: int | None = None) -> Ready:
        rid = request_id if request_id is not None else self._request_id()
        out = self.propose_many([AppendRequest(rid, bodies)], now_ms)
        out.request_id = rid
        return out

    def on_flushed(self, durable_index: int, now_ms: int) -> Ready:
        out = Ready()
        if self.primary is not None:
            self.primary.on_flushed(now_ms, out)
        elif self.backup is not None:
            self.backup.on_flushed(durable_index, now_ms, out)
            if self.store.tail_cut is not None and self.primary_id is not None and self.caught_up(
                    self.epoch, self.primary_id):
                self.store.clear_tail_cut()
                self.stats["ha_tail_cut_made_good"] += 1
        return out

    def transfer_leader(self, target: str, now_ms: int, request_id: int | None = None) -> Ready:
        rid = self._request_id() if request_id is None else request_id
        out = Ready(request_id=rid)
        out.completions.append(Completion(rid, int(ResponseCode.UNSUPPORTED), TRANSFER, term=self.epoch,
                                          leader_id=self.primary_id))
        return out

    def report_corruption(self, error: CorruptEntryError, now_ms: int) -> Ready:
        """A read (or the scrub) found an entry of this replica corrupt: a backup cuts there and fetches it
        again from its primary. A primary's copy is the one the others are made from: it cuts once it
        follows another (_start); with a controller it asks for an in-sync backup to be elected in its place
        (as for a full disk), without one an operator promotes a backup."""
        out = Ready()
        index = error.index
        self.stats["corrupt_reads"] += 1
        if index is None or index > self.store.end_index:
            return out
        if self.backup is not None:
            self._cut_at(index)
            self.backup.streaming = False
            self.backup.next_try = now_ms
            self.backup.commit_seen = -2  # caught up again only with what the primary has acknowledged since
        elif self.primary is not None:
            self.damaged_at = index if self.damaged_at is None else min(index, self.damaged_at)
            self.primary.damaged = self.cfg.controller is not None
        return out

    def _cut_at(self, index: int) -> None:
        """Cut the log before the damaged entry `index`, to be streamed again. Entries this node
        acknowledged may be gone, so with a controller it is `recovering` until it holds them again: never
        elected meanwhile, and out of the in-sync set (as after a replaced disk)."""
        keep = max(index, self.store.begin_index) - 1
        self.started_pristine = False
        self.store.discard_after(keep)
        self.producers.truncate_after(keep)
        if self.cfg.controller is not None:
            self.store.set_recovering(True)

    def _cut_damaged(self, index: int, reason: str) -> None:
        """At start, an entry failed its checks (bit rot below the checkpoint, which recovery does not
        read): cut the log before it, to be streamed again. The log may have lost acknowledged entries, so
        it is `recovering`, as a replaced disk: it never leads with that log, and with a controller it
        leaves the in-sync set until it holds them again (server/controller.py). Without a controller a
        primary stays withheld for an operator to promote a backup."""
        self.store.discard_after(max(index, self.store.begin_index) - 1)
        self._lost_at_start()
        self.stats["corrupt_entries_cut_at_start"] += 1

    def _primary_by_store(self) -> bool:
        epoch, primary = self.store.load_vote()
        return (primary if epoch else self.cfg.primary) == self.node_id

    def _lost_at_start(self) -> None:
        """The log may lack entries this node acknowledged: cut for damage, or by the store's recovery
        (durable entries missing, or a primary's torn tail past the checkpoint). A primary restarted so
        would lead with that log, and its handshakes cut its backups to it: acknowledged entries lost
        everywhere (the chaos run with bit flips found it). So it is `recovering`, as a replaced disk.

        A torn tail counts only on a primary: past the checkpoint recovery cannot tell a torn write (never
        acknowledged) from rot in entries flushed since, and after a power cut every member may have one;
        were all recovering, nobody would lead. A backup's lost acknowledgements show in its handshake to
        the primary that counted them (primary.py: it leaves the in-sync set)."""
        if self.cfg.controller is not None or self._primary_by_store():
            self.store.set_recovering(True)  # (a backup without a controller: its primary drops it, as lost)
        self.stats["log_lost_entries_at_start"] += 1

    # -- epochs ------------------------------------------------------------------------------------
    def promote(self, epoch: int, now_ms: int, isr: set[str] | None = None, confirmed: bool = True) -> Ready:
        """Become the primary of `epoch` (higher than any this node has seen): confirmed at once, or (the
        controller, once it recorded the takeover) by `confirm`. Elected by the controller with a tail cut
        at recovery not yet made good, it takes nothing and is `recovering` instead: another in-sync member
        is elected, or the epoch goes back to its holder (the server's controller, the simulator's)."""
        out = Ready()
        if self.recovering:
            raise ValueError(f"{self.node_id} is recovering (an empty, damaged or cut store) and not cleared")
        if self.tail_unverified and not confirmed:
            self._refuse_with_tail_cut()
            return out
        self.store.clear_tail_cut()  # (an operator's promotion: its word)
        if epoch <= self.epoch and not (epoch == self.epoch and self.primary_id == self.node_id):
            raise ValueError(f"epoch {epoch} is not above this node's epoch {self.epoch}")
        # Without a record of who is in sync (a manual promotion), backups join as they prove they hold
        # everything this node starts with: none is waited for that may be dead (the old primary).
        self.isr = set(isr) if isr is not None else set()
        self._enter(epoch, self.node_id, now_ms, out)
        assert self.primary is not None
        self.primary.confirmed = confirmed
        return out

    def behind(self, epoch: int, primary: str) -> bool:
        """Whether the record's (epoch, primary) is news: a newer epoch, or the primary of ours when we know of
        none (a withheld primary tells a stale member its epoch, naming nobody)."""
        return epoch > self.epoch or (epoch == self.epoch and self.primary_id is None and primary != self.node_id)

    def follow(self, epoch: int, primary: str | None, now_ms: int) -> Ready:
        """Follow `primary` in `epoch` (never lower than this node's)."""
        out = Ready()
        if epoch > self.epoch or (epoch == self.epoch and primary != self.primary_id):
            self._enter(epoch, primary, now_ms, out)
        return out

    def confirm(self, isr: set[str] | None = None) -> None:
        """The controller's record names this node primary of its epoch (with that in-sync set)."""
        if self.primary is not None:
            self.primary.confirmed = True
            if isr is not None:
                self.primary.isr_recorded(isr)

    def _enter(self, epoch: int, primary: str | None, now: int, out: Ready) -> None:
        if self.primary is not None:
            self.primary.close(primary, out)
        self.store.save_vote(epoch, primary)
        self.epoch, self.primary_id = epoch, primary
        self._start(now, out)
        self.stats["epoch_changes"] += 1

    def _refuse_with_tail_cut(self) -> None:
        self.store.set_recovering(True)  # (recovered() forgets the cut once it caught up)
        self.stats["ha_primary_refused_tail_cut"] += 1

    def _start(self, now: int, out: Ready) -> None:
        self.primary = self.backup = None
        if self.primary_id == self.node_id and self.tail_unverified:  # named primary by a peer's message
            self._refuse_with_tail_cut()
        if self.primary_id == self.node_id and self.recovering:
            # A store that may have lost acknowledged entries never leads, not even unconfirmed: its
            # handshakes would cut its backups' logs to its own. It waits for the controller's record.
            self.primary_id, self._withheld = None, True
        if self.primary_id == self.node_id:
            # A partial request at the end of the log was never acknowledged: drop it before leading.
            self.stats["partial_requests_cut"] += bool(self.producers.cut_partial_tail(self.store))
            self.primary = Primary(self.node_id, self.group, self.members, self.store, self.cfg, self.config,
                                   self.epoch, self.producers, self.stats, self.isr, now)
            self.primary.confirmed = len(self.members) == 1
            self.primary.damaged = self.damaged_at is not None and self.cfg.controller is not None  # (still)
        else:
            if self.damaged_at is not None:  # a damaged primary replaced as it asked: now cut and fetch again
                self._cut_at(self.damaged_at)
                self.damaged_at = None
            self.backup = Backup(self.node_id, self.group, self.store, self.cfg, self.epoch, self.primary_id,
                                 self.producers, self.stats, now)
        out.changes.append(RoleChange(self.role, self.epoch, self.primary_id))

    def _route(self, m: HaMessage, now: int, out: Ready) -> None:
        if m.term > self.epoch:
            self.stats["higher_epoch_seen"] += 1
            self._enter(m.term, m.primary, now, out)
        elif m.term < self.epoch:
            # A stale member: tell it the epoch it missed (and who leads it), so it stops or follows.
            self.stats["stale_epoch_messages"] += 1
            out.messages.append(HaReport(self.group, self.node_id, m.sender, self.epoch, self.primary_id, -1))
            return
        p, b = self.primary, self.backup
        t = type(m)
        if t is HaHandshake and self._withheld and m.sender != self.node_id:
            self._empty_logs[m.sender] = m.end_index < 0 and m.begin_index <= 0  # type: ignore[union-attr]
            if all(self._empty_logs.get(o) for o in self.members if o != self.node_id):
                # Every other member follows us and holds nothing: no entry was ever acknowledged (a new
                # group whose record moved on before we saw it new, or a primary whose disk was replaced
                # before anything it streamed was acknowledged). Lead after all, but in a new epoch: frames
                # an earlier incarnation streamed in this one may still be on their way to a backup, which
                # could not tell them from ours.
                self.stats["ha_withheld_primary_cleared"] += 1
                self.own_epoch = self.epoch
                out.changes.extend(self.recovered(now).changes)
            return
        if p is not None:
            if m.sender == self.node_id:
                return
            if t is HaHandshake:
                p.on_handshake(m, now, out)  # type: ignore[arg-type]
            elif t is HaReport and m.offset >= 0:  # type: ignore[union-attr]
                if not p.confirmed and self.cfg.controller is None:
                    p.confirmed = True  # a backup follows this epoch: no newer primary it knows of
                p.on_report(m, now, out)  # type: ignore[arg-type]
            elif t is HaTransfer or t is HaTruncate:
                self.stats["two_primaries_seen"] += 1  # same epoch, another primary: cannot happen
        elif b is not None:
            if m.primary is not None and self.primary_id is None:
                if m.primary == self.node_id:  # a peer's word never makes us primary: promote or the controller
                    self.stats["ha_named_primary_by_peer"] += 1
                    return
                self._enter(m.term, m.primary, now, out)
                b = self.backup
                assert b is not None
            if t is HaTransfer:
                b.on_transfer(m, now, out)  # type: ignore[arg-type]
            elif t is HaTruncate:
                b.on_truncate(m, now, out)  # type: ignore[arg-type]

    def _request_id(self) -> int:
        rid = self._next_request_id
        self._next_request_id += 1
        return rid
