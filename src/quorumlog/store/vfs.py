"""The file operations a FileStore performs, behind one object so tests can inject faults
(as hashicorp/raft-wal's VFS does): a failing write or sync, a full disk."""

from __future__ import annotations

import errno
import mmap
import os
import shutil

Buffer = bytes | bytearray | memoryview

# No file descriptor left (per process, per system): transient, nothing was opened.
OUT_OF_FILES = frozenset({errno.EMFILE, errno.ENFILE})
# No space left (on the device, in the quota): transient where it hits a new file, a temp file or entries
# none of which the log took yet, since what was durable before stands (file_appends.py, _unwritten_or_fail).
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


class OsFiles:
    """Real files. Subclass and override a method to inject a fault."""

    def open(self, path: str) -> int:
        return os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)

    def pwrite(self, fd: int, data: Buffer | list[Buffer], offset: int) -> None:
        """Write all of `data` at `offset`: a buffer, or a list of them written as one (pwritev)."""
        if isinstance(data, list):
            n = os.pwritev(fd, data, offset)
            if n == sum(map(len, data)):  # byte buffers: len() counts bytes
                return
            data, offset = b"".join(data)[n:], offset + n  # a short write: the rest the plain way
        view = memoryview(data)
        while view:
            n = os.pwrite(fd, view, offset)
            if n <= 0:
                raise OSError(f"pwrite wrote {n} bytes")
            view = view[n:]
            offset += n

    def allocate(self, fd: int, offset: int, length: int) -> None:
        """Give [offset, offset + length) disk blocks without writing them (they read as zeros)."""
        if hasattr(os, "posix_fallocate"):
            os.posix_fallocate(fd, offset, length)
        else:  # no fallocate here: zeros written
            self.pwrite(fd, bytes(length), offset)

    def fdatasync(self, fd: int) -> None:
        os.fdatasync(fd)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def size(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def extend(self, fd: int, size: int) -> None:
        """Make the file `size` bytes long (sparse: no blocks) and sync that."""
        os.ftruncate(fd, size)
        self.fsync(fd)

    def map(self, fd: int, size: int) -> mmap.mmap:
        return mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)

    def drop_cache(self, fd: int, mapped: mmap.mmap, offset: int, length: int) -> None:
        """Let the kernel free the cached pages of [offset, offset + length) (page-aligned, synced):
        unmapped from `mapped` (a later read maps them again from the file), then dropped from the page
        cache. Data is never at stake: pages still dirty are kept."""
        if hasattr(mapped, "madvise"):
            mapped.madvise(mmap.MADV_DONTNEED, offset, length)
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)

    def close(self, fd: int) -> None:
        os.close(fd)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def mtime(self, path: str) -> float:
        return os.stat(path).st_mtime

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def write_atomic(self, path: str, data: bytes) -> None:
        """Replace `path` with `data`: temp file, fsync, rename, fsync the directory."""
        tmp = path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            self.pwrite(fd, data, 0)
            self.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        self.fsync_dir(os.path.dirname(path) or ".")

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            self.fsync(fd)
        finally:
            os.close(fd)

    def disk_usage(self, path: str) -> float:
        """Fraction of the file system holding `path` that is in use."""
        u = shutil.disk_usage(path)
        return u.used / u.total if u.total else 0.0
