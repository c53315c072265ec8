"""The background scrub's store side (FileStore.scrub) and its pacing (server/scrub.py Scrubber): the
committed log read back in steps from the segments, every check made, the first damaged entry named."""

from __future__ import annotations

from pathlib import Path

import pytest
from store_helpers import log_of, small_config

from quorumlog.entry import HEADER_SIZE
from quorumlog.errors import CorruptEntryError
from quorumlog.server.scrub import SCRUB_FIRST_DELAY_S, Scrubber
from quorumlog.server.store import NodeStore
from quorumlog.store import segments
from quorumlog.store.file_store import FileStore

CFG = small_config(data_segment_bytes=16 * 1024, index_segment_bytes=32 * 64, max_body_bytes=4096)
SEG = CFG.data_segment_bytes


def body(i: int) -> bytes:
    return bytes(1 + (i * 37 + j) % 251 for j in range(300 + i % 5 * 100))


def filled(s: FileStore, n: int = 120) -> list:
    """n entries over several segments (each ends in blank padding), committed and flushed."""
    for i in range(n):
        s.append([body(i)], 1 + i // 40)
    s.flush()
    s.set_committed(n - 1)
    return log_of(s)


def flip(d: Path, pos: int, mask: int = 0x04) -> None:
    """XOR `mask` into the byte at log position `pos` (through the page cache, as bit rot is seen)."""
    with open(d / "data" / f"{pos - pos % SEG:020d}", "r+b") as f:
        f.seek(pos % SEG)
        b = f.read(1)[0]
        f.seek(-1, 1)
        f.write(bytes([b ^ mask]))


def scrub_all(s: FileStore, step: int) -> tuple[int, int]:
    """Scrub the whole committed log in steps of `step` bytes: (steps taken, bytes checked)."""
    at, steps, total = s.begin_index, 0, 0
    while at <= s.committed_index:
        nxt, n = s.scrub(at, s.committed_index, step)
        assert nxt > at and 0 < n <= step + 2 * (HEADER_SIZE + 700)  # whole entries; a segment's blank end
        at, steps, total = nxt, steps + 1, total + n
    return steps, total


def test_a_scrub_walks_the_committed_log_in_steps_across_segments(tmp_path: Path) -> None:
    s = FileStore(tmp_path / "s", CFG)
    try:
        log = filled(s)
        assert log[-1][2] // SEG >= 3  # several segments, so blank padding is walked over
        steps, total = scrub_all(s, 2000)
        assert steps >= total // (2000 + 2 * (HEADER_SIZE + 700))
        assert total >= sum(HEADER_SIZE + len(e[4]) for e in log)
        assert s.scrub(s.committed_index + 1, s.committed_index, 2000) == (s.committed_index + 1, 0)
        assert s.scrub(10, 10, 1) == (11, HEADER_SIZE + len(log[10][4]))  # at least one entry, even past the budget
    finally:
        s.close()


@pytest.mark.parametrize("where", [HEADER_SIZE + 5, 7, 36], ids=["body", "entry size", "chain crc"])
def test_a_scrub_names_the_first_damaged_entry_and_checks_nothing_past_it(tmp_path: Path, where: int) -> None:
    d = tmp_path / "s"
    s = FileStore(d, CFG)
    try:
        log = filled(s)
        flip(d, log[77][2] + where)
        at = 0
        with pytest.raises(CorruptEntryError) as info:
            while True:
                at, _ = s.scrub(at, s.committed_index, 3000)
                assert at <= 77
        assert info.value.index == 77 and str(d) in str(info.value)
    finally:
        s.close()


def test_a_scrub_reads_the_segments_not_the_batches_kept_in_memory(tmp_path: Path) -> None:
    """A leader keeps its latest batches in memory for its pushes; they hide the disk's copy from a read,
    not from the scrub."""
    d = tmp_path / "s"
    s = FileStore(d, CFG)
    try:
        s.append([body(i) for i in range(5)], 1)
        s.flush()
        s.set_committed(4)
        pos = s.get(3).pos
        flip(d, pos + HEADER_SIZE + 1)
        assert s.read_raw(0, 5, 1 << 20)[1] == 5  # from the batches in memory: looks whole
        with pytest.raises(CorruptEntryError) as info:
            s.scrub(0, 4, 1 << 20)
        assert info.value.index == 3
    finally:
        s.close()


def test_a_scrub_of_pages_dropped_behind_the_writer_drops_them_again_and_still_reads_the_disk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(segments, "CACHE_BEHIND", 16 * 1024)
    monkeypatch.setattr(segments, "DROP_STEP", 4096)
    d = tmp_path / "s"
    s = FileStore(d, CFG)
    try:
        log = filled(s)
        assert s.data._dropped > log[20][2]  # the writer dropped the first segments' pages
        scrub_all(s, 4096)
        scrub_all(s, 4096)  # read again, through the pages the first pass dropped
        flip(d, log[5][2] + HEADER_SIZE + 9)
        with pytest.raises(CorruptEntryError) as info:
            scrub_all(s, 4096)
        assert info.value.index == 5
    finally:
        s.close()


def test_the_scrubber_paces_passes_and_hands_damage_on(tmp_path: Path) -> None:
    d = tmp_path / "s"
    s = NodeStore(d, CFG)
    found: list[CorruptEntryError] = []
    try:
        log = filled(s)
        scrubber = Scrubber(s, interval_s=100.0, now_s=0.0, on_damage=found.append)
        first = min(SCRUB_FIRST_DELAY_S, 100.0)
        assert not scrubber.due(first - 1)
        scrubber.step(first - 1, 1 << 20)
        assert scrubber.doc()["scrubbed_bytes"] == 0
        now = first
        while scrubber.passes == 0:
            assert scrubber.due(now)
            scrubber.step(now, 5000)
            now += 0.1
        assert scrubber.doc()["scrubbed_bytes"] >= sum(HEADER_SIZE + len(e[4]) for e in log)
        assert not scrubber.due(now) and scrubber.due(first + 100)  # the next pass an interval after the last began
        flip(d, log[50][2] + HEADER_SIZE + 2)
        now = first + 100
        while not found:
            scrubber.step(now, 5000)
            now += 0.1
            assert now < first + 200
        assert found[0].index == 50 and scrubber.damaged == 1 and scrubber.passes == 1
        assert not scrubber.due(now)  # that pass ended at the damage; the next one starts an interval later
    finally:
        s.close()
