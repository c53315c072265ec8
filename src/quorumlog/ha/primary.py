"""The primary's side of primary/backup replication: client appends, streaming, acks, the in-sync set.

Entries are appended as a Raft leader appends them (core/appends.py: producers, conditional appends,
one run per call) with the epoch as their term. Each backup is streamed the raw bytes of the log from
the offset it reported, in frames of at most `ha_transfer_batch_bytes`, and only up to the primary's own
durable index: a backup never holds an entry its primary could lose in a crash, so within one epoch
every copy is a prefix of the primary's log.

The commit rule is Kafka's: an entry is committed once it is durable here and every backup of the
in-sync set (ISR) acked it, and a SYNC append is refused with SLAVE_NOT_AVAILABLE, nothing written, while
fewer than `min_in_sync` backups are in the set. A backup joins the set once it holds everything
committed, and leaves it when it stays more than `max_in_sync_lag` bytes behind, or silent, for
`ha_ack_timeout_ms`; with a controller, leaving takes effect only once the controller recorded it, so a
backup the controller may promote holds every acknowledged entry, and only backups it recorded count
towards `min_in_sync` (a joiner still acks before commit). ASYNC commits at the local flush.

A report is trusted only at a frame boundary this primary sent that backup (or, after a handshake, at the
end of the agreed entry): an offset beyond what was sent, or inside an entry, is refused and counted,
and the backup must handshake again. It can never make a SYNC append succeed (rocketmq#3015, #1155).
Nor can a report that says `recovering` (a backup whose controller has not cleared its replaced or damaged
store): that backup may have forgotten an epoch it took, and so not know this one is superseded.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Sequence

from ..config import HaConfig, RaftConfig
from ..core.appends import AppendRequest, Appends
from ..core.producers import ProducerTable
from ..core.ready import APPEND, Completion, Ready
from ..errors import QuorumLogError, ResponseCode
from ..store.base import LogStore
from .epochs import agreed_end, epoch_list
from .messages import FRAME_HEADER, HaHandshake, HaReport, HaTransfer, HaTruncate, handshake_digest, unpack_epochs

# Frames in flight to one backup before the primary waits for its acks.
WINDOW_FRAMES = 8


class BackupView:
    """What the primary knows of one backup."""

    __slots__ = ("id", "streaming", "expect_offset", "expect_start", "expect_index", "next_index", "next_offset",
                 "acked_index", "acked_offset", "inflight", "heard_ms", "sent_ms", "sent_commit", "behind_since",
                 "lost", "vouched")

    def __init__(self, backup_id: str) -> None:
        self.id = backup_id
        self.streaming = False  # handshake done and its first report accepted
        self.expect_offset = -1  # after a handshake: the report that starts streaming
        # ...or this one: where the next entry starts when a segment's blank end comes first (the backup
        # expired that segment), -1 when nothing lies between.
        self.expect_start = -1
        self.expect_index = -1
        self.next_index = 0  # the next entry to send, at byte next_offset
        self.next_offset = 0
        self.acked_index = -1
        self.acked_offset = -1
        self.inflight: deque[tuple[int, int]] = deque()  # (end offset, last index) of each frame sent
        self.heard_ms = -1 << 62
        self.sent_ms = -1 << 62
        self.sent_commit = -1
        self.behind_since: int | None = None  # since when it is more than max_in_sync_lag bytes behind
        self.lost = False  # it lost entries it had acknowledged (a replaced disk), until it holds them again
        # Its latest report did not say `recovering` (HaReport): its acks count. One that says it counts for
        # nothing (no commit, no joining, no hand-off) until its controller clears it.
        self.vouched = True


class Primary:
    """The primary of one epoch."""

    def __init__(self, node_id: str, group: str, members: Sequence[str], store: LogStore, cfg: HaConfig,
                 raft: RaftConfig, epoch: int, producers: ProducerTable, stats: Counter[str], isr: set[str],
                 now: int) -> None:
        self.node_id = node_id
        self.group = group
        self.store = store
        self.cfg = cfg
        self.raft = raft
        self.epoch = epoch
        self.stats = stats
        self.sync = cfg.ack == "sync"
        # A SYNC append that waited out its time is RocketMQ's FLUSH_SLAVE_TIMEOUT.
        timeout = ResponseCode.FLUSH_SLAVE_TIMEOUT if self.sync else ResponseCode.WAIT_QUORUM_ACK_TIMEOUT
        self.recorded_by_controller = cfg.controller is not None
        # With a controller, a primary whose own disk is full asks it to elect an in-sync backup instead.
        self.appends = Appends(store, raft, stats, producers, epoch, node_id, timeout_code=timeout,
                               hand_off=self._hand_off if self.recorded_by_controller else None)
        self.hand_off_to: str | None = None  # the backup to elect in its place, until an append fits again
        self.damaged = False  # a stored entry failed its checks: hand off for good (HaNode.report_corruption)
        self.backups = {m: BackupView(m) for m in members if m != node_id}
        self.isr = set(isr) & set(self.backups)  # as recorded (by the controller, or here without one)
        self.isr_joining: set[str] = set()  # caught up, not recorded yet: counted for commit already
        self.isr_leaving: set[str] = set()  # to drop once recorded: still counted for commit
        # Named primary by a promotion, the controller's record, or (without a controller) a backup that
        # follows this epoch. Until then nothing commits: the in-sync set here may not be the one recorded
        # for this epoch (we may have learned of our election from a peer, before the record).
        self.confirmed = False
        self.refusals: list[str] = []  # the latest refused reports, for the operator's log
        # Every acknowledged entry of an earlier epoch is in the log it starts with (its commit index may be
        # behind): a backup joins the in-sync set only holding all of it (Kafka's leader epoch start offset).
        self.start_index = store.end_index
        for b in self.backups.values():
            b.heard_ms = now  # give every backup a full ack timeout before it counts as silent

    # -- the in-sync set ---------------------------------------------------------------------------
    @property
    def commit_set(self) -> set[str]:
        return self.isr | self.isr_joining

    @property
    def counted(self) -> set[str]:
        """The backups counted towards min_in_sync. With a controller, only those it recorded: a joiner it
        has not recorded yet is unknown to it, and a primary that lost its store before the record names
        the joiner would have its epoch handed back (epochs.hand_back_to) past what the joiner acked."""
        return self.isr if self.recorded_by_controller else self.commit_set

    def wanted_isr(self) -> set[str] | None:
        """The set to record at the controller, when it differs from the recorded one."""
        want = {m for m in (self.isr | self.isr_joining) - self.isr_leaving if not self.backups[m].lost}
        return want if want != self.isr else None

    def isr_recorded(self, isr: set[str]) -> None:
        """The controller (or, without one, this primary) recorded `isr`."""
        self.isr = set(isr) & set(self.backups)
        self.isr_joining -= self.isr
        self.isr_leaving &= self.isr

    def set_members(self, members: Sequence[str], now: int) -> None:
        """The group's members changed (the controller's record): stream to a new one from the handshake it
        sends (it joins the in-sync set once caught up, as any backup); forget one removed (the record took
        it out of the in-sync set already)."""
        for m in members:
            if m != self.node_id and m not in self.backups:
                self.backups[m] = b = BackupView(m)
                b.heard_ms = now
        gone = set(self.backups) - set(members)
        for m in gone:
            del self.backups[m]
        self.isr -= gone
        self.isr_joining -= gone
        self.isr_leaving -= gone

    def available(self) -> bool:
        return not self.sync or len(self.counted - self.isr_leaving) >= self.cfg.min_in_sync

    # -- appends -----------------------------------------------------------------------------------
    def propose(self, requests: Sequence[AppendRequest], now: int, wall_ms: int, out: Ready) -> None:
        if not self.available():
            for r in requests:
                self.stats["append_slave_not_available"] += 1
                out.completions.append(Completion(r.request_id, int(ResponseCode.SLAVE_NOT_AVAILABLE), APPEND,
                                                  term=self.epoch, leader_id=self.node_id))
            return
        if self.appends.propose(requests, now, wall_ms, self.store.committed_index, out):
            out.must_flush = True
            if not self.damaged:
                self.hand_off_to = None  # the disk has room again: stay

    def _hand_off(self, now: int, out: Ready) -> str | None:
        """This primary's disk refused an append, or its log is damaged: the in-sync backup to elect in its
        place (the controller is asked, controller.py), or None. Only a recorded in-sync backup holds every
        acknowledged entry; of those still heard and streaming, the furthest along is taken."""
        timeout = self.cfg.ha_ack_timeout_ms
        ready = [b for b in self.backups.values() if b.id in self.isr and b.id not in self.isr_leaving
                 and b.streaming and b.vouched and now - b.heard_ms <= timeout]
        if not ready:
            return None
        target = max(ready, key=lambda b: (b.acked_offset, b.id)).id
        if target != self.hand_off_to:
            self.hand_off_to = target
            self.stats["damage_hand_offs" if self.damaged else "disk_full_hand_offs"] += 1
        return target

    def on_flushed(self, now: int, out: Ready) -> None:
        self._advance(out)
        self._stream(now, out)

    def tick(self, now: int, out: Ready) -> None:
        if self.damaged:
            self._hand_off(now, out)
        self._check_isr(now)
        self.appends.expire(now, out)
        self._advance(out)
        self._stream(now, out)
        beat = self.cfg.ha_heartbeat_interval_ms
        committed = self.store.committed_index
        for b in self.backups.values():
            if now - b.sent_ms >= beat or (b.streaming and b.sent_commit < committed):
                self._send(b, b"", now, out)

    def _check_isr(self, now: int) -> None:
        timeout = self.cfg.ha_ack_timeout_ms
        lag_limit = self.cfg.max_in_sync_lag
        wp = self.store.write_pos
        committed = self.store.committed_index
        for b in self.backups.values():
            if b.lost and b.streaming and b.vouched and b.acked_index >= max(committed, self.start_index):
                b.lost = False
            # Lagging counts only when it lasts: a burst of writes puts every backup behind for a moment
            # (Kafka dropped its count-based lag rule for flapping under bursts).
            if not b.streaming or wp - b.acked_offset <= lag_limit:
                b.behind_since = None
            elif b.behind_since is None:
                b.behind_since = now
        for bid in self.isr | self.isr_joining:
            b = self.backups[bid]
            if now - b.heard_ms > timeout or (b.behind_since is not None and now - b.behind_since > timeout):
                if bid in self.isr_joining:
                    # With a controller its joining may be recorded already (an answer lost, a request in
                    # flight): it stays counted, and leaves once recorded, like any in-sync backup.
                    if not self.recorded_by_controller:
                        self.isr_joining.discard(bid)
                elif bid not in self.isr_leaving:
                    self.isr_leaving.add(bid)
                    self.stats["isr_shrinks"] += 1
        for bid, b in self.backups.items():
            if b.lost or not b.vouched:
                continue
            if bid not in self.isr and bid not in self.isr_joining and b.streaming \
                    and now - b.heard_ms <= timeout and b.acked_index >= max(committed, self.start_index):
                self.isr_joining.add(bid)
                self.isr_leaving.discard(bid)
                self.stats["isr_expands"] += 1
            elif bid in self.isr_leaving and b.streaming and now - b.heard_ms <= timeout and b.behind_since is None:
                self.isr_leaving.discard(bid)  # back in time before the change was recorded
        if not self.recorded_by_controller:
            want = self.wanted_isr()
            if want is not None:
                self.isr_recorded(want)

    def _advance(self, out: Ready) -> None:
        if not self.confirmed:
            return
        store = self.store
        commit = store.durable_index
        if self.sync:
            if len(self.counted) < self.cfg.min_in_sync:
                commit = -1  # fewer copies than promised: nothing more commits until a backup is in sync
            for bid in self.commit_set:
                b = self.backups[bid]
                acked = b.acked_index if b.vouched else -1
                if acked < commit:
                    commit = acked
            span = self.appends.producers.span_at(commit)
            if span is not None and commit < span[1]:
                commit = span[0] - 1  # acks may end inside a request; it commits whole (producers.py)
        if commit > store.committed_index:
            store.set_committed(commit)
            self.appends.producers.forget_spans(commit)
        self.appends.on_commit(store.committed_index, out)

    # -- streaming ---------------------------------------------------------------------------------
    def _stream(self, now: int, out: Ready) -> None:
        store = self.store
        durable = store.durable_index
        batch = self.cfg.ha_transfer_batch_bytes
        count = self.raft.push_batch_entries
        for b in self.backups.values():
            if not b.streaming:
                continue
            while b.next_index <= durable and len(b.inflight) < WINDOW_FRAMES:
                if b.next_index < store.begin_index:  # expired under it: it must start again
                    b.streaming = False
                    break
                data, n = store.read_raw(b.next_index, min(count, durable - b.next_index + 1), batch)
                if n == 0:
                    break
                end_offset = store.end_pos(b.next_index + n - 1)
                self._send(b, data, now, out)
                b.next_index += n
                b.next_offset = end_offset
                b.inflight.append((end_offset, b.next_index - 1))
                self.stats["ha_frames_sent"] += 1

    def _send(self, b: BackupView, data: bytes | memoryview, now: int, out: Ready) -> None:
        offset = b.next_offset if b.streaming else -1
        committed = self.store.committed_index
        out.messages.append(HaTransfer(self.group, self.node_id, b.id, self.epoch, self.node_id, committed,
                                       self.start_index, FRAME_HEADER.pack(offset, len(data)) + data))
        b.sent_ms = now
        b.sent_commit = committed

    # -- messages from backups ---------------------------------------------------------------------
    def on_handshake(self, m: HaHandshake, now: int, out: Ready) -> None:
        b = self.backups.get(m.sender)
        if b is None:
            return
        b.streaming = False  # (not heard_ms: only acks keep a backup in the in-sync set)
        b.inflight.clear()
        if m.end_index < b.acked_index:
            # It lost entries it acknowledged (a replaced disk): the record must not count on it, so it
            # leaves the in-sync set at once and joins again only holding the commit and the log this epoch
            # started with (start_index), as any joiner. Commits still wait for it until the record drops
            # it (a change adding it may be in flight, as for any joining one).
            self.stats["ha_backup_lost_acked"] += 1
            b.lost = True
            if b.id in self.isr:
                self.isr_leaving.add(b.id)
        store = self.store
        try:
            theirs = unpack_epochs(m.epochs)
        except ValueError as e:
            self._refuse(b, f"bad handshake: {e}")
            return
        keep = agreed_end(epoch_list(store), theirs)
        if keep is None:  # no epoch in common among the entries both still hold
            if m.begin_index <= store.begin_index:
                keep = store.begin_index - 1  # (the backup checks its entry there: backup.py)
            elif m.begin_index - 1 <= store.end_index:
                # It expired further than we did: entries expire once committed, and we hold the
                # committed log, so its log matches ours up to its first entry.
                keep = m.begin_index - 1
            else:
                keep = -2
        keep = min(keep, m.end_index, store.end_index)
        if keep < store.begin_index - 1 or keep < m.begin_index - 1:
            keep = -2  # nothing usable in common: it restarts at this log's begin
        b.expect_index = store.begin_index - 1 if keep == -2 else keep
        b.expect_offset = self._offset_after(b.expect_index)
        b.expect_start = self._next_start(b.expect_index)
        out.messages.append(HaTruncate(self.group, self.node_id, b.id, self.epoch, self.node_id, keep,
                                       store.begin_index, store.begin_pos, store.begin_chain, store.begin_term,
                                       handshake_digest(m.begin_index, m.end_index, m.epochs)))
        b.sent_ms = now  # no heartbeat right behind it: it would say "not streaming" before the report lands
        self.stats["ha_handshakes"] += 1

    def on_report(self, m: HaReport, now: int, out: Ready) -> None:
        b = self.backups.get(m.sender)
        if b is None:
            return
        b.heard_ms = now
        if m.recovering == b.vouched:
            # It may lack what it acknowledged, or have acknowledged in an epoch it forgot: counted for commit
            # as holding nothing until its controller clears it, or takes it out of the in-sync set (asked by
            # the backup itself: controller_core.py, _vouched). Not taken out from here: a new group's backups
            # all start so, and are cleared a moment later.
            b.vouched = not m.recovering
            self.stats["ha_backup_recovering"] += m.recovering
        offset = m.offset
        if not b.streaming:
            if b.expect_offset < 0 or (offset != b.expect_offset and offset != b.expect_start):
                if b.expect_offset >= 0:
                    self._refuse(b, f"reported offset {offset} after the handshake, expected {b.expect_offset}")
                return
            b.streaming = True
            b.expect_offset = -1
            b.next_index = b.expect_index + 1
            b.next_offset = b.acked_offset = offset
            b.acked_index = b.expect_index
            self._stream(now, out)
            return
        if offset == b.acked_offset:
            return  # a keepalive: nothing new is durable there
        inflight = b.inflight
        while inflight and inflight[0][0] < offset:
            inflight.popleft()
        if not inflight or inflight[0][0] != offset:
            self._refuse(b, f"reported offset {offset}, which is no frame boundary sent to it (acked "
                            f"{b.acked_offset}, sent up to {b.next_offset})")
            return
        b.acked_offset, b.acked_index = inflight.popleft()
        self._advance(out)
        self._stream(now, out)

    def _refuse(self, b: BackupView, reason: str) -> None:
        """Stop trusting a backup's acks until it handshakes again (it is out of the in-sync set)."""
        self.stats["ha_refused_reports"] += 1
        self.refusals = [*self.refusals[-9:], f"{b.id}: {reason}"]
        b.streaming = False
        b.expect_offset = -1
        b.inflight.clear()
        if not self.recorded_by_controller:  # (with one, a joiner leaves through the record: _check_isr)
            self.isr_joining.discard(b.id)
        if b.id in self.isr:
            self.isr_leaving.add(b.id)

    def _next_start(self, index: int) -> int:
        """Where the entry after `index` starts, if a segment's blank end lies between them; else -1."""
        store = self.store
        if not store.begin_index <= index < store.end_index:
            return -1
        try:
            start = store.get(index + 1).pos
        except QuorumLogError:  # (unreadable: the report must then be the offset just past `index`)
            return -1
        return start if start != store.end_pos(index) else -1

    def _offset_after(self, index: int) -> int:
        store = self.store
        return store.begin_pos if index < store.begin_index else store.end_pos(index)

    def backup_acked(self, backup: str) -> int:
        b = self.backups.get(backup)
        return b.acked_index if b is not None else -1

    def close(self, leader: str | None, out: Ready) -> None:
        self.appends.step_down(leader, out)

