"""What strangers can write into a node's log and events: text from the network is escaped (no forged
line), refusal lines are rate-limited, and refusals keep a ring of their own beside the node's events."""

from __future__ import annotations

import re
import socket
import time
from typing import Any

from quorumlog.net.frames import PROTOCOL_VERSION, REQUEST, encode_frame
from quorumlog.net.ops import Op
from quorumlog.net.schemas import HELLO_REQUEST
from quorumlog.server.events import NODE, REFUSAL, Events

from .test_server_robustness import _recv_all, _still_serving

FORGED = "2026-11-28 00:00:00,000 n0 CRITICAL quorumlog.server: the disk is on fire"


def _hello(port: int, cluster: str, node_id: str) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(encode_frame(REQUEST, Op.HELLO, 1, HELLO_REQUEST.encode(PROTOCOL_VERSION, cluster, node_id)))
        _recv_all(s, 5)


def _log_lines(node: Any) -> list[str]:
    return node.log_path.read_text(errors="replace").splitlines()


def test_a_hello_cannot_forge_a_log_line(cluster_factory: Any) -> None:
    cluster = cluster_factory(nodes=1)
    _still_serving(cluster.endpoints)
    port = cluster.nodes[0].port
    _hello(port, "elsewhere", f"n9\n{FORGED}\x1b[2J")  # the id in the refusal's line
    _hello(port, f"elsewhere\r\n{FORGED}", "client")  # a wrong cluster: its name is in the node's log
    deadline = time.monotonic() + 5
    while sum("\\n" + FORGED[:40] in line for line in _log_lines(cluster.nodes[0])) < 2:
        assert time.monotonic() < deadline, "the refusals were not logged, escaped"
        time.sleep(0.05)
    lines = _log_lines(cluster.nodes[0])
    assert not any(line.startswith(FORGED) for line in lines), "a forged line in the node's log"
    assert not any("\x1b" in line for line in lines)
    events = [e["text"] for e in _status_events(cluster)]
    assert any("\\n" + FORGED[:40] in t for t in events) and not any("\n" in t or "\x1b" in t for t in events)


def _status_events(cluster: Any) -> list[dict[str, Any]]:
    from quorumlog import Client

    with Client(cluster.endpoints, group="g0") as c:
        return list(c.node_status(cluster.nodes[0].address, all_groups=True)["events"])


def test_refusal_warnings_are_rate_limited(cluster_factory: Any) -> None:
    cluster = cluster_factory(nodes=1)
    _still_serving(cluster.endpoints)
    port = cluster.nodes[0].port
    for k in range(60):  # 60 distinct refusals: each would be a WARNING line of its own
        _hello(port, f"cluster-{k}", "client")
    time.sleep(0.5)
    warnings = [line for line in _log_lines(cluster.nodes[0])
                if " WARNING " in line and re.search(r"refused connection .*wrong cluster", line)]
    assert 1 <= len(warnings) <= 20, f"{len(warnings)} WARNING lines for 60 refusals"
    _still_serving(cluster.endpoints)


def test_refusals_cannot_push_the_nodes_events_out() -> None:
    now = [1000.0]
    ev = Events(size=5, refusals_size=3, clock=lambda: now[0])
    ev.record(NODE, "node n0 started")
    for k in range(50):
        now[0] += 1
        ev.record(REFUSAL, f"refused HELLO of a connection from 10.0.0.{k}: wrong cluster")
    texts = [(e["kind"], e["text"]) for e in ev.recent()]
    assert texts[0] == (NODE, "node n0 started") and len(texts) == 4
    assert [t for k, t in texts if k == REFUSAL][-1].endswith("10.0.0.49: wrong cluster")
