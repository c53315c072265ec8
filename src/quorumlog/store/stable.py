"""A store's stable state beside its log: `currterm` (term, vote, recovery flag) and `identity`, and the
rules that refuse to open a store whose state files no longer match its data.

Raft's safety rests on a replica remembering its term and vote, and the entries it acknowledged. A
store that lost either must not come back as if nothing happened: it opens only after an operator moved
it aside, so that the node starts pristine and rejoins as a replacement (docs/operations.md).
"""

from __future__ import annotations

import os
import threading

from ..errors import StoreStateError
from .checkpoint import (
    Checkpoint,
    StableState,
    check_token,
    move_aside,
    read_identity,
    read_stable,
    write_identity,
    write_stable,
)
from .segments import NAME_DIGITS
from .vfs import OsFiles


def data_segment_starts(directory: str) -> list[int]:
    """Start offsets of the data segment files in `directory`/data (spares and stray names ignored)."""
    try:
        names = os.listdir(os.path.join(directory, "data"))
    except FileNotFoundError:
        return []
    return sorted(int(n) for n in names if len(n) == NAME_DIGITS and n.isdigit())


class StableFiles:
    """`currterm` and `identity` of one store directory, checked against the log's files on open.

    Raises StoreStateError when the store holds a log (or an identity) but no `currterm`, when the
    checkpoint names entries but no data segment exists, or when data segments exist past offset 0
    without any checkpoint. Reads only: nothing on disk changes before the checks pass.
    """

    def __init__(self, directory: str, files: OsFiles, cp: Checkpoint, cp_exists: bool) -> None:
        self.dir = directory
        self.files = files
        self._has_currterm = os.path.exists(os.path.join(directory, "currterm"))
        self.state: StableState = read_stable(directory)
        self.version = self._saved_version = 0  # bumped by remember(), recorded by persist()
        self._lock = threading.Lock()
        recorded = read_identity(directory)
        segments = data_segment_starts(directory)
        cp_used = cp.begin_index > 0 or cp.end_index >= 0 or cp.committed_index >= 0
        pristine = recorded is None and not self._has_currterm and not cp_used and not segments
        if not self._has_currterm and not pristine:
            held = "a log" if segments or cp_used else "an identity"
            raise StoreStateError(
                f"{directory}: currterm is missing but the store holds {held}: this replica's term and vote "
                "are lost. A replica that forgot its vote could vote twice in one term and help elect two "
                f"leaders, so the store will not open. {move_aside(directory)}")
        named = max(cp.end_index, cp.committed_index)
        if named >= cp.begin_index and not segments:
            raise StoreStateError(
                f"{directory}: the data files are missing: the checkpoint names entries up to {named} but "
                f"{os.path.join(directory, 'data')} holds no segment. This replica's log is lost, and it may "
                f"have acknowledged entries its group counts on, so the store will not open. "
                f"{move_aside(directory)}")
        if not cp_exists and segments and segments[0] > 0:
            raise StoreStateError(
                f"{directory}: the checkpoint is missing but the data files start at byte {segments[0]}: "
                "where the log begins and how far it was committed are lost, so the store will not open. "
                f"{move_aside(directory)}")
        # "" marks a store that holds state but no identity: written before identities existed, or of a node
        # that joined its group and has yet to take the group id from a CONFIG entry (raft/reconfig.py).
        self.identity: str | None = recorded if recorded is not None else (None if pristine else "")

    def save(self, state: StableState) -> None:
        """Persist `currterm` durably (OSError on failure, the old state kept)."""
        with self._lock:
            write_stable(self.files, self.dir, state)
            self.state = state
            self.version += 1
            self._saved_version = self.version
            self._has_currterm = True

    def remember(self, state: StableState) -> None:
        """Take `state` as current without writing it; `persist()` (any thread) makes it durable."""
        self.state = state  # before the version: a persist that sees the new version sees this state
        self.version += 1

    @property
    def unsaved(self) -> bool:
        """The current state is not yet known durable."""
        return self._saved_version != self.version

    def persist(self, always: bool = False) -> None:
        """Write the current state if it is not durable yet, or `always` (OSError on failure).
        Thread-safe: writers take turns, and each writes the newest state at its turn."""
        with self._lock:
            state, version = self.state, self.version
            if version == self._saved_version and not always:
                return
            write_stable(self.files, self.dir, state)
            self._has_currterm = True
            self._saved_version = version

    def ensure_currterm(self) -> None:
        """Write `currterm` if the store has none yet. Called before the first entry or identity is
        written, so that a log or an identity without `currterm` always means that it was lost."""
        if not self._has_currterm:
            self.persist(always=True)

    def set_identity(self, identity: str) -> None:
        """Record the group identity durably (currterm first: see ensure_currterm)."""
        check_token(identity, "identity")
        self.ensure_currterm()
        if identity != self.identity:
            write_identity(self.files, self.dir, identity)
            self.identity = identity
