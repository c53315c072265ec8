"""Short chaos runs (chaos.py): random kills, pauses, wiped disks and leadership transfers on every node of a
real cluster under idempotent writers; then the history, the replicas' logs and the stores are checked."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from .chaos import run_chaos


@pytest.mark.slow
@pytest.mark.parametrize("seed", [20261126])
def test_raft_chaos_on_every_node_loses_nothing_acknowledged(tmp_path: Path, seed: int) -> None:
    s = asyncio.run(run_chaos(tmp_path, 20.0, seed, raft=True))
    assert s["acked"] > 200 and s["faults"] >= 8, s
    print(f"raft chaos: {s}")


@pytest.mark.slow
def test_primary_backup_chaos_on_every_node_loses_nothing_acknowledged(tmp_path: Path) -> None:
    s = asyncio.run(run_chaos(tmp_path, 20.0, 20261127, raft=False))
    assert s["acked"] > 100 and s["faults"] >= 8, s
    print(f"primary/backup chaos: {s}")
