"""A store's durable mark: the end index its last fdatasync covered, rewritten in place right after each
one (the file `durable` beside the checkpoint, never synced itself).

The checkpoint names the durable end only every checkpoint_interval_ms. Past it, recovery alone cannot
tell a torn write (never synced, so never acknowledged) from bit rot in entries synced, and maybe
acknowledged, since. The mark is in the page cache as soon as it is written, so it survives a killed
process: recovery then knows what was durable when the process died, and a bad entry at or below the
mark is damage, one past it a torn write. After a power cut the mark on disk may be older than the log:
the entries between it and the true durable end were synced, so they read back whole, and a bad entry
past the true end was never synced: a torn write still. Only rot and a power cut together escape it.

A mark higher than the log (a truncation that lowered it, cut short by a crash) makes recovery take the
missing entries for damage: the node fetches them again, never loses them. So every removal lowers the
mark before any file changes, and a failed write of the mark fails the store, as a failed data write.
A mark lower than what was synced is the one to avoid. Out of space (the file's first block, or a
copy-on-write file system), the mark is emptied instead, which needs no block: no mark at all, and
recovery falls back to the checkpoint's durable end (FileStore's `tail_cut`) until a write succeeds.
"""

from __future__ import annotations

import os
import struct
import zlib

from .vfs import NO_SPACE, OsFiles

HEAD = struct.Struct(">4sq")  # magic, end index; then the CRC-32 of these 12 bytes (u32)
MAGIC = b"QLDM"
SIZE = HEAD.size + 4


class DurableMark:
    """The `durable` file of one store directory: `end` is the valid mark read at open (None: no file,
    a store written before marks, or a damaged mark), then the last one written."""

    def __init__(self, directory: str, files: OsFiles) -> None:
        self._files = files
        self._fd = files.open(os.path.join(directory, "durable"))
        self.end: int | None = self._read()

    def _read(self) -> int | None:
        raw = os.pread(self._fd, SIZE, 0)
        if len(raw) != SIZE or int.from_bytes(raw[HEAD.size:], "big") != zlib.crc32(raw[:HEAD.size]):
            return None
        magic, end = HEAD.unpack_from(raw)
        return end if magic == MAGIC else None

    def write(self, end: int) -> None:
        """Overwrite the mark with `end`; out of space, empty it (OSError on any other failure)."""
        head = HEAD.pack(MAGIC, end)
        try:
            self._files.pwrite(self._fd, head + zlib.crc32(head).to_bytes(4, "big"), 0)
        except OSError as e:
            if e.errno not in NO_SPACE:
                raise
            os.ftruncate(self._fd, 0)
            self.end = None
            return
        self.end = end

    def close(self) -> None:
        self._files.close(self._fd)
