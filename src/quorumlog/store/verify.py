"""Offline verification of one store directory (`quorumlog check-store`): reads, never writes."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..config import MAX_BODY_BYTES
from ..entry import HEADER_SIZE, INDEX_UNIT, INDEX_UNIT_SIZE, MAGIC_CONFIG, digest_key
from ..errors import CorruptEntryError, StoreError
from ..raft.membership import Membership, MembershipError
from .checkpoint import Checkpoint, read_checkpoint, read_stable
from .configs import FILE as CONFIGS_FILE
from .configs import Config, ConfigLog, config_of, read_configs
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
    """What check-store found; `errors` lists problems as {file, offset, problem}; `notes` what the next
    open would repair without a word of damage (a `configs` file naming entries the log does not hold);
    `configs` the configurations the `configs` file names (None without a readable file)."""

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
    configs: list[dict[str, Any]] | None = None  # {index, term, voters, learners} (None: not decodable)
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        keys = ("begin_index", "end_index", "end_term", "committed_index", "entries", "producer_meta_entries",
                "data_bytes", "digest", "configs", "errors", "notes")
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
        _check_configs(directory, cp.begin_index, [], [], None, report)
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
        found, unreadable = _walk_all(data, index, cp, max_body, report, progress)
        _check_configs(directory, cp.begin_index, found, unreadable, index if index_size else None, report)
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
              progress: Progress | None) -> tuple[list[Config], list[tuple[int, int]]]:
    """Walk and check the log; return its CONFIG entries and the index ranges it could not read."""
    digest = hashlib.sha256()
    unit = INDEX_UNIT.pack
    config_magic = MAGIC_CONFIG
    found: list[Config] = []
    unreadable: list[tuple[int, int]] = []
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
                if h[0] == config_magic:
                    found.append(config_of(view, rel, h[1], h[2], h[3]))
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
                unreadable.append((expected, first - 1))
            pos, expected, chain = nxt, first, None
    r.end_index = expected - 1
    r.end_term = term
    r.digest = digest.hexdigest()
    if progress is not None:
        progress(total, total)
    if cp.committed_index > r.end_index:
        r.errors.append({"file": "checkpoint", "offset": 0,
                         "problem": f"committed index {cp.committed_index} is past the log's end {r.end_index}"})
    return found, unreadable


def _check_configs(directory: str, begin: int, found: list[Config], unreadable: list[tuple[int, int]],
                   index: SegmentList | None, r: StoreReport) -> None:
    """Check the `configs` file (configs.py) against the walked log [begin, r.end_index] as open's
    ConfigLog.validate would: what open would drop is a note; a body that is not a configuration, or a
    CONFIG entry of the log the file does not name (it is written before the entry), is a problem."""
    try:
        saved = read_configs(directory)
    except StoreError as e:  # damaged (StoreStateError, naming the file) or unreadable
        r.errors.append({"file": CONFIGS_FILE, "offset": 0, "problem": str(e)})
        return
    if saved is not None:
        r.configs = [_describe(c, r) for c in saved]
    held = {c[0]: c for c in found}

    def lookup(i: int) -> tuple[int, int, bytes]:
        c = held.get(i)
        if c is not None:
            return c[1], MAGIC_CONFIG, c[2]
        if any(lo <= i <= hi for lo, hi in unreadable):
            raise CorruptEntryError(f"entry {i} is missing or unreadable")
        return _unit_term_magic(index, i) + (b"",)

    log = ConfigLog(saved or ())
    below = [c for c in log.entries if c[0] < begin]
    r.notes += [f"{CONFIGS_FILE}: entry {c[0]} (term {c[1]}) lies below the log's begin {begin} before the "
                f"base {below[-1][0]}: the next open drops it" for c in below[:-1]]
    r.notes += [f"{CONFIGS_FILE}: {note} (as the next open will)" for note in log.validate(begin, r.end_index, lookup)]
    named = set(log.entries)
    for c in found:
        if c not in named:
            r.errors.append({"file": CONFIGS_FILE, "offset": 0, "problem":
                             f"CONFIG entry {c[0]} (term {c[1]}) of the log is not named by {CONFIGS_FILE} "
                             f"({'no such file' if saved is None else 'which is written before the entry'}): "
                             f"the store would not follow the configuration it holds"})


def _describe(c: Config, r: StoreReport) -> dict[str, Any]:
    """A `configs` entry for the report; a body that is not a configuration is a problem."""
    try:
        m = Membership.decode(c[2])
    except MembershipError as e:
        r.errors.append({"file": CONFIGS_FILE, "offset": 0,
                         "problem": f"CONFIG entry {c[0]} (term {c[1]}) of {CONFIGS_FILE}: {e}"})
        return {"index": c[0], "term": c[1], "voters": None, "learners": None}
    return {"index": c[0], "term": c[1], "voters": sorted(m.voters), "learners": sorted(m.learners)}


def _unit_term_magic(index: SegmentList | None, i: int) -> tuple[int, int]:
    """(term, magic) of walked entry `i` from its index unit (the walk checked it against the data);
    (-1, 0) when the unit is missing or names another entry (the walk reported that)."""
    u = index.find(i * INDEX_UNIT_SIZE) if index is not None else None
    if u is None:
        return -1, 0
    off = i * INDEX_UNIT_SIZE - u.start
    magic, _pos, _size, at, term = INDEX_UNIT.unpack_from(u.view, off)
    return (term, magic) if at == i else (-1, 0)
