"""check-store's progress: verify_store reports bytes checked per segment (never per entry), ending at the
total; the command shows it on a terminal only, so piped and --json output carry none of it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from store_helpers import SEG, small_config

from quorumlog.store.file_store import FileStore
from quorumlog.store.verify import verify_store


def _store(path: Path, segments: int) -> int:
    """A closed store filling `segments` data segments with 1 KiB entries; returns its entry count."""
    s = FileStore(path, small_config())
    try:
        while s.write_pos < (segments - 1) * SEG + SEG // 2:
            s.append([b"p" * 1024] * 8, term=1)
        s.flush()
        s.set_committed(s.end_index)
        s.checkpoint()
        return s.end_index + 1
    finally:
        s.close()


def test_progress_is_per_segment_and_ends_at_the_total(tmp_path: Path) -> None:
    entries = _store(tmp_path / "s", 6)
    calls: list[tuple[int, int]] = []
    report = verify_store(str(tmp_path / "s"), progress=lambda done, total: calls.append((done, total)))
    assert report.errors == [] and report.entries == entries
    assert verify_store(str(tmp_path / "s")).digest == report.digest  # the callback changes nothing
    totals = {t for _, t in calls}
    assert totals == {6 * SEG}, totals
    done = [d for d, _ in calls]
    assert done == sorted(done) and done[0] == 0 and done[-1] == 6 * SEG
    # Once at the first entry of each segment (SEG is far below PROGRESS_EVERY), and once at the end:
    # never per entry.
    assert len(calls) == 6 + 1, calls
    assert all(0 <= d - k * SEG < 1100 for k, d in enumerate(done[:6])), done


def test_check_store_prints_no_progress_when_piped(tmp_path: Path) -> None:
    _store(tmp_path / "s", 3)
    for extra in (["--json"], []):
        r = subprocess.run([sys.executable, "-m", "quorumlog", "check-store", *extra, str(tmp_path / "s")],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stderr == ""  # stderr is a pipe here: no bar, no blank line
        if extra:
            assert json.loads(r.stdout)["errors"] == []
        else:
            assert "OK" in r.stdout
