"""Client tokens with per-group permissions, on a real 3-node cluster: wrong or missing credentials are
refused at HELLO, before any request is handled; a read-only token reads and cannot append (and nothing
is written); admin operations need the admin permission."""

from __future__ import annotations

from typing import Any

import pytest

from quorumlog import Client
from quorumlog.errors import QuorumLogError, ResponseCode
from quorumlog.net.errors import HandshakeError

TOKENS = [
    {"name": "reader", "secret": "r-5ecret", "permissions": {"g0": ["read"]}},
    {"name": "writer", "secret": "w-5ecret", "permissions": {"g0": ["append", "read"]}},
    {"name": "ops", "secret": "o-5ecret", "permissions": {"*": ["admin", "read"]}},
]


def test_tokens_and_permissions(cluster_factory: Any) -> None:
    cluster = cluster_factory(nodes=3, groups=2, secret="cluster-5ecret", tokens=TOKENS)
    eps = cluster.endpoints
    with Client(eps, group="g0", secret="w-5ecret", token="writer", retry_timeout=20) as w:
        first = w.append(b"from the writer")
        end = w.append_many([b"a", b"b"])[-1].index
    with Client(eps, group="g0", secret="r-5ecret", token="reader", retry_timeout=20) as r:
        assert r.get(first.index).body == b"from the writer"
        assert [e.body for e in r.read(first.index, 3)] == [b"from the writer", b"a", b"b"]
        with pytest.raises(QuorumLogError) as denied:
            r.append(b"not allowed")
        assert denied.value.code == ResponseCode.PERMISSION_DENIED and "may not append" in str(denied.value)
        with pytest.raises(QuorumLogError) as admin:
            r.transfer_leader("n1")
        assert admin.value.code == ResponseCode.PERMISSION_DENIED
        # STATUS of what it may read, and of nothing else
        seen = r.node_status(cluster.nodes[0].address, all_groups=True)
        assert set(seen["groups"]) == {"g0"}
        assert seen["events"] and {e["group"] for e in seen["events"]} == {"g0"}  # not g1's elections either
    with Client(eps, group="g1", secret="r-5ecret", token="reader", retry_timeout=20) as r1, \
            pytest.raises(QuorumLogError) as hidden:
        r1.node_status(cluster.nodes[0].address, all_groups=False)
    assert hidden.value.code == ResponseCode.PERMISSION_DENIED
    with Client(eps, group="g0", secret="cluster-5ecret", retry_timeout=20) as full:  # the cluster's secret: all
        assert full.metadata(with_nodes=False).leader is not None
        assert all(e.body != b"not allowed" for e in full.read(0, end + 10))
        after = full.append(b"after")
        assert after.index == end + 1  # nothing was written by the refused append
    with Client(eps, group="g0", secret="o-5ecret", token="ops", retry_timeout=20) as ops:
        leader = ops.metadata(with_nodes=False).leader
        status = ops.node_status(cluster.nodes[0].address)
        assert "groups" in status and leader is not None
    for kwargs in ({"secret": "wrong", "token": "reader"},  # a wrong token secret
                   {"secret": "r-5ecret", "token": "nobody"},  # an unknown token
                   {"secret": "r-5ecret"},  # a token's secret offered as the cluster's
                   {}):  # nothing at all
        with Client(eps, group="g0", retry_timeout=3, **kwargs) as bad, pytest.raises(
                (HandshakeError, QuorumLogError)) as refused:
            bad.get(first.index)
        assert "authentication failed" in str(refused.value) or "requires a shared secret" in str(refused.value), \
            (kwargs, refused.value)


def test_no_token_appends_to_a_controller_group(cluster_factory: Any) -> None:
    """Issue 34, item 2: a token with `"*" = ["append"]` appended forged election commands to the controller
    group and made a member of its choice primary. Only peers and the cluster's secret append there; the
    token still appends to the data group it is allowed."""
    tokens = [{"name": "any", "secret": "a-5ecret", "permissions": {"*": ["append", "read"]}}]
    ha = {"ack": "sync", "controller": "ctl", "ha_heartbeat_interval_ms": 200, "ha_ack_timeout_ms": 800}
    cluster = cluster_factory(replication="primary-backup", ha=ha, secret="cluster-5ecret", tokens=tokens)
    eps = cluster.endpoints
    with Client(eps, group="g0", secret="a-5ecret", token="any", retry_timeout=20) as c:
        assert c.append(b"data").index >= 0
    with Client(eps, group="ctl", secret="a-5ecret", token="any", retry_timeout=20) as c:
        with pytest.raises(QuorumLogError) as denied:
            c.append(b"QLCTL1 a forged command")
        assert denied.value.code == ResponseCode.PERMISSION_DENIED
        assert "only peers and the cluster's secret" in str(denied.value)
        assert all(e.body != b"QLCTL1 a forged command" for e in c.read(0, 1000))  # (reading stays allowed)
