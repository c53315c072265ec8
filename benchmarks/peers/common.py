"""Helpers shared by the peer benchmarks: latency summaries, free ports, bounded process handling."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Sequence
from typing import IO, Any

from quorumlog.server.cluster import free_ports

__all__ = ["free_ports", "lat_summary", "rate_row", "read_json_line", "stop_procs"]


def _pct(values: Sequence[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else 0.0


def lat_summary(values: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/max in ms, computed as `quorumlog bench` does (nearest rank)."""
    return {"count": len(values), "p50_ms": round(_pct(values, 0.5) * 1e3, 3),
            "p90_ms": round(_pct(values, 0.9) * 1e3, 3), "p99_ms": round(_pct(values, 0.99) * 1e3, 3),
            "max_ms": round(max(values, default=0.0) * 1e3, 3)}


def rate_row(entries: int, seconds: float, size: int, lat: Sequence[float], **extra: Any) -> dict[str, Any]:
    """A throughput result in the shape `quorumlog bench --json` uses for its throughput phase."""
    rate = entries / max(seconds, 1e-9)
    return {"entries": entries, "seconds": round(seconds, 3), "appends_per_s": round(rate),
            "mib_per_s": round(rate * size / (1 << 20), 1), "request_latency": lat_summary(lat)} | extra


def stop_procs(procs: Sequence[subprocess.Popen[Any]], timeout: float = 8.0, group: bool = False) -> None:
    """SIGTERM each process by its pid (its process group when `group`), wait for all within `timeout`,
    then SIGKILL whatever is left. Safe to call twice."""
    def send(p: subprocess.Popen[Any], sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if group:
                os.killpg(p.pid, sig)  # the children of a driver script go with it
            else:
                os.kill(p.pid, sig)

    for p in procs:
        if p.poll() is None:
            send(p, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            send(p, signal.SIGKILL)
            p.wait(5)
        if group:
            send(p, signal.SIGKILL)  # anything the group leader left behind


def read_json_line(streams: dict[IO[str], str], timeout: float) -> tuple[str, str] | None:
    """The first line starting with '{' printed on any of `streams` (mapped to a name) within `timeout`
    seconds: (name, line). None when the time runs out or every stream is closed."""
    sel = selectors.DefaultSelector()
    for stream, name in streams.items():
        sel.register(stream, selectors.EVENT_READ, (name, stream))
    deadline = time.monotonic() + timeout
    try:
        while sel.get_map() and (left := deadline - time.monotonic()) > 0:
            for key, _ in sel.select(left):
                name, stream = key.data
                line = stream.readline()
                if not line:
                    sel.unregister(stream)
                elif line.startswith("{"):
                    return name, line
        return None
    finally:
        sel.close()
