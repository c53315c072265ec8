"""Short chaos runs (chaos.py): random kills, pauses, wiped disks, leadership transfers and (in network
namespaces) partitions on every node of a real cluster under idempotent writers; then the history, the
replicas' logs and the stores are checked."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .chaos import run_chaos
from .conftest import tmpfs_unavailable
from .netns import Network, unavailable


@pytest.mark.slow
@pytest.mark.parametrize("seed", [20261126])
def test_raft_chaos_on_every_node_loses_nothing_acknowledged(tmp_path: Path, seed: int) -> None:
    s = asyncio.run(run_chaos(tmp_path, 20.0, seed, raft=True))
    assert s["acked"] > 200 and s["faults"] >= 8 and s["ends"] > 20, s
    print(f"raft chaos: {s}")


@pytest.mark.slow
def test_primary_backup_chaos_on_every_node_loses_nothing_acknowledged(tmp_path: Path) -> None:
    s = asyncio.run(run_chaos(tmp_path, 20.0, 20261127, raft=False))
    assert s["acked"] > 100 and s["faults"] >= 8 and s["ends"] > 20, s
    print(f"primary/backup chaos: {s}")


@pytest.fixture
def network() -> Iterator[Network]:
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    net = Network()
    try:
        try:
            net.create()
        except subprocess.CalledProcessError as e:
            pytest.skip(f"cannot build the namespaces: `{' '.join(e.cmd)}` failed: {e.stderr.strip()}")
        yield net
    finally:
        net.destroy()


@pytest.mark.slow
@pytest.mark.parametrize("raft", [True, False], ids=["raft", "primary-backup"])
def test_chaos_with_partitions_and_full_disks_loses_nothing_acknowledged(tmp_path: Path, network: Network,
                                                                        raft: bool) -> None:
    """The nodes in network namespaces (netns.py), so partitions join the faults: a node cut off, a pair cut,
    one direction dropped; and each node's data on a tmpfs of its own (when this machine lets us mount one),
    so full disks do too: past disk_full_ratio, or to the brim."""
    disks = tmpfs_unavailable(tmp_path / "probe") is None
    s = asyncio.run(run_chaos(tmp_path / "run", 20.0, 20261128 + raft, raft=raft, net=network, disks=disks))
    assert s["acked"] > 100 and s["kinds"]["partition"] >= 1 and (s["kinds"]["full"] >= 1 or not disks), s
    assert s["ends"] > 20, s
    print(f"chaos with partitions{' and full disks' if disks else ''}: {s}")
