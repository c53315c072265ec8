"""The identity and currterm files, and the refusals of a store whose state files no longer match its data."""

from __future__ import annotations

import os
import re
import shutil
import zlib
from pathlib import Path

import pytest
from store_helpers import body, log_of, small_config

from quorumlog.errors import InvalidArgumentError, StoreError, StoreStateError
from quorumlog.store.file_store import FileStore

CFG = small_config(data_segment_bytes=16 * 1024, index_segment_bytes=32 * 16, max_body_bytes=4096)
SEG = CFG.data_segment_bytes


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def used_store(d: Path, n: int = 40, identity: str | None = "g0:abc") -> list:
    s = FileStore(d, CFG)
    s.save_vote(3, "n2")
    if identity is not None:
        s.set_identity(identity)
    for i in range(n):
        s.append([body(i, 700)], 3)
    s.set_committed(n - 5)
    log = log_of(s)
    s.close()
    return log


def refused(d: Path, *phrases: str) -> str:
    """Open must fail with StoreStateError naming `phrases`, telling the operator to move the directory
    aside (never to delete a file), and change nothing on disk."""
    before = snapshot(d)
    with pytest.raises(StoreStateError) as info:
        FileStore(d, CFG, repair=True)
    msg = str(info.value)
    for p in phrases:
        assert p in msg, msg
    assert "aside" in msg and str(d) in msg and "docs/operations.md" in msg, msg
    assert not re.search(r"\b(delete|remove|rm|unlink)\b", msg, re.IGNORECASE), msg
    assert snapshot(d) == before
    return msg


# -- identity ------------------------------------------------------------------------------------
def test_pristine_store_has_no_identity_and_stays_pristine(tmp_path: Path) -> None:
    d = tmp_path / "s"
    s = FileStore(d, CFG)
    assert s.identity is None
    s.close()
    s = FileStore(d, CFG)
    assert s.identity is None
    s.close()
    assert not (d / "identity").exists() and not (d / "currterm").exists()


def test_identity_is_recorded_durably_with_a_currterm(tmp_path: Path) -> None:
    d = tmp_path / "s"
    s = FileStore(d, CFG)
    s.set_identity("g0:5f2a")
    assert s.identity == "g0:5f2a"
    s.close()
    raw = (d / "identity").read_bytes()
    assert raw.startswith(b"identity=g0:5f2a\ncrc=")
    s = FileStore(d, CFG)
    assert s.identity == "g0:5f2a" and s.load_vote() == (0, None)  # currterm written first
    s.set_identity("g0:other")  # the caller decides; the store records
    s.close()
    s = FileStore(d, CFG)
    assert s.identity == "g0:other"
    s.close()


@pytest.mark.parametrize("what", ["entries", "vote"])
def test_store_written_before_identities_reads_as_empty(tmp_path: Path, what: str) -> None:
    d = tmp_path / "s"
    s = FileStore(d, CFG)
    if what == "entries":
        s.append([b"x"], 1)  # the first entry writes a currterm if there is none
    else:
        s.save_vote(1, "n1")
    s.close()
    assert (d / "currterm").exists() and not (d / "identity").exists()
    s = FileStore(d, CFG)
    assert s.identity == ""
    s.set_identity("g0:abc")
    s.close()
    s = FileStore(d, CFG)
    assert s.identity == "g0:abc"
    s.close()


@pytest.mark.parametrize("bad", ["", "a\nb", "a\rb", "a=b", "a\x00b", "a\u2028b"])
def test_invalid_identity_is_refused_and_nothing_written(tmp_path: Path, bad: str) -> None:
    d = tmp_path / "s"
    s = FileStore(d, CFG)
    with pytest.raises(InvalidArgumentError):
        s.set_identity(bad)
    assert s.identity is None and not (d / "identity").exists() and not (d / "currterm").exists()
    s.close()


def test_abstained_vote_persists(tmp_path: Path) -> None:
    d = tmp_path / "s"
    s = FileStore(d, CFG)
    s.save_vote(4, "*")
    s.close()
    s = FileStore(d, CFG)
    assert s.load_vote() == (4, "*")
    s.close()


