"""When a group saves its producer table beside its log (core/producer_snapshot.py): with a checkpoint,
once SAVE_AFTER_RECORDS requests were recorded since the last save and SAVE_INTERVAL_S passed, and at a
clean close. The table is encoded on the loop (it changes there) and written in the group's worker thread.
A save that fails is logged and skipped: the next start reads the whole log, as without one."""

from __future__ import annotations

import logging
import time

from ..core.producers import ProducerTable
from ..errors import StoreError
from ..store.base import LogStore

log = logging.getLogger("quorumlog.server")

SAVE_AFTER_RECORDS = 10_000
SAVE_INTERVAL_S = 30.0


class ProducerSaves:
    """One group's saves of its producer table (see the module docstring)."""

    def __init__(self, group: str, store: LogStore) -> None:
        self.group = group
        self.store = store
        self._saved_records = -1  # the table's record count at the last save (-1: none this run)
        self._next = time.monotonic() + SAVE_INTERVAL_S

    def take(self, table: ProducerTable, closing: bool = False) -> bytes | None:
        """On the loop: the table to save now, encoded; None when no save is due."""
        if table.records == self._saved_records:
            return None
        if not closing and (table.records - max(self._saved_records, 0) < SAVE_AFTER_RECORDS
                            or time.monotonic() < self._next):
            return None
        self._saved_records = table.records
        self._next = time.monotonic() + SAVE_INTERVAL_S
        try:
            return table.encode(self.store)
        except StoreError as e:  # the log's last entry unreadable (damage, a failed store): no save
            log.warning("group %s: producer table not saved (%s)", self.group, e)
            return None

    def save(self, blob: bytes | None) -> None:
        """In the worker thread."""
        if blob is None:
            return
        try:
            self.store.save_producer_snapshot(blob)
        except StoreError as e:
            log.warning("group %s: producer table not saved (%s)", self.group, e)
