"""check-store reads the `configs` file: it lists the configurations named there, reports a damaged file, a
body that is no configuration and a CONFIG entry of the log the file does not name as problems, and what
the next open would drop (an entry past the log's end) as a note only."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from store_helpers import small_config

from quorumlog.entry import HEADER_SIZE, MAGIC_CONFIG, MAGIC_NOOP
from quorumlog.raft.membership import Membership
from quorumlog.store import place
from quorumlog.store.configs import FILE, read_configs, write_configs
from quorumlog.store.file_store import FileStore
from quorumlog.store.verify import StoreReport, verify_store
from quorumlog.store.vfs import OsFiles

CFG = small_config(data_segment_bytes=16 * 1024, index_segment_bytes=32 * 16, max_body_bytes=4096)
SEG = CFG.data_segment_bytes
M1 = Membership.of(["a", "b", "c"])
M2 = M1.with_learner("d", "h:1")
M3 = M2.promoted("d")
BASE = Membership.of(["x", "y", "z"], ["w"])


def _store(d: Path) -> list[tuple[int, int, Membership]]:
    """A closed store whose log holds CONFIG entries among others, several segments long; the configurations
    its `configs` file names, oldest first."""
    s = FileStore(d, CFG)
    want: list[tuple[int, int, Membership]] = []
    try:
        for i in range(40):
            s.append([bytes([i]) * 700], 1)
        for term, m in ((1, M1), (2, M2)):
            want.append((s.append([m.encode()], term, MAGIC_CONFIG).first_index, term, m))
            s.append([b"n" * 900] * 3, term)
        s.append([b""], 2, MAGIC_NOOP)
        want.append((s.append([M3.encode()], 3, MAGIC_CONFIG).first_index, 3, M3))
        s.append([b"tail"], 3)
        s.set_committed(s.end_index)
        s.flush()
    finally:
        s.close()
    return want


def _reset_store(d: Path) -> list[tuple[int, int, Membership]]:
    """A closed store reset past its CONFIG entries, with the leader's base configuration below its begin,
    then a CONFIG entry above it."""
    s = FileStore(d, CFG)
    try:
        s.append([M1.encode()], 1, MAGIC_CONFIG)
        s.append([b"n" * 500] * 4, 1)
        s.reset(20, place(s.write_pos, HEADER_SIZE, SEG), 3, 1)
        s.set_base_config(17, 1, BASE.encode())
        s.append([b"m" * 300] * 2, 2)
        index = s.append([M2.encode()], 2, MAGIC_CONFIG).first_index
        s.append([b"after"], 2)
        s.flush()
    finally:
        s.close()
    return [(17, 1, BASE), (index, 2, M2)]


def _listed(want: list[tuple[int, int, Membership]]) -> list[dict[str, object]]:
    return [{"index": i, "term": t, "voters": sorted(m.voters), "learners": sorted(m.learners)} for i, t, m in want]


def _configs_problems(report: StoreReport) -> list[str]:
    return [e["problem"] for e in report.errors if e["file"] == FILE]


@pytest.mark.parametrize("build", [_store, _reset_store])
def test_a_clean_store_lists_its_configurations(tmp_path: Path, build: object) -> None:
    d = tmp_path / "s"
    want = build(d)  # type: ignore[operator]
    report = verify_store(str(d))
    assert report.errors == [] and report.notes == []
    assert report.configs == _listed(want)
    doc = json.loads(json.dumps(report.as_json()))
    assert doc["configs"] == _listed(want) and doc["errors"] == []


def test_no_configs_file_is_fine(tmp_path: Path) -> None:
    d = tmp_path / "s"
    s = FileStore(d, CFG)
    s.append([b"plain"] * 5, 1)
    s.close()
    assert not os.path.exists(d / FILE)
    report = verify_store(str(d))
    assert report.errors == [] and report.notes == [] and report.configs is None
    assert report.as_json()["configs"] is None


@pytest.mark.parametrize("damage", ["flip", "truncate", "trailing", "magic"])
def test_a_damaged_configs_file_is_a_problem_not_a_crash(tmp_path: Path, damage: str) -> None:
    d = tmp_path / "s"
    _store(d)
    path = d / FILE
    raw = bytearray(path.read_bytes())
    if damage == "flip":
        raw[len(raw) // 2] ^= 0x40
    elif damage == "truncate":
        del raw[-3:]
    elif damage == "trailing":
        raw += b"\x00garbage"
    else:
        raw[0:4] = b"XXXX"
    path.write_bytes(bytes(raw))
    report = verify_store(str(d))
    problems = _configs_problems(report)
    assert len(problems) == 1 and str(path) in problems[0] and "damaged" in problems[0], report.errors
    assert report.configs is None
    assert [e for e in report.errors if e["file"] != FILE] == []  # the log itself is intact


def test_a_config_entry_the_file_does_not_name_is_a_problem(tmp_path: Path) -> None:
    d = tmp_path / "s"
    want = _store(d)
    saved = read_configs(str(d))
    assert saved is not None and [c[0] for c in saved] == [c[0] for c in want]
    missing = saved[1]
    write_configs(OsFiles(), str(d), [c for c in saved if c != missing])
    report = verify_store(str(d))
    problems = _configs_problems(report)
    assert len(problems) == 1 and f"CONFIG entry {missing[0]} (term {missing[1]})" in problems[0], report.errors
    assert "not named" in problems[0]
    assert report.configs == _listed([w for w in want if w[0] != missing[0]])


def test_a_log_with_config_entries_but_no_file_is_a_problem(tmp_path: Path) -> None:
    d = tmp_path / "s"
    want = _store(d)
    os.unlink(d / FILE)
    report = verify_store(str(d))
    problems = _configs_problems(report)
    assert len(problems) == len(want) and all("no such file" in p for p in problems), report.errors
    assert report.configs is None


def test_a_config_with_another_body_is_a_problem_and_a_note(tmp_path: Path) -> None:
    """The file names entry N with another body than the log's: open would drop the row (a note) and the
    log's CONFIG entry N would then go untracked (a problem)."""
    d = tmp_path / "s"
    want = _store(d)
    saved = read_configs(str(d))
    assert saved is not None
    i, t, _body = saved[0]
    write_configs(OsFiles(), str(d), [(i, t, M3.encode()), *saved[1:]])
    report = verify_store(str(d))
    problems = _configs_problems(report)
    assert len(problems) == 1 and f"CONFIG entry {want[0][0]} " in problems[0], report.errors
    assert len(report.notes) == 1 and f"entry {i} " in report.notes[0]


