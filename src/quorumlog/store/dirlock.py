"""The store directory's lock: one process owns a store, or two would write the same files."""

from __future__ import annotations

import contextlib
import fcntl
import os

from ..errors import StoreError, StoreLockedError

LOCK_NAME = "lock"


class DirLock:
    """An exclusive flock on `<directory>/lock`, holding the owner's pid; taken on creation.

    flock belongs to the open file, so a second open in the same process is refused too, and the
    kernel releases the lock when the owner dies however it dies.
    """

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, LOCK_NAME)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as e:
            raise StoreError(f"cannot open the lock file {self.path}: {e.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _holder(fd)
            os.close(fd)
            who = f"pid {pid}" if pid is not None else "another process (pid unknown)"
            raise StoreLockedError(f"store directory {directory} is locked by {who}: a store has one owner",
                                   pid) from None
        except OSError as e:
            os.close(fd)
            raise StoreError(f"cannot lock {self.path}: {e.strerror}") from None
        self._fd: int | None = fd
        # The pid is for the operator's message only: the lock itself is the flock.
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            self.release()
            raise

    def release(self) -> None:
        """Give the lock up (closing the file releases the flock). Idempotent."""
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


def _holder(fd: int) -> int | None:
    """The pid the lock's holder wrote, if it is readable."""
    try:
        return int(os.pread(fd, 32, 0).decode().strip())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
