"""Offline verification of one store directory (`quorumlog check-store`): reads, never writes."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..config import MAX_BODY_BYTES
from ..entry import HEADER_SIZE, INDEX_UNIT, INDEX_UNIT_SIZE, digest_key
from ..errors import StoreError
from .checkpoint import Checkpoint, read_checkpoint, read_stable
from .recovery import WalkError, walk
from .segments import SegmentList
from .vfs import OsFiles

# A progress callback hears (bytes checked, bytes to check) about this often, and at each segment's start.
PROGRESS_EVERY = 16 << 20
Progress = Callable[[int, int], None]


class _ReadOnlyFiles(OsFiles):
    def open(self, path: str) -> int:
        return os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))

    def extend(self, fd: int, size: int) -> None:
        raise StoreError("a segment file is shorter than its segment size")

    def unlink(self, path: str) -> None:
        """Verification leaves every file as it found it (spare segments included)."""


@dataclass
class StoreReport:
    """What check-store found; `errors` lists problems as {file, offset, problem}."""

    begin_index: int = 0
    end_index: int = -1
    end_term: int = 0
    committed_index: int = -1
    entries: int = 0
    producer_meta_entries: int = 0  # entries that carry producer metadata
    data_bytes: int = 0
    digest: str = hashlib.sha256().hexdigest()
    errors: list[dict[str, Any]] = field(default_factory=list)
    term: int = 0
    voted_for: str | None = None
    recovering: bool = False

    def as_json(self) -> dict[str, Any]:
        keys = ("begin_index", "end_index", "end_term", "committed_index", "entries", "producer_meta_entries",
                "data_bytes", "digest", "errors")
        return {k: getattr(self, k) for k in keys}


def _segment_size(directory: str) -> int | None:
    for name in sorted(os.listdir(directory)):
        if name.isdigit():
            return os.path.getsize(os.path.join(directory, name))
    return None


def verify_store(directory: str, max_body: int = MAX_BODY_BYTES, progress: Progress | None = None) -> StoreReport:
    """Walk every entry from the checkpointed begin, checking each against its neighbours and its
    index unit; compute the replica digest. Raises StoreError when the directory is not a store.

    `progress`, if given, is called with (bytes checked, bytes to check) of the data segments, every
    PROGRESS_EVERY bytes and at each segment's start, and once with both equal at the end."""
    report = StoreReport()
    data_dir, index_dir = os.path.join(directory, "data"), os.path.join(directory, "index")
    if not os.path.isdir(directory):
        raise StoreError(f"{directory}: no such directory")
    if not os.path.isdir(data_dir):
        raise StoreError(f"{directory}: not a quorumlog store (no data/ directory)")
    try:
        cp = read_checkpoint(directory)
    except StoreError as e:
        report.errors.append({"file": "checkpoint", "offset": 0, "problem": str(e)})
        cp = Checkpoint()
    try:
        stable = read_stable(directory)
        report.term, report.voted_for, report.recovering = stable.term, stable.voted_for, stable.recovering
    except StoreError as e:
        report.errors.append({"file": "currterm", "offset": 0, "problem": str(e)})
    report.committed_index = cp.committed_index
    report.begin_index = cp.begin_index
    files = _ReadOnlyFiles()
    data_size = _segment_size(data_dir)
    if data_size is None:
        report.end_index, report.end_term = cp.begin_index - 1, cp.begin_term
        if cp.committed_index >= cp.begin_index:
            report.errors.append({"file": "data", "offset": 0,
                                  "problem": f"no data files, but entries up to {cp.committed_index} are committed"})
        return report
    data = SegmentList(data_dir, data_size, files, preallocate=False)
    index_size = _segment_size(index_dir) if os.path.isdir(index_dir) else None
    index = SegmentList(index_dir, index_size or INDEX_UNIT_SIZE, files, preallocate=False)
    try:
        for lst, what in ((data, "data"), (index, "index")):
            if what == "index" and index_size is None:
                continue
            try:
                lst.load()
            except (StoreError, OSError) as e:
                report.errors.append({"file": what, "offset": 0, "problem": str(e)})
        _walk_all(data, index, cp, max_body, report, progress)
    finally:
        data.close()
        index.close()
    return report


def _where(data: SegmentList, pos: int) -> tuple[str, int]:
    seg = data.find(pos)
    if seg is None:
        return "data", pos
    return os.path.relpath(seg.path, os.path.dirname(data.dir)), pos - seg.start


def _walk_all(data: SegmentList, index: SegmentList, cp: Checkpoint, max_body: int, r: StoreReport,
              progress: Progress | None) -> None:
    digest = hashlib.sha256()
    unit = INDEX_UNIT.pack
    pos = max(cp.begin_pos, data.start)
    # Progress over the data segments from where the walk starts; checked per entry with one comparison.
    first, total = pos, max(0, data.end - pos)
    mark = pos if progress is not None else 1 << 62
    expected = cp.begin_index
    chain: int | None = cp.begin_chain if pos == cp.begin_pos else None
    term = cp.begin_term
    while True:
        try:
            for view, rel, h in walk(data, pos, expected, chain, term, max_body):
                if h[4] >= mark:
                    assert progress is not None
                    mark = min(h[4] + PROGRESS_EVERY, h[4] - rel + data.size)  # or the next segment's start
                    progress(h[4] - first, total)
                end = rel + h[1]
                meta = view[rel + HEADER_SIZE:end - h[8]]
                if meta:
                    r.producer_meta_entries += 1
                digest.update(digest_key(h[2], h[3], h[0], meta))  # as entry.replica_digest
                digest.update(view[end - h[8]:end])
                r.entries += 1
                r.data_bytes += h[1]
                u = index.find(h[2] * INDEX_UNIT_SIZE)
                uoff = h[2] * INDEX_UNIT_SIZE - (u.start if u else 0)
                if u is None or u.view[uoff:uoff + INDEX_UNIT_SIZE] != unit(h[0], h[4], h[1], h[2], h[3]):
                    r.errors.append({"file": "index", "offset": h[2] * INDEX_UNIT_SIZE,
                                     "problem": f"index unit of entry {h[2]} disagrees with the data"})
                expected, chain, term, pos = h[2] + 1, h[6], h[3], h[4] + h[1]
            break
        except WalkError as e:
            where, off = _where(data, e.pos)
            r.errors.append({"file": where, "offset": off, "problem": str(e)})
            # Resume at the next segment's first entry, to report what lies beyond.
            nxt = e.pos - e.pos % data.size + data.size
            seg = data.find(nxt)
            if seg is None:
                break
            first = int.from_bytes(seg.view[8:16], "big")
            if first != expected:
                r.errors.append({"file": where, "offset": off,
                                 "problem": f"entries {expected}..{first - 1} are missing or unreadable"})
            pos, expected, chain = nxt, first, None
    r.end_index = expected - 1
    r.end_term = term
    r.digest = digest.hexdigest()
    if progress is not None:
        progress(total, total)
    if cp.committed_index > r.end_index:
        r.errors.append({"file": "checkpoint", "offset": 0,
                         "problem": f"committed index {cp.committed_index} is past the log's end {r.end_index}"})
