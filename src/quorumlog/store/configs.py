"""The CONFIG entries a store tracks (LogStore.configs), and the `configs` file that keeps them.

A configuration takes effect as soon as its entry is in the log, so the Raft core must always know the
last CONFIG entry the log holds: after a truncation (which restores the previous one), a cut at recovery
or at damage, an expiry (the configuration in force at the log's begin must outlive its entry) and a
reset. Both stores keep the list with ConfigLog, by the same rules:

- an append adds its CONFIG entries (a leader's CONFIG append holds exactly one body, without metadata);
- a cut drops those after the new end;
- expiry keeps, of those that fall below the new begin, only the last (the base);
- a reset drops those at or past the new begin and keeps the last below it; set_base_config replaces
  whatever lies below the begin with the leader's.

FileStore keeps the list in `configs` (beside the checkpoint), replaced atomically: before the log write
that adds a CONFIG entry, and after a cut, expiry or reset. So the file names every CONFIG entry the log
holds and maybe more (an entry whose write failed or was lost in a crash, or cut before the file was
rewritten); at open ConfigLog.validate drops those the log does not hold. Nothing scans the log.

File layout: b"QLCF", the CRC-32 (u32, big-endian) of the rest, then a msgpack array of
[index, term, body] arrays, oldest first.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence

import msgpack

from ..entry import HEADER_SIZE, MAGIC_CONFIG
from ..errors import CorruptEntryError, InvalidArgumentError, StoreStateError
from .checkpoint import move_aside, read_if_present
from .vfs import OsFiles

Config = tuple[int, int, bytes]  # (index, term, body) of a CONFIG entry
FILE = "configs"
_MAGIC = b"QLCF"
_BODY_SIZE_AT = HEADER_SIZE - 4  # the header's last field: body_size (i32)


def check_config_append(bodies: Sequence[bytes], magic: int, metas: Mapping[int, bytes] | None) -> None:
    """A leader's CONFIG append holds exactly one body and no producer metadata (InvalidArgumentError)."""
    if magic == MAGIC_CONFIG and (len(bodies) != 1 or metas):
        raise InvalidArgumentError(f"a CONFIG append holds exactly one body without metadata, not {len(bodies)}"
                                   f"{' with metadata' if metas else ''}")


def config_of(mv: memoryview, off: int, size: int, index: int, term: int) -> Config:
    """The Config of the checked CONFIG entry at mv[off:off + size]: its body is the last body_size bytes."""
    body_size = int.from_bytes(mv[off + _BODY_SIZE_AT:off + HEADER_SIZE], "big")
    return index, term, bytes(mv[off + size - body_size:off + size])


def pushed_configs(mv: memoryview, run: Sequence[tuple[int, int, int, int, int, int]],
                   units: bytes | bytearray, unit_size: int) -> list[Config]:
    """The CONFIG entries of a pushed run that verify_run passed, found through its index units (magic i32
    first in each unit, so its low byte, 1 to 3, tells the kind): one strided slice and a byte search, no
    Python work per entry for a run without CONFIG entries (about 0.2 us a run plus 0.6 ns an entry)."""
    magics = units[3::unit_size]
    out: list[Config] = []
    k = magics.find(MAGIC_CONFIG)
    while k >= 0:
        off, _pos, size, index, term, _magic = run[k]
        out.append(config_of(mv, off, size, index, term))
        k = magics.find(MAGIC_CONFIG, k + 1)
    return out


