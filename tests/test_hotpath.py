"""quorumlog._hotpath (native/) against the Python versions it stands in for: on random runs of entries,
corrupted, truncated, misplaced or given odd arguments, both return the same bytes and values or raise
the same exception type with the same message."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
import zlib
from collections import deque
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from quorumlog import hotpath
from quorumlog.entry import (
    BLANK,
    HEADER_SIZE,
    INDEX_UNIT,
    MAGIC_BLANK,
    MAGIC_CONFIG,
    MAGIC_NOOP,
    MAGIC_NORMAL,
    META_SIZE,
    encode_entry,
    encode_run,
    pack_meta,
)
from quorumlog.store.base import _fail_run, index_units, place, verify_run
from quorumlog.store.reader import checked_runs
from quorumlog.store.segments import SegmentList
from quorumlog.store.vfs import OsFiles

try:
    from quorumlog import _hotpath as native
except ImportError:
    native = None

needs_native = pytest.mark.skipif(native is None, reason="quorumlog._hotpath is not built (test_native_is_active)")
PURE = os.environ.get("QUORUMLOG_PURE", "") not in ("", "0")
u32 = st.integers(0, 2**32 - 1)
magics = st.sampled_from([MAGIC_NORMAL, MAGIC_NORMAL, MAGIC_NOOP, MAGIC_CONFIG])
as_buffer = st.sampled_from([bytes, bytearray, memoryview])


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[Any, ...]:
    """("ok", result) or ("raised", type, message, the error's `index`)."""
    try:
        return ("ok", fn(*args))
    except Exception as e:  # every kind: the two versions must raise the same one
        return ("raised", type(e), str(e), getattr(e, "index", None))


REFERENCE = {f.__code__: f.__name__ for f in (encode_run, verify_run, checked_runs, _fail_run, index_units)}


def traced(fn: Callable[..., Any], *args: Any) -> tuple[tuple[Any, ...], list[str]]:
    """outcome(), and the Python versions it handed work to: none on the good path, or the C code would
    only be passing its inputs on."""
    called: list[str] = []

    def profile(frame: Any, what: str, _arg: Any) -> None:
        if what == "call" and frame.f_code in REFERENCE:
            called.append(REFERENCE[frame.f_code])

    sys.setprofile(profile)
    try:
        return outcome(fn, *args), called
    finally:
        sys.setprofile(None)


def test_native_is_active() -> None:
    """`make install` builds the extension here: NATIVE off would mean the build silently broke (or, in
    the pure run of `make test`, that QUORUMLOG_PURE is not honoured)."""
    assert hotpath.NATIVE is (not PURE), \
        f"NATIVE is {hotpath.NATIVE}, QUORUMLOG_PURE {'set' if PURE else 'unset'} (did `make install` build native/?)"
    if not PURE:
        spec = importlib.util.find_spec("quorumlog._hotpath")
        assert spec is not None and spec.origin is not None and spec.origin.endswith(".so")
        assert hotpath.encode_run is native.encode_run  # type: ignore[union-attr]
        assert hotpath.checked_runs is hotpath.native_checked_runs


def test_pure_environment_keeps_the_python_versions() -> None:
    code = "import quorumlog.hotpath as h, quorumlog.entry as e; print(h.NATIVE, h.encode_run is e.encode_run)"
    for value, expect in (("1", "False True"), ("0", f"{native is not None} {native is None}")):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "QUORUMLOG_PURE": value})
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == expect.split()


# -- the CRC ----------------------------------------------------------------------------------------

@needs_native
@given(data=st.binary(max_size=5000), skip=st.integers(0, 15), seed=st.one_of(u32, st.integers(-2**40, 2**70)))
def test_crc32_is_zlibs(data: bytes, skip: int, seed: int) -> None:
    view = memoryview(data)[skip:]  # every alignment
    assert native is not None
    assert native.crc32(view, seed & 0xFFFFFFFF) == zlib.crc32(view, seed)
    assert native.crc32(view, seed & 0xFFFFFFFF, True) == zlib.crc32(view, seed)