# -- refusals ------------------------------------------------------------------------------------
def test_missing_currterm_with_entries_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "s"
    used_store(d, identity=None)
    os.unlink(d / "currterm")
    refused(d, "currterm is missing", "term and vote are lost")
    refused(d, "currterm is missing")  # and again: the refusal changed nothing


def test_missing_currterm_with_an_identity_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "s"
    s = FileStore(d, CFG)
    s.set_identity("g0:abc")
    s.close()
    os.unlink(d / "currterm")
    refused(d, "currterm is missing", "term and vote are lost")


@pytest.mark.parametrize("how", ["segments", "directory"])
def test_missing_data_files_are_refused(tmp_path: Path, how: str) -> None:
    d = tmp_path / "s"
    used_store(d)
    if how == "directory":
        shutil.rmtree(d / "data")
    else:
        for name in os.listdir(d / "data"):
            os.unlink(d / "data" / name)
    msg = refused(d, "the data files are missing")
    assert "entries up to 39" in msg


def test_missing_checkpoint_with_data_past_the_start_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "s"
    used_store(d, n=80)
    s = FileStore(d, CFG)
    s.set_committed(s.end_index)
    assert s.expire(s.end_index, 1e12) > 0  # the first segment goes
    s.close()
    os.unlink(d / "checkpoint")
    refused(d, "the checkpoint is missing")


def test_missing_checkpoint_with_data_from_the_start_recovers(tmp_path: Path) -> None:
    """No checkpoint is written until the first close: a crash before it is not a lost state."""
    d = tmp_path / "s"
    log = used_store(d)
    os.unlink(d / "checkpoint")
    s = FileStore(d, CFG)
    try:
        assert log_of(s) == log
    finally:
        s.close()


@pytest.mark.parametrize("name", ["checkpoint", "currterm", "identity"])
def test_damaged_state_file_is_refused(tmp_path: Path, name: str) -> None:
    d = tmp_path / "s"
    used_store(d)
    raw = (d / name).read_bytes()
    (d / name).write_bytes(raw[:5] + bytes([raw[5] ^ 1]) + raw[6:])
    refused(d, name, "is damaged")


def test_checkpoint_without_begin_term_reads_as_zero(tmp_path: Path) -> None:
    """A checkpoint written before begin_term existed."""
    d = tmp_path / "s"
    log = used_store(d)
    lines = [ln for ln in (d / "checkpoint").read_text().splitlines()
             if not ln.startswith(("begin_term=", "crc="))]
    text = "".join(ln + "\n" for ln in lines)
    (d / "checkpoint").write_text(text + f"crc={zlib.crc32(text.encode())}\n")
    s = FileStore(d, CFG)
    try:
        assert s.begin_term == 0 and s.term_at(-1) == 0 and log_of(s) == log
    finally:
        s.close()


def test_state_error_is_a_store_error() -> None:
    assert issubclass(StoreStateError, StoreError)


def test_an_unchanged_checkpoint_is_not_written_again(tmp_path: Path) -> None:
    """An idle group's node checkpoints every checkpoint_interval_ms: when nothing moved, the file already says
    it, and rewriting it cost an fsync per group every 3 s (100 idle groups: 33 a second)."""
    s = FileStore(tmp_path, CFG)
    try:
        s.append([body(i) for i in range(5)], 1)
        s.flush()
        s.set_committed(3)
        s.checkpoint()
        path = tmp_path / "checkpoint"
        first = path.stat().st_ino, path.read_bytes()
        s.checkpoint()
        s.checkpoint()
        assert (path.stat().st_ino, path.read_bytes()) == first  # (written by rename: a rewrite is a new inode)
        s.set_committed(4)
        s.checkpoint()
        assert path.stat().st_ino != first[0] and path.read_bytes() != first[1]
    finally:
        s.close()
    reopened = FileStore(tmp_path, CFG)
    try:
        assert reopened.committed_index == 4
    finally:
        reopened.close()
