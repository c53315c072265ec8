"""A node that runs out of file descriptors survives: connections it cannot accept are turned away,
appends that need a new segment file are refused with OUT_OF_FILES and nothing written, and once
descriptors are free again everything acknowledged is there and new appends go through."""

from __future__ import annotations

import os
import resource
import socket
import time
from typing import Any

import pytest

from quorumlog import Client
from quorumlog.errors import QuorumLogError, ResponseCode

from .test_server_robustness import _hello


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.mark.skipif(not hasattr(resource, "prlimit"), reason="needs resource.prlimit (Linux)")
def test_a_node_out_of_file_descriptors_survives(cluster_factory: Any) -> None:
    # Segments of 1 MiB: a few hundred KiB of appends need a new segment file.
    cluster = cluster_factory(nodes=1)
    node = cluster.nodes[0]
    pid = node.proc.pid
    acked: list[tuple[int, bytes]] = []
    with Client(cluster.endpoints, group="g0", retry_timeout=5.0) as c:
        for k in range(20):
            body = b"before-%d" % k
            acked.append((c.append(body).index, body))
        # The node may open a few more descriptors than it holds now, not many.
        limit = _open_fds(pid) + 6
        soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, hard))
        flood = []
        try:
            for _ in range(12):  # take every free descriptor of the node with idle connections
                s = socket.create_connection(("127.0.0.1", node.port), timeout=5)
                flood.append(s)
            time.sleep(0.5)
            assert _open_fds(pid) >= limit - 1, "the flood did not exhaust the node's descriptors"
            refused = 0
            big = b"x" * 60_000
            for _ in range(40):  # 2.4 MB: past the end of the current segment
                try:
                    acked.append((c.append(big).index, big))
                except QuorumLogError as e:
                    assert e.code == ResponseCode.OUT_OF_FILES, e
                    refused += 1
            assert refused > 0, "no append needed a descriptor: the test did not test anything"
        finally:
            for s in flood:
                s.close()
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
        assert node.alive, "the node died"
        deadline = time.monotonic() + 10
        while True:  # descriptors are back: appends that need a new segment go through again
            try:
                acked.append((c.append(big).index, big))
                break
            except QuorumLogError as e:
                assert e.code == ResponseCode.OUT_OF_FILES and time.monotonic() < deadline
                time.sleep(0.1)
        for _ in range(30):
            acked.append((c.append(big).index, big))
        for index, body in acked:
            assert c.get(index).body == body
    with socket.create_connection(("127.0.0.1", node.port), timeout=5) as s:
        _hello(s)  # and it accepts connections again
    assert node.alive
