"""The per-entry hot paths, Python against C (quorumlog._hotpath): ns per entry of encode_run (a leader's
batch), verify_run (a follower's checks of a push) and checked_runs (the raw read walk, READ answers), by
body size, in batches of --batch entries.

    python benchmarks/hotpath_bench.py [--batch 1024] [--sizes 100,1024] [--repeat 7]

Each figure is the best of --repeat timed rounds (the least disturbed by other work on the machine).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

from quorumlog import hotpath
from quorumlog.entry import MAGIC_NORMAL
from quorumlog.entry import encode_run as py_encode_run
from quorumlog.store.base import verify_run as py_verify_run
from quorumlog.store.reader import checked_runs as py_checked_runs
from quorumlog.store.segments import SegmentList
from quorumlog.store.vfs import OsFiles

try:
    from quorumlog import _hotpath as native
except ImportError:  # not built: Python figures only
    native = None  # type: ignore[assignment]

SEGMENT = 1 << 26  # one segment holds a whole batch: the walk's per-entry cost, not segment switches
FIRST, TERM, POS, CHAIN, MAX_BODY = 1000, 3, 0, 12345, 4 << 20


def best_ns(fn: Callable[[], Any], entries: int, repeat: int) -> float:
    """ns per entry of fn() (one batch), the best of `repeat` rounds of enough calls for ~20 ms."""
    t0 = time.perf_counter_ns()
    fn()
    calls = max(1, int(20e6 / max(time.perf_counter_ns() - t0, 1)))
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter_ns() - t0) / calls / entries)
    return best


def measure(size: int, batch: int, repeat: int, segs: SegmentList) -> list[tuple[str, float, float | None]]:
    """(function, Python ns/entry, C ns/entry or None) for bodies of `size` bytes."""
    bodies = [os.urandom(size) for _ in range(batch)]
    data, _units, _chain = py_encode_run(bodies, MAGIC_NORMAL, FIRST, TERM, POS, CHAIN, [])
    raw = bytes(data)
    segs.write(POS, raw)
    last = FIRST + batch - 1

    def encode(fn: Callable[..., Any]) -> Callable[[], Any]:
        return lambda: fn(bodies, MAGIC_NORMAL, FIRST, TERM, POS, CHAIN, [])

    def verify(fn: Callable[..., Any]) -> Callable[[], Any]:
        return lambda: fn(raw, FIRST, POS, CHAIN, TERM, SEGMENT, MAX_BODY)

    def walk(fn: Callable[..., Any]) -> Callable[[], Any]:
        return lambda: fn(segs, POS, FIRST, last, CHAIN, batch, 1 << 40, True, MAX_BODY)

    pairs: list[tuple[str, Callable[[], Any], Callable[[], Any] | None]] = [
        ("encode_run", encode(py_encode_run), encode(native.encode_run) if native else None),
        ("verify_run", verify(py_verify_run), verify(native.verify_run) if native else None),
        ("checked_runs", walk(py_checked_runs), walk(hotpath.native_checked_runs) if native else None),
    ]
    out = []
    for name, py, c in pairs:
        if c is not None:
            assert _same(py(), c()), f"{name}: the C and Python versions disagree"
        out.append((name, best_ns(py, batch, repeat), best_ns(c, batch, repeat) if c else None))
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, tuple) and isinstance(a[0], list) and a[0] and isinstance(a[0][0], memoryview):
        return [bytes(r) for r in a[0]] == [bytes(r) for r in b[0]] and a[1] == b[1]
    return bool(a == b)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=1024, help="entries per call (default 1024)")
    ap.add_argument("--sizes", default="100,1024", help="body sizes in bytes, comma-separated (default 100,1024)")
    ap.add_argument("--repeat", type=int, default=7, help="timed rounds per figure; the best counts (default 7)")
    args = ap.parse_args()
    where = f"C built, CRC by {native.CRC}" if native else "C not built: Python only"
    print(f"hot paths, ns per entry, batches of {args.batch} ({where}; "
          f"in use: {'C' if hotpath.NATIVE else 'Python'})")
    print(f"{'body':>8}  {'function':<13} {'Python':>9} {'C':>9} {'speedup':>8}")
    with tempfile.TemporaryDirectory(prefix="quorumlog-hotpath-bench-") as path:
        segs = SegmentList(path, SEGMENT, OsFiles(), preallocate=False)
        try:
            for size in (int(s) for s in args.sizes.split(",")):
                for name, py, c in measure(size, args.batch, args.repeat, segs):
                    c_text = f"{c:9.0f}" if c is not None else f"{'-':>9}"
                    ratio = f"{py / c:7.1f}x" if c else f"{'-':>8}"
                    print(f"{size:>6} B  {name:<13} {py:9.0f} {c_text} {ratio}")
        finally:
            segs.close()


if __name__ == "__main__":
    main()
