"""Sparse segments and the window zero-filled ahead of the writes (store/segments.py), on real files."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from quorumlog.store import segments
from quorumlog.store.segments import SegmentList
from quorumlog.store.vfs import OsFiles

MiB = 1 << 20


def _allocated(path: Path) -> int:
    return sum(os.stat(p).st_blocks * 512 for p in path.iterdir())


def test_a_new_segment_is_sparse_and_the_filler_stays_a_window_ahead(tmp_path: Path) -> None:
    seg = SegmentList(str(tmp_path), 64 * MiB, OsFiles())
    try:
        seg.write(0, b"x" * 4096)
        assert seg.wait_filled(30)
        used = _allocated(tmp_path)
        # The window and the data, not the segment: 64 MiB of file, 32 MiB (+ a block) allocated.
        assert os.path.getsize(tmp_path / f"{0:020d}") == 64 * MiB
        assert segments.FILL_AHEAD <= used <= segments.FILL_AHEAD + 2 * 4096, used
        seg.write(4096, bytes(40 * MiB))  # the writer moves on: the window follows, to the segment's end
        assert seg.wait_filled(30)
        assert _allocated(tmp_path) == 64 * MiB
    finally:
        seg.close()


def test_the_filler_never_overwrites_what_the_writer_wrote(tmp_path: Path, monkeypatch: object) -> None:
    """Writes race the filler over a window small enough that it is always just ahead: every byte
    written must read back (a zero chunk landing on data would show here)."""
    monkeypatch.setattr(segments, "FILL_AHEAD", 64 * 1024)  # type: ignore[attr-defined]
    monkeypatch.setattr(segments, "FILL_PAUSE_S", 0.0)  # type: ignore[attr-defined]
    size = 8 * MiB
    seg = SegmentList(str(tmp_path), size, OsFiles())
    written = bytearray()
    try:
        off = 0
        n = 0
        while off + 3000 < 2 * size:
            if off // size != (off + 3000) // size:
                off = (off // size + 1) * size  # no write crosses a segment end
                written.extend(bytes(off - len(written)))
            chunk = bytes([n % 251 + 1]) * (1000 + n % 2000)
            seg.write(off, chunk)
            written.extend(chunk)
            off += len(chunk)
            n += 1
        seg.sync()
        for start in range(0, len(written), size):
            piece = bytes(seg.view(start, min(size, len(written) - start)))
            assert piece == bytes(written[start:start + size]), f"data lost in the segment at {start}"
    finally:
        seg.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("fill:")], "the filler outlived close()"
