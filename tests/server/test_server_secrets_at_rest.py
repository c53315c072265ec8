"""Secrets at rest on real nodes: a local cluster with tokens writes its node.toml files 0600 and its data
directories (and the group directories the node makes under them) 0700 whatever the umask; a node tells a
dialler with the wrong cluster name neither its own cluster name, nor whether a token name exists."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from quorumlog.client import AsyncClient
from quorumlog.net.connection import connect
from quorumlog.net.errors import HandshakeError
from quorumlog.net.hello import token_client_id

from .conftest import wait_leader, wait_until

CLUSTER = "prod-cluster-5e1f"
TOKENS = [{"name": "reader", "secret": "r-s3cret-71ab", "permissions": {"g0": ["read"]}}]


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)  # inherited by the node processes
    try:
        yield
    finally:
        os.umask(old)


async def _refusal(port: int, **kw: Any) -> str:
    with pytest.raises(HandshakeError) as ei:
        await connect("127.0.0.1", port, timeout=10, **kw)
    return str(ei.value)


def test_files_and_directories_of_a_cluster_with_tokens_are_private(cluster_factory: Any, umask_022: None) -> None:
    cluster = cluster_factory(nodes=3, secret="cluster-5ecret", tokens=TOKENS, node={"cluster": CLUSTER})
    for node in cluster.nodes:
        assert "r-s3cret-71ab" in node.config_path.read_text()
        assert mode(node.config_path) == 0o600, oct(mode(node.config_path))
        assert mode(node.data_dir) == 0o700, oct(mode(node.data_dir))
    assert mode(cluster.secret_path) == 0o600

    async def main() -> None:
        async with AsyncClient(cluster.endpoints, cluster=CLUSTER, secret="cluster-5ecret") as c:
            await wait_leader(c, cluster)
        port = cluster.nodes[0].port
        # The wrong cluster name: refused without being told the right one, and told what to check.
        text = await _refusal(port, cluster="staging")
        assert CLUSTER not in text and "cluster name does not match" in text and "'staging'" in text, text
        text = await _refusal(port, cluster="staging", node_id="n9", secret="cluster-5ecret", groups={})
        assert CLUSTER not in text and "cluster name does not match" in text, text
        # An unknown token and a known one with a wrong secret: the same refusal.
        unknown = await _refusal(port, cluster=CLUSTER, node_id=token_client_id("nobody"), secret="guess")
        wrong = await _refusal(port, cluster=CLUSTER, node_id=token_client_id("reader"), secret="guess")
        assert unknown == wrong and "authentication failed" in unknown, (unknown, wrong)

    asyncio.run(main())
    for node in cluster.nodes:  # what the node made under its data directory: the group's, the store's
        group_dir = node.data_dir / "g0"
        store = wait_until(lambda d=group_dir / node.node_id: d.is_dir() and d, 10, f"{node.node_id}'s store dir")
        for d in (group_dir, store, store / "data", store / "index"):
            assert mode(d) == 0o700, (d, oct(mode(d)))
