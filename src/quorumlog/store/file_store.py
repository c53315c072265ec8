"""FileStore: DLedger's segmented data and index files, with CRCs checked on every read.

Layout of one store directory (`<data-dir>/<group>/<node-id>/`):
  data/       fixed-size data segments: entries (48-byte header, metadata run, body), blank records at
              segment ends
  index/      fixed-size index segments: a 32-byte unit per entry at offset index * 32
  checkpoint  begin (index, pos, chain, term), durable end, committed index and a recovery anchor
  currterm    current term and voted-for, replaced atomically before a vote is answered
  identity    the group identity the store was made for
  configs     the log's CONFIG entries and the one in force at its begin (configs.py), replaced
              atomically before an entry adds one and after a cut, expiry or reset
  producers   the producer table as of a log index (core/producer_snapshot.py), replaced atomically now
              and then and at a clean close: a start reads the log after that index only
  lock        flock'ed by the process that has the store open; holds its pid

This module opens and recovers the store and keeps its state, flushes and checkpoints; the rest of FileStore
is mixed in: appends (FileAppends, file_appends.py), reads (FileReads, file_reads.py), removals (FileCuts,
file_cuts.py) and configurations (FileConfigs, file_configs.py).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable
from typing import NoReturn

from ..config import StoreConfig
from ..entry import INDEX_UNIT_SIZE
from ..errors import CorruptEntryError, DiskError, DiskFullError, OutOfFilesError, StoreError
from .base import Damage
from .checkpoint import Checkpoint, StableState, check_token, read_checkpoint, read_if_present, write_checkpoint
from .configs import read_configs
from .dirlock import DirLock
from .durable_mark import DurableMark
from .file_appends import FileAppends
from .file_configs import FileConfigs
from .file_cuts import FileCuts
from .reader import RecentBatches
from .recovery import Scan, judge, scan
from .segments import SegmentList
from .stable import StableFiles
from .vfs import NO_SPACE, OUT_OF_FILES, OsFiles

PRODUCERS_FILE = "producers"

_DISK_PROBE_INTERVAL_S = 0.1
# ... or once this much was written since, whichever comes first: a fast writer on a small disk (a 64 MiB
# volume at 200 MB/s) wrote its whole headroom between two timed probes and met ENOSPC, which fails the store.
_DISK_PROBE_BYTES = 1 << 20


def store_dir(data_dir: str | os.PathLike[str], group: str, node_id: str) -> str:
    """Where the store of (group, node) lives under a node's data directory."""
    return os.path.join(os.fspath(data_dir), group, node_id)


def make_private_dirs(path: str) -> None:
    """os.makedirs(path, exist_ok=True), but every directory it makes (the node's data directory, the
    group's, the store's and those in it) is this user's only, 0700, whatever the umask: they hold the log.
    Directories that exist already keep their mode."""
    if os.path.isdir(path):
        return
    parent = os.path.dirname(os.path.normpath(path))
    if parent and parent != path:
        make_private_dirs(parent)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        if not os.path.isdir(path):
            raise


