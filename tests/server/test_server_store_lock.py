"""A second `quorumlog serve` on the data dir of a live node is refused before it touches anything:
it exits non-zero with one line naming the store directory and the owner's pid, and the live node
goes on serving."""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import time
from pathlib import Path
from typing import Any

from quorumlog.client import AsyncClient
from quorumlog.server.cluster import LocalCluster
from quorumlog.store.file_store import store_dir

from .conftest import make_leader, wait_until


def _files(root: Path) -> dict[str, tuple[int, str]]:
    """Every file under `root`: size and SHA-256 of its content."""
    return {str(p.relative_to(root)): (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*")) if p.is_file()}


def _settled(root: Path) -> dict[str, tuple[int, str]] | None:
    """The files, once two looks a moment apart agree (an idle node rewrites only identical state)."""
    first = _files(root)
    time.sleep(0.3)
    return first if _files(root) == first else None


def test_a_second_serve_on_a_live_data_dir_is_refused_and_changes_nothing(cluster_factory: Any) -> None:
    cluster: LocalCluster = cluster_factory()
    n0 = cluster.nodes[0]
    assert n0.proc is not None
    root = Path(store_dir(n0.data_dir, "g0", "n0"))

    async def make_n0_lead_and_append(tag: str) -> int:
        async with AsyncClient(cluster.endpoints) as client:
            await make_leader(client, cluster, "n0")
        async with AsyncClient(n0.address) as only_n0:
            last = -1
            for i in range(20):
                last = (await only_n0.append(f"{tag}-{i}".encode())).index
            assert (await only_n0.get(last)).body == f"{tag}-19".encode()
            return last

    first = asyncio.run(make_n0_lead_and_append("before"))
    before = wait_until(lambda: _settled(root), 30, "n0's store files to settle")

    second = subprocess.run(cluster.command(n0), capture_output=True, text=True, timeout=60)
    assert second.returncode != 0, second.stderr
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1, second.stderr
    assert lines[0].startswith("quorumlog: error: ") and str(root) in lines[0], lines[0]
    assert f"pid {n0.proc.pid}" in lines[0], lines[0]
    assert _files(root) == before, "the refused process changed the live node's store"

    assert n0.alive
    assert asyncio.run(make_n0_lead_and_append("after")) >= first + 20
