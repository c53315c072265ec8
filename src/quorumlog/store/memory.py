"""MemoryStore: the LogStore contract in memory, with crashes that lose the unflushed tail."""

from __future__ import annotations

from collections.abc import Sequence

from ..config import StoreConfig
from ..entry import HEADER_SIZE, MAGIC_NORMAL, Entry, check_entry, encode_entry
from ..errors import IndexOutOfRangeError, InvalidArgumentError, StoreError
from .base import Appended, Damage, check_bodies, entry_from, place, verify_run


class MemoryStore:
    """Entries kept as their encoded bytes, positioned exactly as a FileStore with the same segment
    size would place them, so memory and file replicas interoperate and digests agree."""

    def __init__(self, config: StoreConfig | None = None) -> None:
        self.config = config or StoreConfig()
        self._seg = self.config.data_segment_bytes
        self._max_body = self.config.max_body_bytes
        self._begin = 0
        self._raw: list[bytes] = []
        self._terms: list[int] = []
        self._chains: list[int] = []
        self._write_pos = 0
        self._committed = -1
        self._flushed = -1
        self._checkpointed_committed = -1
        self._vote: tuple[int, str | None] = (0, None)
        self._recovering = False
        self._damage: Damage | None = None

    # -- state -------------------------------------------------------------------------------
    @property
    def begin_index(self) -> int:
        return self._begin

    @property
    def end_index(self) -> int:
        return self._begin + len(self._raw) - 1

    @property
    def end_term(self) -> int:
        return self._terms[-1] if self._terms else 0

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

    # -- writes ------------------------------------------------------------------------------
    def append(self, bodies: Sequence[bytes], term: int, magic: int = MAGIC_NORMAL) -> Appended:
        check_bodies(bodies, self._max_body)
        if term < self.end_term:
            raise InvalidArgumentError(f"term {term} is below the log's end term {self.end_term}")
        first = self.end_index + 1
        chain = self._chains[-1] if self._chains else 0
        positions = []
        wp = self._write_pos
        for i, body in enumerate(bodies):
            size = HEADER_SIZE + len(body)
            pos = place(wp, size, self._seg)
            raw, chain = encode_entry(magic, first + i, term, pos, body, chain)
            self._raw.append(raw)
            self._terms.append(term)
            self._chains.append(chain)
            positions.append(pos)
            wp = pos + size
        self._write_pos = wp
        self._heal()
        return Appended(first, term, positions)

    def append_encoded(self, data: bytes | bytearray | memoryview) -> int:
        prev_chain = self._chains[-1] if self._chains else (0 if self._begin == 0 else None)
        run = verify_run(data, self.end_index + 1, self._write_pos, prev_chain, self.end_term,
                         self._seg, self._max_body)
        mv = memoryview(data)
        for off, pos, size, _index, term, _magic in run:
            raw = bytes(mv[off:off + size])
            self._raw.append(raw)
            self._terms.append(term)
            self._chains.append(int.from_bytes(raw[36:40], "big"))
            self._write_pos = pos + size
        self._heal()
        return self.end_index

    def set_committed(self, index: int) -> None:
        self._committed = max(self._committed, min(index, self.end_index))

    def truncate_after(self, index: int) -> None:
        if index >= self.end_index:
            return
        if index < self._committed:
            raise StoreError(f"refusing to truncate after {index}: entries up to {self._committed} are committed")
        if index < self._begin - 1:
            raise IndexOutOfRangeError(f"cannot truncate after {index}: log begins at {self._begin}")
        keep = index - self._begin + 1
        if keep > 0:
            last = self._raw[keep - 1]
            self._write_pos = int.from_bytes(last[24:32], "big") + len(last)
        else:
            first = self._raw[0]
            self._write_pos = int.from_bytes(first[24:32], "big")
        del self._raw[keep:], self._terms[keep:], self._chains[keep:]
        self._flushed = min(self._flushed, self.end_index)

    def flush(self) -> int:
        self._flushed = self.end_index
        return self._flushed

    def checkpoint(self) -> None:
        durable_committed = min(self._committed, self.durable_index)
        self._checkpointed_committed = max(self._checkpointed_committed, durable_committed)

    def load_vote(self) -> tuple[int, str | None]:
        return self._vote

    def save_vote(self, term: int, voted_for: str | None) -> None:
        self._vote = (term, voted_for)

    @property
    def recovering(self) -> bool:
        return self._recovering

    def set_recovering(self, recovering: bool) -> None:
        self._recovering = recovering

    def expire(self, safe_index: int, now_s: float) -> int:
        """Memory holds no segment files: nothing expires."""
        return 0

    def close(self) -> None:
        self.flush()
        self.checkpoint()

    # -- reads -------------------------------------------------------------------------------
    def _slot(self, index: int) -> int:
        if not self._begin <= index <= self.end_index:
            raise IndexOutOfRangeError(f"index {index} outside [{self._begin}, {self.end_index}]")
        return index - self._begin

    def get(self, index: int) -> Entry:
        raw = self._raw[self._slot(index)]
        h = check_entry(raw, 0, None, self._max_body)
        return entry_from(raw, 0, len(raw), h)

    def read(self, start: int, max_count: int, max_bytes: int, include_control: bool = True) -> list[Entry]:
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
        if start > self.end_index or max_count <= 0:
            return b"", 0
        i = self._slot(start)
        j = i
        used = 0
        while j < len(self._raw) and j - i < max_count and (used < max_bytes or j == i):
            used += len(self._raw[j])
            j += 1
        return b"".join(self._raw[i:j]), j - i

    def term_at(self, index: int) -> int:
        if index == self._begin - 1 and index == -1:
            return 0
        return self._terms[self._slot(index)]

    # -- simulation hooks --------------------------------------------------------------------
    def crash(self) -> None:
        """Lose what a crash loses: the unflushed tail (flush "sync") and the in-memory commit index."""
        if self.config.flush == "sync":
            self.truncate_to_durable()
        self._committed = min(self._checkpointed_committed, self.end_index)
        if self._checkpointed_committed > self.end_index and self._damage is None:
            self._damage = Damage(self.end_index + 1, self._checkpointed_committed, "lost in crash")

    def truncate_to_durable(self) -> None:
        keep = self._flushed - self._begin + 1
        if keep < len(self._raw):
            committed = self._committed
            self._committed = -1
            self.truncate_after(self._flushed)
            self._committed = min(committed, self.end_index)

    def lose_from(self, index: int) -> None:
        """Simulate corruption found at recovery: cut entries from `index` on, even committed ones."""
        committed = max(self._committed, self._checkpointed_committed)
        self._committed = -1
        self.truncate_after(index - 1)
        self._committed = min(committed, self.end_index)
        if committed >= index:
            self._damage = Damage(index, committed, "corrupt entries cut at recovery")

    def _heal(self) -> None:
        if self._damage is not None and self.end_index >= self._damage.committed_index:
            self._committed = max(self._committed, self._damage.committed_index)
            self._damage = None