def test_an_entry_past_the_log_end_is_a_note_only(tmp_path: Path) -> None:
    """The file is written before the entry: after a crash between the two it names one past the log's end,
    which the next open drops. Not damage."""
    d = tmp_path / "s"
    want = _store(d)
    saved = read_configs(str(d))
    assert saved is not None
    end = verify_store(str(d)).end_index
    phantom = (end + 1, 3, Membership.of(["a", "b"]).encode())
    write_configs(OsFiles(), str(d), [*saved, phantom])
    report = verify_store(str(d))
    assert report.errors == []
    assert len(report.notes) == 1 and f"CONFIG entry {end + 1} (term 3)" in report.notes[0]
    assert f"the log ends at {end}" in report.notes[0]
    assert report.configs == [*_listed(want), {"index": end + 1, "term": 3, "voters": ["a", "b"], "learners": []}]
    s = FileStore(d, CFG)  # as the note says: open drops it
    try:
        assert [c[0] for c in s.configs] == [w[0] for w in want]
    finally:
        s.close()


def test_superseded_rows_below_the_begin_are_a_note_only(tmp_path: Path) -> None:
    """An expiry or reset crashed before the file was rewritten: of the rows below the begin, open keeps the
    last only."""
    d = tmp_path / "s"
    want = _reset_store(d)
    saved = read_configs(str(d))
    assert saved is not None and saved[0][0] == 17
    write_configs(OsFiles(), str(d), [(3, 1, M1.encode()), *saved])
    report = verify_store(str(d))
    assert report.errors == []
    assert len(report.notes) == 1 and "entry 3 (term 1)" in report.notes[0] and "below" in report.notes[0]
    assert report.configs is not None and [c["index"] for c in report.configs] == [3] + [w[0] for w in want]


@pytest.mark.parametrize("where", ["log", "base"])
def test_a_body_that_is_no_configuration_is_a_problem(tmp_path: Path, where: str) -> None:
    d = tmp_path / "s"
    s = FileStore(d, CFG)
    try:
        s.append([b"n" * 100] * 3, 1)
        if where == "log":
            index = s.append([b"not a configuration"], 1, MAGIC_CONFIG).first_index
        else:
            index = 1
            s.reset(5, place(s.write_pos, HEADER_SIZE, SEG), 3, 1)
            s.set_base_config(index, 1, b"not a configuration")
        s.append([b"tail"], 1)
    finally:
        s.close()
    report = verify_store(str(d))
    problems = _configs_problems(report)
    assert len(problems) == 1 and f"CONFIG entry {index} (term 1)" in problems[0], report.errors
    assert "does not decode" in problems[0]
    assert report.configs == [{"index": index, "term": 1, "voters": None, "learners": None}]
