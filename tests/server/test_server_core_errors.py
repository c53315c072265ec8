"""An error out of the Raft core does not take a node down unless a disk failed: the node logs it,
counts it in /metrics and goes on serving.

The node runs in this process (real sockets on 127.0.0.1, real stores in a temp dir) so that a fault
can be injected into its core; nothing else is replaced.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, NoReturn

import msgpack
import pytest

from quorumlog.client import AsyncClient
from quorumlog.config import GroupConfig, NodeConfig, RaftConfig, StoreConfig
from quorumlog.errors import AppendUncertainError, DiskError, StoreError
from quorumlog.net.connection import connect
from quorumlog.net.ops import Op
from quorumlog.server.admin import render_metrics
from quorumlog.server.cluster import free_ports
from quorumlog.server.node import NodeServer

from .conftest import FAST_RAFT, SMALL_STORE, await_until


def _raise(exc: Exception) -> Any:
    def fail(*_args: Any, **_kwargs: Any) -> NoReturn:
        raise exc
    return fail


def _config(tmp_path: Path) -> NodeConfig:
    """g0: n0 alone (it leads and takes appends); g1: n0 and n1, where the test plays n1 by hand."""
    port, n1_port = free_ports(2)
    raft, store = RaftConfig(**FAST_RAFT), StoreConfig(**SMALL_STORE)
    me = f"127.0.0.1:{port}"
    return NodeConfig(node_id="n0", data_dir=tmp_path, listen=me, groups=(
        GroupConfig("g0", {"n0": me}, raft, store),
        GroupConfig("g1", {"n0": me, "n1": f"127.0.0.1:{n1_port}"}, raft, store)))


def test_core_errors_are_counted_and_survived_but_a_disk_error_stops_the_node(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _config(tmp_path)

    async def main() -> None:
        node = NodeServer(cfg)
        await node.start()
        try:
            g0, g1 = node.groups["g0"], node.groups["g1"]
            async with AsyncClient(cfg.listen, retry_uncertain=False, idempotent=False) as client:
                await client.append(b"before")

                # Every tick fails for a while.
                monkeypatch.setattr(g0.node, "tick", _raise(StoreError("injected tick failure")))

                async def ticks_failed() -> bool:
                    return g0.stats.core_errors[("tick", "StoreError")] >= 5

                await await_until(ticks_failed, 10, "failing ticks")
                monkeypatch.undo()

                # A peer's message makes the core fail: the message is dropped, the link stays up.
                monkeypatch.setattr(g1.node, "step_batch", _raise(StoreError("injected step failure")))
                peer = await connect("127.0.0.1", int(cfg.listen.rpartition(":")[2]), cluster=cfg.cluster,
                                     node_id="n1")
                peer.send(Op.VOTE, msgpack.packb(("g1", "n1", "n0", 7, 100, 7, True, False)), 0)

                async def step_failed() -> bool:
                    return g1.stats.core_errors[("step", "StoreError")] == 1

                await await_until(step_failed, 10, "the failing step")
                assert peer.is_established
                peer.close()
                monkeypatch.undo()

                # A proposal that fails may have reached the store: the client hears "uncertain".
                monkeypatch.setattr(g0.node, "propose_many", _raise(StoreError("injected propose failure")))
                with pytest.raises(AppendUncertainError, match="injected propose failure"):
                    await client.append(b"maybe")
                monkeypatch.undo()

                r = await client.append(b"after")
                assert (await client.get(r.index)).body == b"after"
            assert not node._stop.is_set() and node._fatal is None
            metrics = render_metrics(node)
            for call, group in (("tick", "g0"), ("step", "g1"), ("propose", "g0")):
                line = f'quorumlog_core_errors_total{{call="{call}",error="StoreError",group="{group}",node="n0"}}'
                assert line in metrics, metrics

            # A failed disk is different: the node stops (exit status 3 from run()).
            disk = DiskError("injected fdatasync failure")
            monkeypatch.setattr(g0.node, "tick", _raise(disk))
            await asyncio.wait_for(node._stop.wait(), 10)
            assert node._fatal is disk
            assert g0.stats.core_errors[("tick", "DiskError")] == 0
        finally:
            monkeypatch.undo()
            await node.shutdown()

    asyncio.run(main())