@needs_native
def test_crc32_of_large_and_uniform_buffers() -> None:
    assert native is not None
    for n in (0, 1, 63, 64, 65, 79, 80, 127, 128, 129, 1 << 16, (1 << 20) + 7):
        for data in (bytes(n), b"\xff" * n, os.urandom(n)):
            assert native.crc32(data) == zlib.crc32(data), n


# -- encode_run -------------------------------------------------------------------------------------

big_body = st.integers(60_000, 70_000).map(lambda n: (b"\x5a\x00\xa5\xff" * (n // 4 + 1))[:n])
bodies = st.lists(st.one_of(st.binary(max_size=300), st.binary(min_size=900, max_size=1100), big_body),
                  min_size=0, max_size=12)
i64 = st.one_of(*[st.integers(0, 2**40)] * 8, st.integers(2**63 - 20, 2**63 + 2), st.integers(-2**63 - 2, -2**63 + 2))
good_meta = st.builds(pack_meta, st.integers(1, 2**62), st.integers(0, 2**62), st.integers(1, 100),
                      st.integers(0, 2**62))
any_meta = st.one_of(good_meta, good_meta.map(bytearray), st.binary(max_size=40))


@st.composite
def encode_case(draw: st.DrawFn) -> tuple[Any, ...]:
    """encode_run's arguments: mostly a batch a leader encodes (metadata at some of its offsets), now and
    then a field out of range or metadata Python refuses."""
    run = [draw(as_buffer)(body) for body in draw(bodies)]
    n = len(run)
    good = st.dictionaries(st.integers(0, max(n - 1, 0)), good_meta, min_size=min(n, 1), max_size=n)
    metas = draw(st.one_of(st.none(), st.just({}), good, good, good,
                           st.dictionaries(st.integers(-1, n + 1), any_meta, max_size=4)))
    magic = draw(st.one_of(*[magics] * 6, st.integers(-2**31, 2**31 - 1), st.sampled_from([2**31, -2**31 - 1])))
    prev = draw(st.one_of(u32, st.integers(-2**40, 2**70)))
    return run, magic, draw(i64), draw(i64), draw(i64), prev, metas


@needs_native
@settings(max_examples=300, deadline=None)
@given(case=encode_case(), before=st.lists(st.integers(0, 99), max_size=2))
def test_encode_run_matches_python(case: tuple[Any, ...], before: list[int]) -> None:
    assert native is not None
    *args, metas = case
    ours, theirs = list(before), list(before)
    got, called = traced(native.encode_run, *args, ours, metas)
    want = outcome(encode_run, *args, theirs, metas)
    event(f"encode {want[0]}{' with metadata' if want[0] == 'ok' and metas else ''}")
    assert got == want
    assert ours == theirs
    if want[0] == "ok" and args[0]:
        assert called == []


@needs_native
@pytest.mark.parametrize("args", [
    lambda: ([b"a", "text"], MAGIC_NORMAL, 0, 1, 0, 0),  # not bytes-like
    lambda: ([b"a", 7], MAGIC_NORMAL, 0, 1, 0, 0),
    lambda: ((b for b in [b"a"]), MAGIC_NORMAL, 0, 1, 0, 0),  # no len()
    lambda: ((b"a", bytearray(b"bc")), MAGIC_NORMAL, 0, 1, 0, 0),
    lambda: ([memoryview(b"abcd")[::2]], MAGIC_NORMAL, 0, 1, 0, 0),  # not contiguous
    lambda: ([memoryview(b"abcd").cast("h")], MAGIC_NORMAL, 0, 1, 0, 0),  # len() counts items of 2 bytes
    lambda: ([memoryview(b"abcd").cast("b")], MAGIC_NORMAL, 0, 1, 0, 0),  # signed bytes
    lambda: ([b"a"], 1.0, 0, 1, 0, 0),
    lambda: ([b"a"], MAGIC_NORMAL, 0, 1, 0, None),
    lambda: ([b"a"], MAGIC_NORMAL, 0, 1, 0, True),
    lambda: ([b"a"], True, False, 1, 0, 0),
    lambda: ([], "no magic", None, None, None, "any chain"),  # nothing to encode: returned as given
])
def test_encode_run_odd_arguments_match_python(args: Callable[[], tuple[Any, ...]]) -> None:
    assert native is not None
    ours: list[int] = []
    theirs: list[int] = []
    assert outcome(native.encode_run, *args(), ours) == outcome(encode_run, *args(), theirs)
    assert ours == theirs


@needs_native
def test_encode_run_appends_to_any_positions_object_as_python_does() -> None:
    assert native is not None
    ours: deque[int] = deque([5])
    theirs: deque[int] = deque([5])
    got = native.encode_run([b"x", b"yz"], MAGIC_NORMAL, 3, 2, 100, 9, ours)  # type: ignore[arg-type]
    assert got == encode_run([b"x", b"yz"], MAGIC_NORMAL, 3, 2, 100, 9, theirs)  # type: ignore[arg-type]
    assert ours == theirs == deque([5, 100, 149])
    bodies: list[Any] = [b"a"]
    released = memoryview(b"b")
    released.release()
    assert outcome(native.encode_run, [*bodies, released], 1, 0, 1, 0, 0, []) == \
        outcome(encode_run, [*bodies, released], 1, 0, 1, 0, 0, [])


# -- verify_run -------------------------------------------------------------------------------------

def body_for(draw: st.DrawFn, wp: int, seg: int, meta: bytes, limit: int, gaps: list[int]) -> bytes:
    """A random body, or now and then one that leaves exactly one of `gaps` bytes of wp's segment after
    its entry (the edges of place() and of the read walk)."""
    room = seg - wp % seg - HEADER_SIZE - len(meta)
    gap = draw(st.sampled_from([-1, -1, -1, *gaps]))
    if gap >= 0 and 0 <= room - gap <= limit:
        return draw(st.binary(min_size=room - gap, max_size=room - gap))
    return draw(st.binary(max_size=limit))


@st.composite
def pushed(draw: st.DrawFn) -> tuple[bytes, int, int, int, int, int, int]:
    """Entries as a leader pushes them (placed across segment ends, chained), then maybe damaged: one byte
    changed, cut short, an entry encoded with a wrong index, term or position, or checked against a log
    they do not extend. (data, first_index, write_pos, prev_chain, end_term, segment_bytes, max_body)."""
    seg = draw(st.sampled_from([256, 1024, 4096, 1 << 20]))
    first = draw(st.one_of(st.integers(0, 2**40), st.integers(2**63 - 8, 2**63 - 1)))
    write_pos = draw(st.integers(0, 3 * seg))
    chain = prev = draw(u32)
    term = end_term = draw(st.integers(0, 2**40))
    count = min(draw(st.integers(0, 10)), 2**63 - first)  # indexes stay within int64
    skews = st.tuples(st.integers(0, 9), st.sampled_from(["index", "term", "pos"]), st.sampled_from([-1, 1, 2**20]))
    skew = draw(st.one_of(st.none(), st.none(), st.none(), skews))
    data = bytearray()
    wp = write_pos
    for i in range(count):
        meta = pack_meta(i + 1, i, 1, 0) if draw(st.integers(0, 4)) == 0 else b""
        body = body_for(draw, wp, seg, meta, min(seg // 2, 2000), [BLANK.size, BLANK.size - 1])
        term += draw(st.sampled_from([0, 0, 0, 1]))
        index = first + i
        size = HEADER_SIZE + len(meta) + len(body)
        pos = place(wp, size, seg)
        e_index, e_term, e_pos = index, term, pos
        if skew is not None and skew[0] == i:
            if skew[1] == "index":
                e_index += skew[2]
            elif skew[1] == "term":
                e_term -= abs(skew[2])
            else:
                e_pos += skew[2]
        if e_index >= 2**63 or e_term < 0 or e_pos < 0:
            e_index, e_term, e_pos = index, term, pos
        raw, chain = encode_entry(draw(magics), e_index, e_term, e_pos, body, chain, meta)
        data += raw
        wp = pos + size
    max_body = draw(st.sampled_from([2000, 1 << 20, 1 << 20, 100, 0]))
    damage = draw(st.sampled_from(["none"] * 6 + ["byte", "cut", "first", "chain", "term", "write_pos", "seg"]))
    if damage == "byte" and data:
        at = draw(st.integers(0, len(data) - 1))
        data[at] ^= draw(st.integers(1, 255))
    elif damage == "cut":
        data = data[:draw(st.integers(0, len(data)))]
    elif damage == "first":
        first += draw(st.sampled_from([-1, 1]))
    elif damage == "chain":
        prev = draw(st.sampled_from([None, prev ^ 1, prev + 2**32, -1]))  # type: ignore[list-item]
    elif damage == "term":
        end_term += 1
    elif damage == "write_pos":
        write_pos += draw(st.sampled_from([1, seg, -write_pos - 1]))
    elif damage == "seg":
        seg = draw(st.sampled_from([seg // 2, seg * 2, 0, -seg]))
    return bytes(data), first, write_pos, prev, end_term, seg, max_body


@needs_native
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=pushed(), kind=as_buffer)
def test_verify_run_matches_python(case: tuple[bytes, int, int, int, int, int, int], kind: type) -> None:
    assert native is not None
    data, first, write_pos, _prev, _term, seg, _max = case
    got, called = traced(native.verify_run, kind(data), *case[1:])
    want = outcome(verify_run, kind(data), *case[1:])
    event(f"verify {want[0]}")
    assert got == want
    if first < 2**62 and write_pos >= 0 and seg > 0:  # else Python's integers may be needed
        assert called in ([], ["_fail_run"])
        assert called == [] or want[0] == "raised"


@needs_native
@given(data=st.binary(max_size=400), first=st.integers(0, 2**40), chain=st.one_of(st.none(), u32))
def test_verify_run_of_random_bytes_matches_python(data: bytes, first: int, chain: int | None) -> None:
    assert native is not None
    args = (first, 0, chain, 0, 1 << 20, 4096)
    assert outcome(native.verify_run, data, *args) == outcome(verify_run, data, *args)


@needs_native
def test_verify_run_odd_arguments_match_python() -> None:
    assert native is not None
    raw, _ = encode_entry(MAGIC_NORMAL, 5, 1, 0, b"body", 7)
    for args in [("text", 5, 0, 7, 0, 4096, 100), (memoryview(raw).cast("I"), 5, 0, 7, 0, 4096, 100),
                 (raw, 5.0, 0, 7, 0, 4096, 100), (raw, 5, 0, 7.0, 0, 4096, 100), (raw, 5, 0, 7, 0, 4096, 2**70),
                 (raw, 5, 0, 7, 0, 4096, -1), (raw, 5, 2**70, 7, 0, 4096, 100), (b"", 2**80, 0, None, 0, 1, 0)]:
        assert outcome(native.verify_run, *args) == outcome(verify_run, *args), args


# -- index_units -------------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=pushed(), kind=as_buffer)
def test_index_units_of_a_verified_push_are_the_ones_its_leader_wrote(
        case: tuple[bytes, int, int, int, int, int, int], kind: type) -> None:
    """A follower's units, read from the pushed headers, equal the units the leader's encode_run made for
    the same entries (so both replicas index alike); C and Python agree, without handing work over."""
    data, first, write_pos, prev, end_term, seg, max_body = case
    try:
        run, _ = verify_run(data, first, write_pos, prev, end_term, seg, max_body)
    except Exception:
        return  # a damaged push never reaches index_units
    want = bytearray()
    for _off, pos, size, index, term, magic in run:
        want += INDEX_UNIT.pack(magic, pos, size, index, term)
    assert index_units(kind(data), len(run)) == want
    if native is not None:
        got, called = traced(native.index_units, kind(data), len(run))
        assert got == ("ok", want) and called == []


@needs_native
def test_index_units_beyond_the_entries_match_python() -> None:
    assert native is not None
    raw, _ = encode_entry(MAGIC_NORMAL, 5, 1, 0, b"body", 7)
    short = raw[:HEADER_SIZE] + bytes(4)
    zero_size = bytes(HEADER_SIZE)
    for args in [(raw, 2), (raw, -1), (raw[:10], 1), (zero_size, 1), ("text", 1), (raw, 2**70), (short, 1),
                 (memoryview(raw).cast("I"), 1), (raw, 0), (raw + raw, 2)]:
        assert outcome(native.index_units, *args) == outcome(index_units, *args), args


# -- checked_runs ------------------------------------------------------------------------------------

@st.composite
def written_log(draw: st.DrawFn) -> dict[str, Any]:
    """A log laid out in segments as a FileStore writes it (entries placed by place(), a blank record
    where one rolls to the next segment), a read of it, and maybe a byte of it changed."""
    seg = draw(st.sampled_from([256, 512, 2048]))
    wp = place(draw(st.integers(0, 2 * seg)), HEADER_SIZE, seg)
    chain = begin_chain = draw(u32)
    first = draw(st.integers(0, 2**40))
    entries = []  # (pos, raw, chain before it)
    for i in range(draw(st.integers(1, 14))):
        meta = pack_meta(i + 1, i, 1, 0) if draw(st.integers(0, 4)) == 0 else b""
        body = body_for(draw, wp, seg, meta, seg - HEADER_SIZE - META_SIZE - 8, [8, 7, 3, 1, 0])
        size = HEADER_SIZE + len(meta) + len(body)
        # An entry closer than a blank record to its segment's end is never written so, but read the same.
        pos = wp if draw(st.booleans()) and wp % seg + size <= seg else place(wp, size, seg)
        before = chain
        # Now and then a header that is wrong although its CRCs are right: another index or position.
        e_index, e_pos = first + i, pos
        if draw(st.integers(0, 15)) == 0:
            e_index, e_pos = draw(st.sampled_from([(e_index + 1, e_pos), (e_index, e_pos + 1)]))
        raw, chain = encode_entry(draw(magics), e_index, 1, e_pos, body, chain, meta)
        entries.append((wp, pos, raw, before))
        wp = pos + size
    n = len(entries)
    s = draw(st.integers(0, n - 1))
    return {
        "seg": seg, "entries": entries, "first": first, "begin_chain": begin_chain,
        "start": first + s, "pos": entries[s][1],
        "chain": draw(st.sampled_from([entries[s][3]] * 3 + [None, entries[s][3] ^ 1])),
        "end": first + draw(st.integers(s - 1, n + 1)),
        "max_count": draw(st.one_of(st.integers(0, n + 1), st.just(2**70))),
        # Now and then exactly the bytes of the first k entries read (the cut rule's edge).
        "max_bytes": draw(st.one_of(st.integers(0, wp - entries[0][1] + 100), st.just(2**70),
                                    st.integers(0, n - s).map(lambda k: sum(len(e[2]) for e in entries[s:s + k])))),
        "control": draw(st.booleans()),
        "max_body": draw(st.sampled_from([seg, seg, seg, 64, 0])),
        "damage": draw(st.one_of(st.none(), st.none(), st.none(),
                                 st.tuples(st.integers(0, wp - entries[0][0] - 1), st.integers(0, 255)))),
    }


def _runs(fn: Callable[..., Any], *args: Any) -> tuple[Any, ...]:
    """outcome(), with the runs copied out of the segments (and the views on them let go)."""
    got = outcome(fn, *args)
    if got[0] == "ok":
        runs, count = got[1]
        parts = [bytes(r) for r in runs]
        for r in runs:
            r.release()
        return ("ok", parts, count)
    return got


@needs_native
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log=written_log())
def test_checked_runs_matches_python(log: dict[str, Any]) -> None:
    seg = log["seg"]
    with tempfile.TemporaryDirectory(prefix="quorumlog-hotpath-") as path:
        data = SegmentList(path, seg, OsFiles(), preallocate=False)
        try:
            for wp, pos, raw, _ in log["entries"]:
                if pos != wp:  # rolled: the rest of wp's segment is a blank record, or as much of one as fits
                    data.write(wp, BLANK.pack(MAGIC_BLANK, pos - wp)[:pos - wp])
                data.write(pos, raw)
            if log["damage"] is not None:
                at, value = log["damage"]
                data.write(log["entries"][0][0] + at, bytes([value]))
            args = (data, log["pos"], log["start"], log["end"], log["chain"], log["max_count"], log["max_bytes"],
                    log["control"], log["max_body"])
            got, called = traced(_runs, hotpath.native_checked_runs, *args)
            want = _runs(checked_runs, *args)
            event(f"read {want[0]}")
            assert got[1] == want
            if log["max_bytes"] < 2**63:
                assert called == []
        finally:
            data.close()


# -- every byte ---------------------------------------------------------------------------------------

def _small_run(seg: int) -> tuple[list[tuple[int, bytes]], int]:
    """Four entries (one with metadata, one a NOOP) from pos seg - 150, so that the third rolls to the
    next segment: [(pos, raw)], and the chain after them."""
    out, wp, chain = [], seg - 150, 99
    for i, (magic, body, meta) in enumerate([(MAGIC_NORMAL, b"a" * 40, b""), (MAGIC_NOOP, b"", b""),
                                             (MAGIC_NORMAL, b"b" * 70, pack_meta(1, 2, 3, 4)),
                                             (MAGIC_CONFIG, b"c" * 5, b"")]):
        pos = place(wp, HEADER_SIZE + len(meta) + len(body), seg)
        raw, chain = encode_entry(magic, 10 + i, 2, pos, body, chain, meta)
        out.append((pos, raw))
        wp = pos + len(raw)
    return out, chain


@needs_native
def test_verify_run_at_every_cut_and_every_changed_byte() -> None:
    assert native is not None
    seg = 1024
    run, _ = _small_run(seg)
    data = b"".join(raw for _, raw in run)
    args = (10, seg - 150, 99, 2, seg, 100)
    variants = [data[:cut] for cut in range(len(data) + 1)]
    variants += [data[:at] + bytes([data[at] ^ flip]) + data[at + 1:] for at in range(len(data)) for flip in (1, 0x80)]
    for variant in variants:
        for kind in (bytes, bytearray):
            assert outcome(native.verify_run, kind(variant), *args) == outcome(verify_run, kind(variant), *args)


@needs_native
def test_checked_runs_with_every_byte_changed() -> None:
    seg = 1024
    run, _ = _small_run(seg)
    with tempfile.TemporaryDirectory(prefix="quorumlog-hotpath-") as path:
        data = SegmentList(path, seg, OsFiles(), preallocate=False)
        try:
            wp = seg - 150
            for pos, raw in run:
                if pos != wp:
                    data.write(wp, BLANK.pack(MAGIC_BLANK, pos - wp))
                data.write(pos, raw)
                wp = pos + len(raw)
            start, end = seg - 150, wp
            original = bytes(data.view(start, seg - start)) + bytes(data.view(seg, end - seg))
            for at in range(start, end):
                old = original[at - start]
                for value in (old ^ 1, old ^ 0x80, 0xFF):
                    data.write(at, bytes([value]))
                    for control in (True, False):
                        args = (data, start, 10, 13, 99, 10, 10**6, control, 100)
                        assert _runs(hotpath.native_checked_runs, *args) == _runs(checked_runs, *args), (at, value)
                data.write(at, bytes([old]))
        finally:
            data.close()