class ConfigLog:
    """The tracked CONFIG entries, oldest first, as one tuple that is replaced (never changed) when they
    change, so a caller can tell a change by identity. The first may lie below the log's begin."""

    __slots__ = ("entries",)

    def __init__(self, entries: Iterable[Config] = ()) -> None:
        self.entries: tuple[Config, ...] = tuple(entries)

    def add(self, new: Sequence[Config]) -> None:
        """Entries appended at the log's end (each above every entry held)."""
        if new:
            self.entries += tuple((i, t, bytes(b)) for i, t, b in new)

    def cut_after(self, keep: int) -> bool:
        """The log now ends at `keep`: drop entries past it. Whether anything went."""
        e = self.entries
        if not e or e[-1][0] <= keep:
            return False
        self.entries = tuple(c for c in e if c[0] <= keep)
        return True

    def expire_before(self, begin: int) -> bool:
        """The log now begins at `begin`: of the entries below it only the last stays (the configuration in
        force at the begin). Whether anything went."""
        e = self.entries
        below = sum(1 for c in e if c[0] < begin)
        if below <= 1:
            return False
        self.entries = e[below - 1:]
        return True

    def reset_to(self, begin: int) -> bool:
        """The log was reset to begin, empty, at `begin`: drop the entries at or past it, keep the last
        below it. Whether anything went."""
        cut = self.cut_after(begin - 1)
        return self.expire_before(begin) or cut

    def set_base(self, index: int, term: int, body: bytes, begin: int) -> None:
        """Take (index, term, body) as the configuration in force below `begin`, in place of any entry
        kept there. InvalidArgumentError unless 0 <= index < begin and term >= 0."""
        if not 0 <= index < begin or term < 0:
            raise InvalidArgumentError(f"a base configuration at index {index}, term {term}: must lie below "
                                       f"the log's begin {begin}, at a non-negative index and term")
        self.entries = ((index, term, bytes(body)), *(c for c in self.entries if c[0] >= begin))

    def clear_base(self, begin: int) -> bool:
        """No configuration is in force below `begin` (the configured members are): drop the entry kept
        there. Whether anything went."""
        e = self.entries
        if not e or e[0][0] >= begin:
            return False
        self.entries = tuple(c for c in e if c[0] >= begin)
        return True

    def validate(self, begin: int, end: int, lookup: Callable[[int], tuple[int, int, bytes]]) -> list[str]:
        """Check the entries against the log [begin, end] (at open, and after a simulated crash): of those
        below begin only the last stays; one at or past begin stays when the log holds it, i.e. index <= end
        and lookup(index) (term, magic, body of the log's entry) is (term, MAGIC_CONFIG, body). An entry the
        log cannot read back (CorruptEntryError) stays: the file was written before it, and only an entry
        that was written whole can rot (recovery cuts a torn one); the read path meets the damage. Returns
        what was dropped or kept so, as notes."""
        self.expire_before(begin)
        kept: list[Config] = []
        notes: list[str] = []
        for c in self.entries:
            index, term, body = c
            if index < begin:
                kept.append(c)
                continue
            if index > end:
                notes.append(f"dropped CONFIG entry {index} (term {term}) from {FILE}: the log ends at {end}")
                continue
            try:
                held = lookup(index)
            except CorruptEntryError as e:
                kept.append(c)
                notes.append(f"kept CONFIG entry {index} (term {term}) of {FILE}; the log's copy is damaged: {e}")
                continue
            if held != (term, MAGIC_CONFIG, body):
                notes.append(f"dropped CONFIG entry {index} (term {term}) from {FILE}: the log holds another "
                             f"entry there (term {held[0]}, magic {held[1]})")
                continue
            kept.append(c)
        if len(kept) != len(self.entries):
            self.entries = tuple(kept)
        return notes


# -- the file --------------------------------------------------------------------------------------------
def encode_configs(entries: Sequence[Config]) -> bytes:
    payload = msgpack.packb([[i, t, b] for i, t, b in entries], use_bin_type=True)
    return _MAGIC + zlib.crc32(payload).to_bytes(4, "big") + payload


def decode_configs(raw: bytes, path: str) -> tuple[Config, ...]:
    """The entries a `configs` file holds; StoreStateError naming `path` when it is damaged."""
    if len(raw) < 8 or raw[:4] != _MAGIC:
        raise _damaged(path, "not a configs file" if raw[:4] != _MAGIC else "truncated")
    payload = raw[8:]
    if zlib.crc32(payload) != int.from_bytes(raw[4:8], "big"):
        raise _damaged(path, "CRC mismatch")
    try:
        items = msgpack.unpackb(payload, raw=False, strict_map_key=True)
    except Exception as e:  # msgpack raises several kinds for bytes it cannot decode
        raise _damaged(path, f"undecodable: {e}") from None
    out: list[Config] = []
    if not isinstance(items, list):
        raise _damaged(path, "not a list of entries")
    for item in items:
        if not (isinstance(item, list) and len(item) == 3 and type(item[0]) is int and type(item[1]) is int
                and isinstance(item[2], bytes) and item[0] >= 0 and item[1] >= 0):
            raise _damaged(path, f"bad entry {item!r:.80}")
        if out and item[0] <= out[-1][0]:
            raise _damaged(path, f"entry {item[0]} after entry {out[-1][0]}: not in index order")
        out.append((item[0], item[1], item[2]))
    return tuple(out)


def _damaged(path: str, problem: str) -> StoreStateError:
    return StoreStateError(
        f"{path} is damaged ({problem}): this replica's membership configurations (the CONFIG entries of its "
        f"log and the one in force at its begin) cannot be trusted, so the store will not open. "
        f"{move_aside(os.path.dirname(path))}")


def read_configs(directory: str) -> tuple[Config, ...] | None:
    """The entries of `directory`/configs; None when there is no such file (a store that never held a
    CONFIG entry, or one written before stores tracked them)."""
    path = os.path.join(directory, FILE)
    raw = read_if_present(path)
    return None if raw is None else decode_configs(raw, path)


def write_configs(files: OsFiles, directory: str, entries: Sequence[Config]) -> None:
    """Replace `directory`/configs atomically and durably (OSError on failure: the old file stands, or
    the new one if only the directory's sync failed)."""
    files.write_atomic(os.path.join(directory, FILE), encode_configs(entries))
