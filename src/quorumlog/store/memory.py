"""MemoryStore: the LogStore contract in memory, with crashes that lose the unflushed tail."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from .. import hotpath
from ..config import StoreConfig
from ..entry import HEADER_SIZE, MAGIC_CONFIG, MAGIC_NORMAL, Entry, check_entry, check_metas, encode_entry, entry_at
from ..errors import CorruptEntryError, IndexOutOfRangeError, InvalidArgumentError, StoreError
from .base import Appended, Damage, check_bodies, check_reset, expiry_point, place
from .checkpoint import check_token
from .configs import Config, ConfigLog, check_config_append, config_of
from .reader import drop_control


def _at_zero() -> float:
    return 0.0


class MemoryStore:
    """Entries kept as their encoded bytes, positioned exactly as a FileStore with the same segment
    size would place them, so memory and file replicas interoperate and digests agree.

    Expiry follows the FileStore's rule over the same data segments (by position). A memory store has
    no file times: a segment counts as last written at the `clock()` reading of its last write. The
    default clock reads 0.0, so every segment is as old as now_s says; pass time.time to age them as
    files age. Disk use never forces expiry.
    """

    def __init__(self, config: StoreConfig | None = None, *, clock: Callable[[], float] = _at_zero,
                 defer_stable: bool = False) -> None:
        self.config = config or StoreConfig()
        self.defer_stable = defer_stable  # as FileStore's: the stable state is durable once persisted
        self.tail_cut: int | None = None  # set only by rot_tail: a crash alone loses just the unflushed tail
        self._seg = self.config.data_segment_bytes
        self._max_body = self.config.max_body_bytes
        self._clock = clock
        self._begin = 0
        self._begin_pos = 0
        self._begin_chain = 0
        self._begin_term = 0
        self._raw: list[bytes] = []
        self._terms: list[int] = []
        self._chains: list[int] = []
        self._written: dict[int, float] = {}  # data segment number -> clock() at its last write
        self._write_pos = 0
        self._committed = -1
        self._flushed = -1
        self._checkpointed_committed = -1
        self._checkpointed_end = -1  # the durable end the last checkpoint named, as FileStore's does
        self._committed_floor = -1  # the committed index before a loss, restored when the damage heals
        self._vote: tuple[int, str | None] = (0, None)
        self._recovering = False
        self._durable_stable: tuple[int, str | None, bool] = (0, None, False)  # what a crash keeps
        self._damage: Damage | None = None
        self._identity: str | None = None
        self._producer_snapshot: bytes | None = None  # durable once saved, as FileStore's file
        # The CONFIG entries (configs.py). A FileStore's `configs` file is written before the entry it adds
        # and after every removal; none of those can fail here, so this is also what a crash keeps.
        self._configs = ConfigLog()

    # -- state -------------------------------------------------------------------------------
    @property
    def begin_index(self) -> int:
        return self._begin

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
    def end_index(self) -> int:
        return self._begin + len(self._raw) - 1

    @property
    def end_term(self) -> int:
        return self._terms[-1] if self._terms else self._begin_term

    @property
    def committed_index(self) -> int:
        return self._committed

    @property
    def durable_index(self) -> int:
        return self._flushed if self.config.flush == "sync" else self.end_index

    @property
    def write_pos(self) -> int:
        return self._write_pos

    @property
    def damage(self) -> Damage | None:
        return self._damage

    @property
    def identity(self) -> str | None:
        return self._identity

    def set_identity(self, identity: str) -> None:
        check_token(identity, "identity")
        if self._identity is None:  # as FileStore writes `currterm` first: an identity never outlives the
            self.persist_stable()  # term and recovery flag a joining node took before it (raft/node.py _join)
        self._identity = identity

    def producer_snapshot(self) -> bytes | None:
        return self._producer_snapshot

    def save_producer_snapshot(self, blob: bytes) -> None:
        self._producer_snapshot = bytes(blob)

    @property
    def configs(self) -> tuple[Config, ...]:
        return self._configs.entries

    def set_base_config(self, index: int, term: int, body: bytes) -> None:
        self._configs.set_base(index, term, body, self._begin)

    def clear_base_config(self) -> None:
        self._configs.clear_base(self._begin)

    # -- writes ------------------------------------------------------------------------------
    def append(self, bodies: Sequence[bytes], term: int, magic: int = MAGIC_NORMAL,
               metas: Mapping[int, bytes] | None = None) -> Appended:
        check_bodies(bodies, self._max_body)
        check_config_append(bodies, magic, metas)
        if metas:
            check_metas(metas, len(bodies))
        if term < self.end_term:
            raise InvalidArgumentError(f"term {term} is below the log's end term {self.end_term}")
        first = self.end_index + 1
        chain = self._chains[-1] if self._chains else self._begin_chain
        positions = []
        wp = self._write_pos
        get_meta = metas.get if metas else None
        for i, body in enumerate(bodies):
            meta = get_meta(i, b"") if get_meta is not None else b""
            size = HEADER_SIZE + len(meta) + len(body)
            pos = place(wp, size, self._seg)
            raw, chain = encode_entry(magic, first + i, term, pos, body, chain, meta)
            self._add(raw, term, chain, wp, pos)
            positions.append(pos)
            wp = pos + size
        if magic == MAGIC_CONFIG:
            self._configs.add([(first, term, bodies[0])])
        self._heal()
        return Appended(first, term, positions)

    def append_encoded(self, data: bytes | bytearray | memoryview) -> int:
        return self.append_encoded_metas(data)[0]

    def append_encoded_metas(self, data: bytes | bytearray | memoryview) -> tuple[int, list[tuple[int, bytes]]]:
        prev_chain = self._chains[-1] if self._chains else self._begin_chain
        run, metas = hotpath.verify_run(data, self.end_index + 1, self._write_pos, prev_chain, self.end_term,
                                self._seg, self._max_body)
        mv = memoryview(data)
        for off, pos, size, index, term, magic in run:
            raw = bytes(mv[off:off + size])
            self._add(raw, term, int.from_bytes(raw[36:40], "big"), self._write_pos, pos)
            if magic == MAGIC_CONFIG:
                self._configs.add([config_of(mv, off, size, index, term)])
        self._heal()
        return self.end_index, metas

    def _add(self, raw: bytes, term: int, chain: int, wp: int, pos: int) -> None:
        """Hold one entry placed at `pos` (a roll from `wp` writes a blank into wp's segment)."""
        self._raw.append(raw)
        self._terms.append(term)
        self._chains.append(chain)
        now = self._clock()
        self._written[wp // self._seg] = self._written[pos // self._seg] = now
        self._write_pos = pos + len(raw)

    def set_committed(self, index: int) -> None:
        self._committed = max(self._committed, min(index, self.end_index))

    def truncate_after(self, index: int) -> None:
        if index >= self.end_index:
            return
        if index < self._committed:
            raise StoreError(f"refusing to truncate after {index}: entries up to {self._committed} are committed")
        if index < self._begin - 1:
            raise IndexOutOfRangeError(f"cannot truncate after {index}: log begins at {self._begin}")
        self._cut(index)

    def discard_after(self, index: int) -> None:
        if index >= self.end_index:
            return
        if index < self._begin - 1:
            raise IndexOutOfRangeError(f"cannot discard after {index}: log begins at {self._begin}")
        self._cut(index)

    def _cut(self, keep: int) -> None:
        """Drop every entry after `keep` (no check: the callers decide what may go)."""
        n = keep - self._begin + 1
        if n > 0:
            last = self._raw[n - 1]
            self._write_pos = int.from_bytes(last[24:32], "big") + len(last)
        else:
            self._write_pos = self._begin_pos
        del self._raw[n:], self._terms[n:], self._chains[n:]
        seg = self._write_pos // self._seg  # as the file store deletes the later segment files
        self._written = {k: t for k, t in self._written.items() if k <= seg}
        self._flushed = min(self._flushed, self.end_index)
        self._committed = min(self._committed, self.end_index)
        self._checkpointed_end = min(self._checkpointed_end, self.end_index)  # (FileStore rewrites its checkpoint)
        self._configs.cut_after(self.end_index)

    def reset(self, begin_index: int, begin_pos: int, begin_chain: int, begin_term: int) -> None:
        check_reset(begin_index, begin_pos, begin_chain, begin_term, self._committed, self._seg)
        self._begin, self._begin_pos, self._begin_chain, self._begin_term = (
            begin_index, begin_pos, begin_chain, begin_term)
        self._raw, self._terms, self._chains, self._written = [], [], [], {}
        self._write_pos = begin_pos
        self._committed = self._flushed = self._checkpointed_committed = begin_index - 1
        self._damage = None
        self._committed_floor = -1
        self._configs.reset_to(begin_index)

    def mark_damaged(self, index: int, reason: str) -> None:
        if index > self.end_index:
            raise IndexOutOfRangeError(f"cannot mark entry {index} damaged: the log ends at {self.end_index}")
        keep = max(index, self._begin) - 1
        while keep >= self._begin:  # the cut must not leave a corrupt entry at the end
            try:
                self.get(keep)
                break
            except CorruptEntryError:
                keep -= 1
        owed = max(self.end_index, self._damage.committed_index if self._damage else -1)
        self._committed_floor = max(self._committed, self._committed_floor, self._checkpointed_committed)
        self._damage = Damage(keep + 1, owed, reason)
        # persisted at once, as the file store's checkpoint does: the debt survives a crash
        self._checkpointed_committed = max(self._checkpointed_committed, self._committed_floor)
        self._cut(keep)

    def flush(self) -> int:
        self._flushed = self.end_index
        return self._flushed

    def checkpoint(self) -> None:
        durable_committed = min(self._committed, self.durable_index)
        self._checkpointed_committed = max(self._checkpointed_committed, durable_committed)
        self._checkpointed_end = self.durable_index

    def load_vote(self) -> tuple[int, str | None]:
        return self._vote

    def save_vote(self, term: int, voted_for: str | None) -> None:
        if voted_for is not None:
            check_token(voted_for, "member id")
        self._vote = (term, voted_for)
        if not self.defer_stable:
            self.persist_stable()

    @property
    def recovering(self) -> bool:
        return self._recovering

    def set_recovering(self, recovering: bool) -> None:
        self._recovering = recovering
        if not self.defer_stable:
            self.persist_stable()

    @property
    def stable_unsaved(self) -> bool:
        return self._durable_stable != (*self._vote, self._recovering)

    @property
    def recovering_durably(self) -> bool:
        """The recovery flag a crash would keep (the simulators: a recovery is over once this is False)."""
        return self._durable_stable[2]

    def persist_stable(self) -> None:
        self._durable_stable = (*self._vote, self._recovering)

    def expire(self, safe_index: int, now_s: float) -> int:
        if not self._raw:
            return 0
        first_in: dict[int, int] = {}  # data segment start -> index of the first entry starting in it
        for i, raw in enumerate(self._raw):
            first_in.setdefault(int.from_bytes(raw[24:32], "big") // self._seg * self._seg, self._begin + i)
        starts = list(range(self._begin_pos - self._begin_pos % self._seg, self._write_pos, self._seg))
        point = expiry_point(starts, first_in.get, lambda start: now_s - self._written.get(start // self._seg, 0.0),
                             min(safe_index, self._committed, self._flushed),
                             self.config.file_reserved_hours * 3600, False)
        if point is None:
            return 0
        new_begin, new_pos = point
        k = new_begin - self._begin  # 0 when the first segment held only a blank record
        if k:
            self._begin_chain, self._begin_term = self._chains[k - 1], self._terms[k - 1]
            del self._raw[:k], self._terms[:k], self._chains[:k]
        self._begin, self._begin_pos = new_begin, new_pos
        self._written = {s: t for s, t in self._written.items() if s >= new_pos // self._seg}
        self._configs.expire_before(new_begin)
        self.checkpoint()  # as the file store persists the new begin
        return k

    def close(self) -> None:
        self.flush()
        self.checkpoint()

    # -- reads -------------------------------------------------------------------------------
    def _slot(self, index: int) -> int:
        if not self._begin <= index <= self.end_index:
            raise IndexOutOfRangeError(f"index {index} outside [{self._begin}, {self.end_index}]")
        return index - self._begin

    def _below_begin(self, start: int) -> None:
        if start < self._begin:
            raise IndexOutOfRangeError(f"index {start} is below the log's first index {self._begin}")

    def get(self, index: int) -> Entry:
        raw = self._raw[self._slot(index)]
        try:
            h = check_entry(raw, 0, None, self._max_body)
        except CorruptEntryError as e:
            raise CorruptEntryError(f"entry {index}: {e}", index=index) from None
        return entry_at(raw, 0, h)

    def read(self, start: int, max_count: int, max_bytes: int, include_control: bool = True) -> list[Entry]:
        self._below_begin(start)
        out: list[Entry] = []
        if start > self.end_index or max_count <= 0:
            return out
        i = self._slot(start)
        used = 0
        while i < len(self._raw) and len(out) < max_count and (used < max_bytes or not out):
            e = self.get(self._begin + i)
            used += len(e.body)
            if include_control or e.magic == MAGIC_NORMAL:
                out.append(e)
            i += 1
        return out

    def read_raw(self, start: int, max_count: int, max_bytes: int) -> tuple[bytes, int]:
        self._below_begin(start)
        if start > self.end_index or max_count <= 0:
            return b"", 0
        i = self._slot(start)
        j = i
        used = 0
        while j < len(self._raw) and j - i < max_count and (used < max_bytes or j == i):
            used += len(self._raw[j])
            j += 1
        return b"".join(self._raw[i:j]), j - i

    def read_raw_parts(self, start: int, max_count: int, max_bytes: int,
                       control: bool = True) -> tuple[list[bytes | memoryview], int]:
        data, n = self.read_raw(start, max_count, max_bytes)
        part = data if control else drop_control(data)
        return ([part] if part else []), n

    def end_pos(self, index: int) -> int:
        if index == self._begin - 1:
            return self._begin_pos
        raw = self._raw[self._slot(index)]
        return int.from_bytes(raw[24:32], "big") + len(raw)

    def term_at(self, index: int) -> int:
        if index == self._begin - 1:
            return self._begin_term
        return self._terms[self._slot(index)]

    # -- simulation hooks --------------------------------------------------------------------
    def crash(self) -> None:
        """Lose what a crash loses: the unflushed tail (flush "sync") and the in-memory commit index.
        The identity and the log's begin are persisted at once, so they survive; so do the term, vote and
        recovery flag as last persisted (at once, unless defer_stable)."""
        term, voted_for, self._recovering = self._durable_stable
        self._vote = (term, voted_for)
        if self.config.flush == "sync":
            self.truncate_to_durable()
        self._committed = min(self._checkpointed_committed, self.end_index)
        if self._checkpointed_committed > self.end_index and self._damage is None:
            self._committed_floor = self._checkpointed_committed
            self._damage = Damage(self.end_index + 1, self._checkpointed_committed, "lost in crash")
        self._configs.validate(self._begin, self.end_index, self._config_at)  # as a FileStore's open does

    def _config_at(self, index: int) -> tuple[int, int, bytes]:
        e = self.get(index)
        return e.term, e.magic, e.body

    def truncate_to_durable(self) -> None:
        if self._flushed < self.end_index:
            committed = self._committed
            self._cut(max(self._flushed, self._begin - 1))
            self._committed = min(committed, self.end_index)

    @property
    def checkpointed_end(self) -> int:
        """The durable end the last checkpoint named: recovery cuts entries past it without a word."""
        return max(self._checkpointed_end, self._checkpointed_committed)

    def rot_tail(self, index: int) -> None:
        """Simulate rot, found at recovery, in entries past what the last checkpoint names durable: as
        FileStore's recovery, which cannot tell it from a torn write, cut them, naming only `tail_cut`
        (entries flushed since the checkpoint, so maybe acknowledged)."""
        if not self.checkpointed_end < index <= self.end_index:
            raise ValueError(f"entry {index} is not past the checkpoint ({self.checkpointed_end}) in the log")
        self._cut(index - 1)
        self.tail_cut = index if self.tail_cut is None else min(index, self.tail_cut)

    def clear_tail_cut(self) -> None:
        self.tail_cut = None

    def lose_from(self, index: int) -> None:
        """Simulate corruption found at recovery: cut entries from `index` on, even committed ones."""
        committed = max(self._committed, self._checkpointed_committed)
        # Every entry still held after a crash was durable, so this node may have acknowledged it.
        durable_end = self.end_index
        self._cut(max(index, self._begin) - 1)
        self._committed = min(committed, self.end_index)
        if durable_end >= index:
            self._committed_floor = committed
            self._damage = Damage(index, max(committed, durable_end), "corrupt entries cut at recovery")

    def clear_damage(self) -> None:
        if self._damage is None:
            return
        self._committed = max(self._committed, min(self._committed_floor, self.end_index))
        self._damage = None
        self._committed_floor = -1

    def _heal(self) -> None:
        d = self._damage
        if d is not None and self.end_index >= d.committed_index:
            self._committed = max(self._committed, min(self._committed_floor, self.end_index))
            self._damage = None
            self._committed_floor = -1
