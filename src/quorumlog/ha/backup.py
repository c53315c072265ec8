"""A backup's side of primary/backup replication.

It handshakes with its primary (its epoch list), cuts its log where the primary says the two agree,
then writes the frames it is streamed: every entry's CRCs, chain, index and position are checked as a
Raft follower checks a push (store.append_encoded), and the bytes land as they are. It acks the offset
of each frame once that frame is durable, and reports its offset again every heartbeat interval, so the
primary hears from it while idle. A frame that does not continue its log (a gap, a lost frame, a
primary that restarted) or fails a check sends it back to the handshake. A frame its full disk refuses
makes it go quiet (no handshake, no report) until the primary has counted it out of the in-sync set, then
ask again: a backup that cannot store must not hold SYNC appends until they time out.
"""

from __future__ import annotations

from collections import Counter, deque

from ..config import HaConfig
from ..core.producers import ProducerTable
from ..core.ready import Ready
from ..errors import CorruptEntryError, DiskFullError, StoreError
from ..store.base import LogStore, check_reset
from .epochs import epoch_list
from .messages import FRAME_HEADER, HaHandshake, HaReport, HaTransfer, HaTruncate, handshake_digest, pack_epochs

HANDSHAKE_RETRY_MS = 200


class Backup:
    """The backup of one epoch, following `primary`."""

    def __init__(self, node_id: str, group: str, store: LogStore, cfg: HaConfig, epoch: int, primary: str | None,
                 producers: ProducerTable, stats: Counter[str], now: int) -> None:
        self.node_id = node_id
        self.group = group
        self.store = store
        self.cfg = cfg
        self.epoch = epoch
        self.primary = primary
        self.producers = producers
        self.stats = stats
        self.streaming = False
        self.streaming_since = now
        self.next_try = now
        self.heard_ms = now
        self.reported_ms = now
        self.reported = -1
        self.frames: deque[tuple[int, int]] = deque()  # (last index, end offset) written, not yet acked
        self.last_error = ""  # why the latest frame was refused (status: last_frame_error)
        self.quiet_until = now  # after a frame our full disk refused: no handshake before then
        # What the primary had acknowledged (its commit, and its epoch's start) by its first frame since
        # streaming began (-2: none yet): holding it, this backup holds every acknowledged entry (node.py).
        self.commit_seen = -2
        # The log up to here is known to be the primary's (agreed or streamed; entries of its epoch are its
        # own, streamed once durable): a truncate cutting below it answers an earlier handshake.
        self.held = store.end_index if store.end_term == epoch else store.begin_index - 1

    def tick(self, now: int, out: Ready) -> None:
        if self.primary is None:
            return
        if self.streaming and now - self.heard_ms > self.cfg.ha_ack_timeout_ms + self.cfg.ha_heartbeat_interval_ms:
            self.streaming = False  # the primary went quiet: start over when it is back
            self.stats["ha_primary_silent"] += 1
        if not self.streaming:
            if now >= self.next_try and now >= self.quiet_until:
                self.next_try = now + HANDSHAKE_RETRY_MS
                out.messages.append(HaHandshake(self.group, self.node_id, self.primary, self.epoch, self.primary,
                                                *self._log()))
            return
        if now - self.reported_ms >= self.cfg.ha_heartbeat_interval_ms:
            self._report(self.reported, now, out)

    def _log(self) -> tuple[int, int, bytes]:
        """What a handshake tells of our log: its span and epoch list."""
        s = self.store
        return s.begin_index, s.end_index, pack_epochs(epoch_list(s))

    def on_truncate(self, m: HaTruncate, now: int, out: Ready) -> None:
        if m.sender != self.primary or self.streaming:
            return
        if m.answers != handshake_digest(*self._log()):
            # An answer about another log than ours now: a handshake sent before our log changed, or by our
            # earlier incarnation, answered late (a paused primary). Cutting by it could cut what this primary
            # streamed us since, committed entries among them; the answer to our latest handshake follows.
            self.stats["ha_stale_truncates"] += 1
            return
        store = self.store
        reset = m.keep_index == -2 or m.keep_index < store.begin_index - 1
        keep = m.keep_index
        if not reset and keep == m.begin_index - 1 and store.begin_index - 1 <= keep <= store.end_index and (
                store.term_at(keep) != m.begin_term
                or (store.begin_pos if keep < store.begin_index else store.end_pos(keep)) != m.begin_pos):
            # The primary keeps us at the entry before its first, having expired what it could compare on.
            # Ours there is of another epoch (our own tail from an old one), or the primary's first entry
            # starts elsewhere (a segment's blank end, expired with that segment, which it cannot stream):
            # start again at its begin.
            reset = True
            self.stats["ha_kept_entry_differs"] += 1
        if (m.begin_index - 1 if reset else keep) < min(self.held, store.end_index):
            self.stats["ha_stale_truncates"] += 1  # a late answer (a retry, a duplicate): wait for the latest
            return
        if reset:
            try:  # before anything is cut: a primary names its own begin, which always starts a log
                check_reset(m.begin_index, m.begin_pos, m.begin_chain, m.begin_term, -1,
                            store.config.data_segment_bytes)
            except StoreError as e:
                self.last_error = str(e)
                self.stats["ha_bad_truncates"] += 1
                return
            if store.end_index >= store.begin_index or store.begin_index != m.begin_index:
                store.discard_after(store.begin_index - 1)
                store.reset(m.begin_index, m.begin_pos, m.begin_chain, m.begin_term)
                self.producers.clear()
                self.stats["ha_resets"] += 1
        elif m.keep_index < store.end_index:
            self.stats["ha_truncated_entries"] += store.end_index - m.keep_index
            store.discard_after(m.keep_index)
            self.producers.truncate_after(m.keep_index)
        self.frames.clear()
        self.streaming = True
        self.streaming_since = self.heard_ms = now
        self.held = store.end_index
        if store.durable_index >= store.end_index:
            self._report(store.write_pos, now, out)
        else:  # report once what is left is durable
            self.frames.append((store.end_index, store.write_pos))
            out.must_flush = True

    def on_transfer(self, m: HaTransfer, now: int, out: Ready) -> None:
        if m.sender != self.primary:
            return
        self.heard_ms = now
        frame = m.frame
        if len(frame) < FRAME_HEADER.size:
            return
        offset, size = FRAME_HEADER.unpack_from(frame)
        store = self.store
        if not self.streaming:
            if offset >= 0:
                self.next_try = now  # it streams to a handshake we no longer wait for: ask again
            return
        if offset < 0 and now - self.streaming_since > self.cfg.ha_heartbeat_interval_ms:
            # The primary no longer streams to us (it restarted, refused a report, or our entries expired
            # under us): handshake again now rather than after the silence timeout.
            self._handshake_again("ha_restarts_by_primary", now)
            return
        if offset >= 0 and offset != store.write_pos or size != len(frame) - FRAME_HEADER.size:
            # Out of order, or (a heartbeat names where the primary's frames end) a frame was lost.
            self._handshake_again("ha_frames_out_of_order", now)
            return
        if size:
            try:
                metas = store.append_encoded_metas(memoryview(frame)[FRAME_HEADER.size:])[1]
            except CorruptEntryError as e:
                self.last_error = str(e)
                self._handshake_again("ha_frames_corrupt", now)
                return
            except DiskFullError as e:  # nothing written: quiet until the primary counted us out
                self.last_error = str(e)
                self.quiet_until = now + self.cfg.ha_ack_timeout_ms + self.cfg.ha_heartbeat_interval_ms
                self._handshake_again("ha_frames_disk_full", now)
                return
            if metas:
                self.producers.record_metas(metas)
            self.held = store.end_index
            self.stats["ha_frames_written"] += 1
            self.frames.append((store.end_index, store.write_pos))
            out.must_flush = True
        if self.commit_seen == -2:
            self.commit_seen = max(m.committed, m.start)
        committed = min(m.committed, store.end_index)
        if committed > store.committed_index:
            store.set_committed(committed)
            self.producers.forget_spans(committed)

    def on_flushed(self, durable: int, now: int, out: Ready) -> None:
        frames = self.frames
        offset = -1
        while frames and frames[0][0] <= durable:
            offset = frames.popleft()[1]
        if offset >= 0 and self.streaming:
            self._report(offset, now, out)

    def _report(self, offset: int, now: int, out: Ready) -> None:
        assert self.primary is not None
        # A store that may lack what it acknowledged (controller mode: a replaced disk, a cut at damage) may
        # also have forgotten an epoch it took since: following a deposed primary it learnt of from that
        # primary's own frames, its ack would commit in a superseded epoch (the simulator's seed 212790). Until
        # its controller clears it, it says so, and the primary counts the report as progress only.
        recovering = self.cfg.controller is not None and self.store.recovering
        out.messages.append(HaReport(self.group, self.node_id, self.primary, self.epoch, self.primary, offset,
                                     recovering))
        self.reported = offset
        self.reported_ms = now

    def _handshake_again(self, why: str, now: int) -> None:
        self.stats[why] += 1
        self.streaming = False
        self.next_try = now