class FileStore(FileAppends, FileCuts, FileConfigs):
    """A LogStore on disk. Open it with FileStore(directory, config); recovery runs on open.

    Opening takes the directory's lock (StoreLockedError when another open store holds it) and checks
    the state files against the data (StoreStateError: the term and vote, or the data, are lost) before
    anything on disk changes. With repair=False (the default) recovery raises CorruptCommittedError when
    an entry at or below the checkpointed committed index or durable end is damaged or missing; with
    repair=True it cuts the log there and reports the loss in `damage`, so the node can re-fetch the
    range before it votes again.
    """

    def __init__(self, directory: str | os.PathLike[str], config: StoreConfig | None = None, *,
                 files: OsFiles | None = None, repair: bool = False,
                 disk_usage: Callable[[str], float] | None = None, defer_stable: bool = False) -> None:
        self.config = cfg = config or StoreConfig()
        self.defer_stable = defer_stable  # term, vote and flag taken at once, written by persist_stable()
        self.dir = os.fspath(directory)
        self.files = files or OsFiles()
        self._disk_usage = disk_usage or self.files.disk_usage
        self._max_body = cfg.max_body_bytes
        self._seg = cfg.data_segment_bytes
        self._failed: DiskError | None = None
        self._epoch = 0  # bumped by every truncation, so a concurrent flush knows what it synced
        # The last batches this store encoded as leader, kept so that pushing them to followers needs
        # no read back (and no second CRC check of bytes this process has just computed).
        self._recent = RecentBatches(16)
        self._state_lock = threading.Lock()  # a flush's check-and-set of _flushed vs a truncation
        self._closed = False
        self._disk_full = False
        self._next_disk_probe = 0.0
        self._next_disk_probe_pos = 0
        self.notes: list[str] = []  # what recovery repaired, for logs and check-store
        self._cp_written: Checkpoint | None = None  # the last checkpoint this process wrote (_checkpoint)
        try:
            make_private_dirs(self.dir)
        except OSError as e:
            raise StoreError(f"cannot create store directory {self.dir}: {e.strerror}") from None
        if not os.access(self.dir, os.R_OK | os.W_OK | os.X_OK):
            raise StoreError(f"store directory {self.dir} is not readable and writable")
        self._lock = DirLock(self.dir)  # before anything reads state that another process may change
        try:
            self._open(repair)
        except BaseException:
            self._lock.release()
            raise
        self._flusher: threading.Thread | None = None
        self._stop = threading.Event()
        if cfg.flush == "async":
            self._flusher = threading.Thread(target=self._flush_loop, name=f"flush:{self.dir}", daemon=True)
            self._flusher.start()

    # -- recovery ------------------------------------------------------------------------------
    def _open(self, repair: bool) -> None:
        cp = read_checkpoint(self.dir)
        configs = read_configs(self.dir)  # a damaged file refuses the open before anything on disk changes
        self._stable = StableFiles(self.dir, self.files, cp, os.path.exists(os.path.join(self.dir, "checkpoint")))
        try:
            make_private_dirs(os.path.join(self.dir, "data"))
            make_private_dirs(os.path.join(self.dir, "index"))
        except OSError as e:
            raise StoreError(f"cannot create store directory {self.dir}: {e.strerror}") from None
        self.data = SegmentList(os.path.join(self.dir, "data"), self._seg, self.files, prewrite=True)
        self.index = SegmentList(os.path.join(self.dir, "index"), self.config.index_segment_bytes, self.files)
        self._mark = DurableMark(self.dir, self.files)
        try:
            self._recover(cp, repair)
            self._recover_configs(configs)
        except BaseException:
            self.data.close()
            self.index.close()
            self._mark.close()
            raise

    def _recover(self, cp: Checkpoint, repair: bool) -> None:
        self.notes += self.data.load()
        self.notes += self.index.load(cache=True)
        # Segments wholly before the checkpointed begin were being expired when the process stopped.
        if self.data.drop_before(cp.begin_pos - cp.begin_pos % self._seg):
            self.notes.append("removed data segments left over from an interrupted expiry")
        result: Scan = scan(self.data, self.index, cp, self._max_body)
        self.notes += result.notes
        self._begin, self._begin_pos = cp.begin_index, cp.begin_pos
        self._begin_chain, self._begin_term = cp.begin_chain, cp.begin_term
        marked = self._mark.end  # what was durable when the process stopped (durable_mark.py)
        judged = cp if marked is None or marked <= cp.end_index else dataclasses.replace(cp, end_index=marked)
        self._damage: Damage | None = judge(self.dir, result, judged, repair, self.notes)
        self._end = result.next_index - 1
        self._end_term = result.end_term
        self._chain = result.chain
        self._write_pos = result.write_pos
        # Remembered (in the checkpoint) until the node says it holds what it may have acknowledged again.
        # Past a valid mark a bad entry is a torn write, never acknowledged: nothing to remember.
        cut = result.next_index if result.error is not None and marked is None and not self._damage else -1
        cuts = [i for i in (cp.tail_cut, cut) if i >= 0]
        self.tail_cut = min(cuts) if cuts else None
        if result.error is not None:
            self.notes.append(f"cut a torn or corrupt tail at entry {result.next_index} "
                              f"(pos {result.write_pos}): {result.error}")
        # Nothing stale may remain past the end: zero the rest of the tail segment if a corrupt tail
        # was cut, and drop later segments of data and index (all data segments when the one holding
        # begin_pos is missing: a log with a hole cannot continue past it).
        if result.dirty_tail:
            seg_end = self._write_pos - self._write_pos % self._seg + self._seg
            self.data.zero(self._write_pos, seg_end)
        self.data.drop_after(self._write_pos)
        self.index.drop_after(max((self._end + 1) * INDEX_UNIT_SIZE, self.index.start))
        self._committed = min(cp.committed_index, self._end)
        # While damaged, the checkpoint keeps naming what was committed and what may have been
        # acknowledged, so that a second crash does not forget the debt.
        self._committed_floor = cp.committed_index if self._damage else -1
        self._end_floor = self._damage.committed_index if self._damage else -1
        self.data.sync()
        self.index.sync()
        self._flushed = self._end
        # What the checkpoint on disk names: a truncation below its durable end must lower that first.
        self._cp_end, self._cp_committed = cp.end_index, cp.committed_index
        if result.error is not None or result.rebuilt or self._damage:
            self.checkpoint()  # (first: it keeps a damage's debt, which the mark below no longer names)
        self._set_mark(self._end)

    # -- state ---------------------------------------------------------------------------------
    @property
    def begin_index(self) -> int:
        return self._begin

    @property
    def end_index(self) -> int:
        return self._end

    @property
    def end_term(self) -> int:
        return self._end_term

    @property
    def committed_index(self) -> int:
        return self._committed

    @property
    def unsynced_bytes(self) -> int:
        """Data written since the last flush began: about what the next flush writes out."""
        return self.data.unsynced_bytes

    @property
    def durable_index(self) -> int:
        return self._flushed if self.config.flush == "sync" else self._end

    @property
    def write_pos(self) -> int:
        return self._write_pos

    @property
    def damage(self) -> Damage | None:
        return self._damage

    @property
    def begin_term(self) -> int:
        return self._begin_term

    @property
    def begin_pos(self) -> int:
        return self._begin_pos

    @property
    def begin_chain(self) -> int:
        return self._begin_chain

    @property
    def identity(self) -> str | None:
        return self._stable.identity

    def set_identity(self, identity: str) -> None:
        self._check_writable()
        check_token(identity, "identity")
        try:
            self._stable.set_identity(identity)
        except OSError as e:
            self._fail(e)

    def producer_snapshot(self) -> bytes | None:
        try:
            return read_if_present(os.path.join(self.dir, PRODUCERS_FILE))
        except StoreError:
            return None  # (unreadable: the table is rebuilt from the whole log)

    def save_producer_snapshot(self, blob: bytes) -> None:
        """Not the log: a failed write (StoreError) leaves the store working and the last file whole."""
        self._check_writable()
        path = os.path.join(self.dir, PRODUCERS_FILE)
        try:
            self.files.write_atomic(path, blob)
        except OSError as e:
            raise StoreError(f"{path}: {e.strerror}: the producer table is read from the whole log at the next "
                             "start") from None

    # -- writes --------------------------------------------------------------------------------
    def _check_writable(self) -> None:
        if self._failed is not None:
            raise DiskError(f"store {self.dir} failed earlier and must be reopened: {self._failed}") from self._failed
        if self._closed:
            raise StoreError(f"store {self.dir} is closed")

    @property
    def disk_full(self) -> bool:
        """The last disk probe found use at or past disk_full_ratio (appends are refused meanwhile)."""
        return self._disk_full

    def _check_space(self) -> None:
        now = time.monotonic()
        if now >= self._next_disk_probe or self._write_pos >= self._next_disk_probe_pos:
            self._next_disk_probe = now + _DISK_PROBE_INTERVAL_S
            self._next_disk_probe_pos = self._write_pos + _DISK_PROBE_BYTES
            self._disk_full = self._disk_usage(self.dir) >= self.config.disk_full_ratio
        if self._disk_full:
            raise DiskFullError(f"disk use at {self.dir} is past disk_full_ratio {self.config.disk_full_ratio}")

    def _transient_or_fail(self, e: OSError) -> NoReturn:
        """Out of file descriptors, or of space, before anything of the log was written (a segment made
        ahead, a state file replaced through a temp file): a transient error, what was durable stands.
        Anything else fails the store."""
        if e.errno in OUT_OF_FILES:
            raise OutOfFilesError(f"{self.dir}: no file descriptor free ({e.strerror}); nothing was written") \
                from None
        if e.errno in NO_SPACE:
            raise DiskFullError(f"{self.dir}: {e.strerror}; nothing was written") from None
        self._fail(e)

    def _heal(self) -> None:
        """The lost entries are back: those committed before the loss are committed again."""
        d = self._damage
        if d is not None and self._end >= d.committed_index:
            self._committed = max(self._committed, min(self._committed_floor, self._end))
            self._damage = None
            self._committed_floor = self._end_floor = -1

    def clear_damage(self) -> None:
        self._check_writable()
        if self._damage is None:
            return
        self._committed = max(self._committed, min(self._committed_floor, self._end))
        self._damage = None
        self._committed_floor = self._end_floor = -1
        self.checkpoint()

    def clear_tail_cut(self) -> None:
        self._check_writable()
        if self.tail_cut is not None:
            self.tail_cut = None
            self.checkpoint()

    def set_committed(self, index: int) -> None:
        self._committed = max(self._committed, min(index, self._end))

    def flush(self) -> int:
        self._check_writable()
        # flush() may run in a worker thread while the owner appends or truncates. Capture the end
        # before syncing (appends after it are not covered); a truncation meanwhile (a new epoch) may
        # have replaced entries up to that end with unsynced ones, so then nothing more is claimed.
        epoch = self._epoch
        end = self._end
        try:
            # Only data needs syncing for durability: index units past the checkpoint's anchor are
            # rebuilt from data by recovery, and checkpoint() syncs the index before it names an anchor.
            self.data.sync()
        except OSError as e:
            self._fail(e)
        with self._state_lock:
            if epoch == self._epoch and end > self._flushed:
                self._flushed = end
                self._set_mark(end)
        return self.durable_index

    def _set_mark(self, end: int) -> None:
        try:
            self._mark.write(end)
        except OSError as e:
            self._fail(e)

    def checkpoint(self) -> None:
        self._check_writable()
        self._checkpoint(self._flushed)

    def _checkpoint(self, flushed: int, committed: int | None = None) -> None:
        """Write the checkpoint naming nothing past `flushed` as durable (only fsynced entries may be
        named: in async mode durable_index runs ahead of the disk), except a damage's debt; and
        `committed` as the committed index (by default the committed index as far as it is durable)."""
        if committed is None:
            committed = max(min(self._committed, flushed), self._committed_floor)
        anchor = min(self._committed, flushed, committed)
        apos, achain = -1, 0
        if anchor >= self._begin:
            try:
                apos = self._unit(anchor)[1]
                achain = self._chain_at(apos)
            except CorruptEntryError:  # no anchor then: recovery scans from the begin and finds it
                apos = -1
        if apos < 0:
            anchor = -1
        end = max(flushed, self._end_floor)
        cp = Checkpoint(begin_index=self._begin, begin_pos=self._begin_pos, begin_chain=self._begin_chain,
                        begin_term=self._begin_term, end_index=end, committed_index=committed,
                        anchor_index=anchor, anchor_pos=apos, anchor_chain=achain,
                        tail_cut=-1 if self.tail_cut is None else self.tail_cut)
        if cp == self._cp_written:  # an idle group's: the file says so already (no fsync every 3 s for nothing)
            return
        try:
            self.index.sync()
        except OSError as e:  # written index units the page cache may have lost
            self._fail(e)
        try:
            write_checkpoint(self.files, self.dir, cp)
        except OSError as e:  # out of descriptors or space: the old checkpoint stands (replaced by rename)
            self._transient_or_fail(e)
        else:
            self._cp_written = cp
        self._cp_end, self._cp_committed = end, committed

    def load_vote(self) -> tuple[int, str | None]:
        return self._stable.state.term, self._stable.state.voted_for

    def save_vote(self, term: int, voted_for: str | None) -> None:
        self._save_stable(StableState(term, voted_for, self._stable.state.recovering))

    @property
    def recovering(self) -> bool:
        return self._stable.state.recovering

    def set_recovering(self, recovering: bool) -> None:
        state = self._stable.state
        if recovering != state.recovering:
            self._save_stable(StableState(state.term, state.voted_for, recovering))

    def _save_stable(self, state: StableState) -> None:
        self._check_writable()
        if self.defer_stable:  # a node's driver writes it (persist_stable) and holds messages until then
            self._stable.remember(state)
            return
        try:
            self._stable.save(state)
        except OSError as e:  # the old state stands (written through a temp file)
            self._transient_or_fail(e)

    @property
    def stable_unsaved(self) -> bool:
        """Term, vote or recovery flag changed and is not yet durable (defer_stable)."""
        return self._stable.unsaved

    def persist_stable(self) -> None:
        """Make the current term, vote and recovery flag durable (any thread). OutOfFilesError when no
        file descriptor is free, DiskFullError when no space: the state on disk is then as before, and the
        call may be made again."""
        try:
            self._stable.persist()
        except OSError as e:
            self._transient_or_fail(e)

    def close(self) -> None:
        if self._closed:
            return
        if self._flusher is not None:
            self._stop.set()
            self._flusher.join()
        if self._failed is None:
            self.persist_stable()
            self.flush()
            self.checkpoint()
        self._closed = True
        self.data.close()
        self.index.close()
        self._mark.close()
        self._lock.release()

    def abandon(self) -> None:
        """Let go of the files and the lock as a killed process would: nothing flushed, checkpointed or
        cleaned up (crash tests reopen the directory after it). Idempotent; close() after it does nothing."""
        if self._closed:
            return
        self._closed = True
        if self._flusher is not None:
            self._stop.set()
            self._flusher.join()
        self.data.close()
        self.index.close()
        self._mark.close()
        self._lock.release()

    def __enter__(self) -> FileStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- failure -------------------------------------------------------------------------------
    def _fail(self, e: OSError) -> NoReturn:
        """Fail stop: after a failed write or fdatasync the page cache cannot be trusted."""
        self._failed = DiskError(f"{self.dir}: {e}")
        raise self._failed from e

    def _flush_loop(self) -> None:
        interval = self.config.flush_interval_ms / 1000
        while not self._stop.wait(interval):
            try:
                self.flush()
            except StoreError:
                return

