"""A man in the middle of the HELLO handshake, against real node processes (issue 34, item 1).

A cluster of three nodes with a shared secret, of which n1 is down: an attacker without the secret listens
on n1's port (a down node's port on a shared host). Real diallers reach it: n0 and n2, whose peer links
dial n1 there, and a client holding the secret that learnt n1's address from METADATA. The relay forwards
their handshake frames to a real node (another one, or the dialler itself: the server's own challenge
reflected back to it), and once the handshake is through it cuts the dialler off and sends STATUS and
APPEND of its own on the authenticated connection. The handshake of protocol version 1 let it through:
the relayed proof was accepted, and the relay was answered as "n0", "n2" or "client". Now every relayed
session fails authentication, and neither request is handled.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack

from quorumlog.client import AsyncClient, Metadata
from quorumlog.errors import QuorumLogError, ResponseCode
from quorumlog.net.errors import ConnectionClosedError, HandshakeError, ProtocolError
from quorumlog.net.frames import REQUEST, RESPONSE, FrameDecoder, encode_frame
from quorumlog.net.ops import Op
from quorumlog.net.schemas import APPEND_REQUEST, HELLO_RESPONSE, STATUS_REQUEST
from quorumlog.server.cluster import LocalCluster, LocalNode

from .conftest import await_until, wait_until

SECRET = "relay-test-5ecret"
HANDSHAKE_S = 3.0  # how long the relay forwards a handshake before it takes over anyway
ANSWER_S = 3.0  # how long it waits for the answers to its own requests
STATUS_RID, APPEND_RID = 1 << 40, (1 << 40) + 1


@dataclass
class Session:
    """One connection the relay accepted, and what the real node did with the relay's own requests."""

    dialler: str = "?"  # the node id the dialler's HELLO claimed
    target: str = "?"  # the real node it was relayed to
    forwarded: list[str] = field(default_factory=list)  # e.g. "> HELLO", "< HELLO 200", "> AUTH", "< AUTH 200"
    answered: dict[str, tuple[str, int]] = field(default_factory=dict)  # our op -> (answer's op, code)
    done: bool = False

    @property
    def handled(self) -> list[str]:
        """The relay's requests the node handled: answered under their own op (before authentication the
        node answers nothing but HELLO and AUTH, and refuses anything else under those ops)."""
        return [op for op, (answer, _code) in self.answered.items() if answer == op]


class Relay:
    """Listens on `port`; relays each dialler to `targets[dialler id]` (host, port, node id).

    `rewrite` makes the relay edit the real node's HELLO response so that it names the node the dialler
    meant to reach (`pose_as`), as an attacker would to get past a check of the responder's id."""

    def __init__(self, port: int, targets: Callable[[str], tuple[str, int, str] | None], *,
                 rewrite: bool = False, pose_as: str = "n1") -> None:
        self.port = port
        self.targets = targets
        self.rewrite = rewrite
        self.pose_as = pose_as
        self.sessions: list[Session] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> Relay:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(BaseException):
                await t
        await self._server.wait_closed()

    def finished(self, dialler: str) -> list[Session]:
        return [s for s in self.sessions if s.done and s.dialler == dialler]

    async def _accept(self, down_r: asyncio.StreamReader, down_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        s = Session()
        try:
            await self._relay(s, down_r, down_w)
        except (OSError, ProtocolError, asyncio.IncompleteReadError, ValueError, TimeoutError):
            pass
        except asyncio.CancelledError:  # the relay is closing (ends the task quietly on Python 3.11)
            pass
        finally:
            down_w.close()
            s.done = True
            self._tasks.discard(task)

    async def _relay(self, s: Session, down_r: asyncio.StreamReader, down_w: asyncio.StreamWriter) -> None:
        down, up = FrameDecoder(1 << 20, versions=None), FrameDecoder(1 << 24, versions=None)
        # The dialler's HELLO says who it is, and so where the attacker sends it.
        async with asyncio.timeout(HANDSHAKE_S):
            hello = await _next_frame(down_r, down)
        if hello is None:
            return
        s.dialler = str(msgpack.unpackb(bytes(hello.body))[2])
        self.sessions.append(s)
        target = self.targets(s.dialler)
        if target is None:
            return
        host, port, s.target = target
        up_r, up_w = await asyncio.open_connection(host, port)
        try:
            version = await self._handshake(s, hello, down_r, down_w, down, up_r, up_w, up)
            down_w.close()  # the dialler is cut off: the connection to the real node is the relay's now
            up_w.write(encode_frame(REQUEST, Op.STATUS, STATUS_RID, STATUS_REQUEST.encode(None), version))
            up_w.write(encode_frame(REQUEST, Op.APPEND, APPEND_RID, APPEND_REQUEST.encode("g0", b"forged"), version))
            await up_w.drain()
            with contextlib.suppress(TimeoutError, OSError, ProtocolError, asyncio.IncompleteReadError):
                async with asyncio.timeout(ANSWER_S):
                    while len(s.answered) < 2 and (f := await _next_frame(up_r, up)) is not None:
                        ours = {STATUS_RID: "STATUS", APPEND_RID: "APPEND"}.get(f.request_id)
                        if f.kind == RESPONSE and ours is not None:
                            s.answered[ours] = (Op(f.op).name, int(msgpack.unpackb(bytes(f.body))[0]))
        finally:
            up_w.close()

    async def _handshake(self, s: Session, hello: Any, down_r: asyncio.StreamReader, down_w: asyncio.StreamWriter,
                         down: FrameDecoder, up_r: asyncio.StreamReader, up_w: asyncio.StreamWriter,
                         up: FrameDecoder) -> int:
        """Forward frames both ways until the real node accepted the relayed proof, either side gave up, or
        HANDSHAKE_S passed; returns the frame version to speak to the real node."""
        version = hello.version
        up_w.write(encode_frame(hello.kind, hello.op, hello.request_id, bytes(hello.body), hello.version))
        s.forwarded.append("> HELLO")
        to_up = asyncio.ensure_future(_next_frame(down_r, down))
        to_down = asyncio.ensure_future(_next_frame(up_r, up))
        try:
            async with asyncio.timeout(HANDSHAKE_S):
                while True:
                    await asyncio.wait({to_up, to_down}, return_when=asyncio.FIRST_COMPLETED)
                    if to_up.done():
                        f = to_up.result()
                        if f is None:
                            return version  # the dialler hung up (it refused the node, or gave up)
                        up_w.write(encode_frame(f.kind, f.op, f.request_id, bytes(f.body), f.version))
                        s.forwarded.append(f"> {Op(f.op).name}")
                        to_up = asyncio.ensure_future(_next_frame(down_r, down))
                    if to_down.done():
                        f = to_down.result()
                        if f is None:
                            return version  # the real node hung up
                        version = f.version
                        body = bytes(f.body)
                        code = msgpack.unpackb(body)[0] if f.kind == RESPONSE else None
                        if self.rewrite and f.kind == RESPONSE and f.op == Op.HELLO:
                            r = HELLO_RESPONSE.decode(body)
                            body = HELLO_RESPONSE.encode(r.code, r.reason, r.version, self.pose_as, r.nonce,
                                                         r.auth_required)
                        down_w.write(encode_frame(f.kind, f.op, f.request_id, body, f.version))
                        s.forwarded.append(f"< {Op(f.op).name} {code}")
                        if f.kind == RESPONSE and f.op == Op.AUTH and code == ResponseCode.SUCCESS:
                            return version  # the real node took the relayed proof
                        to_down = asyncio.ensure_future(_next_frame(up_r, up))
        except TimeoutError:
            return version
        finally:
            for t in (to_up, to_down):
                t.cancel()
                with contextlib.suppress(BaseException):
                    await t


async def _next_frame(reader: asyncio.StreamReader, dec: FrameDecoder) -> Any:
    """The next frame from `reader`, or None at EOF."""
    while (f := dec.next_frame()) is None:
        data = await reader.read(65536)
        if not data:
            return None
        dec.feed(data)
    return f


def _start(cluster_factory: Any) -> LocalCluster:
    """n0 and n2 of a 3-node cluster with a secret, both listening; n1's port is left for the relay. (The
    relay once dialled n2 before it listened: nothing was relayed, and the client saw the relay hang up.)"""
    cluster: LocalCluster = cluster_factory(nodes=3, start=False, secret=SECRET)
    cluster.start(0)
    cluster.start(2)
    for n in (cluster.nodes[0], cluster.nodes[2]):
        wait_until(lambda n=n: _listening(n), 30, f"{n.node_id} listening")  # type: ignore[misc]
    return cluster


def _listening(node: LocalNode) -> bool:
    try:
        socket.create_connection((node.host, node.port), timeout=1).close()
        return True
    except OSError:
        return False


def _node(cluster: LocalCluster, node_id: str) -> LocalNode:
    return next(n for n in cluster.nodes if n.node_id == node_id)


def _addr(cluster: LocalCluster, node_id: str) -> tuple[str, int, str]:
    node = _node(cluster, node_id)
    return node.host, node.port, node.node_id


def _check(sessions: list[Session]) -> None:
    for s in sessions:
        assert s.handled == [], (f"the relay was answered as {s.dialler!r} by {s.target} "
                                 f"(handshake {s.forwarded}, answers {s.answered})")


def test_a_relay_of_a_peer_link_to_another_node_is_not_accepted(cluster_factory: Any) -> None:
    """n0 and n2 dial n1 and reach the relay, which hands each one's handshake to the other node."""
    cluster = _start(cluster_factory)
    other = {"n0": "n2", "n2": "n0"}

    async def main() -> None:
        async with Relay(cluster.nodes[1].port, lambda d: _addr(cluster, other[d]) if d in other else None) as r:
            await await_until(lambda: _ready(r, ("n0", "n2"), 2), 30, "two relayed sessions of n0 and of n2")
            _check(r.sessions)
            # Each dialler saw that the node answering is not the one it dialled, and sent no proof.
            for s in r.finished("n0") + r.finished("n2"):
                assert "> AUTH" not in s.forwarded, s
        # and says so in its log
        for me, them in other.items():
            log = _node(cluster, me).log_path.read_text()
            assert f"peer n1 (127.0.0.1:{cluster.nodes[1].port}) failed the handshake: dialled n1 but the node " \
                   f"answering is '{them}'" in log, me

    asyncio.run(main())


def test_a_relay_that_renames_the_node_is_not_accepted(cluster_factory: Any) -> None:
    """As above, but the relay rewrites the real node's HELLO response to name n1, the node the dialler
    meant: the dialler's proof then names n1, and the real node refuses it."""
    cluster = _start(cluster_factory)
    other = {"n0": "n2", "n2": "n0"}

    async def main() -> None:
        async with Relay(cluster.nodes[1].port, lambda d: _addr(cluster, other[d]) if d in other else None,
                         rewrite=True) as r:
            await await_until(lambda: _ready(r, ("n0", "n2"), 2), 30, "two relayed sessions of n0 and of n2")
            _check(r.sessions)
            proved = [s for s in r.finished("n0") + r.finished("n2") if "> AUTH" in s.forwarded]
            assert proved, "no dialler sent a proof to the renamed node"
            for s in proved:
                assert "< AUTH 200" not in s.forwarded, s  # the real node refused the relayed proof

    asyncio.run(main())


def test_a_relay_that_reflects_a_node_to_itself_is_not_accepted(cluster_factory: Any) -> None:
    """The relay hands n0's dial back to n0 itself: n0's own challenge goes to n0's own dialler, whose
    proof would then make n0 accept the relay as "n0"."""
    cluster = _start(cluster_factory)

    async def main() -> None:
        async with Relay(cluster.nodes[1].port, lambda d: _addr(cluster, d) if d in ("n0", "n2") else None) as r:
            await await_until(lambda: _ready(r, ("n0", "n2"), 2), 30, "two reflected sessions of n0 and of n2")
            _check(r.sessions)
            for s in r.finished("n0") + r.finished("n2"):
                assert "> AUTH" not in s.forwarded, s
        for me in ("n0", "n2"):  # each node refused its own dial, handed back to it
            assert f"HELLO claims this node's own id '{me}'" in _node(cluster, me).log_path.read_text()

    asyncio.run(main())


def test_a_relay_of_a_client_holding_the_secret_is_not_accepted(cluster_factory: Any) -> None:
    """A client with the cluster's secret learns from n0's METADATA that n1 is at the relay's address and
    asks it for its STATUS; the relay hands the handshake to n2 (the client's own id gets every
    permission there), plainly and renamed as n1."""
    cluster = _start(cluster_factory)
    relay_addr = cluster.nodes[1].address

    async def main() -> None:
        for rewrite in (False, True):
            async with Relay(cluster.nodes[1].port, lambda d: _addr(cluster, "n2") if d == "client" else None,
                             rewrite=rewrite) as r, \
                    AsyncClient(cluster.nodes[0].address, secret=SECRET, retry_timeout=20) as client:
                m = await await_until(lambda: _metadata(client), 30, "n0 answering METADATA")
                assert m.peers["n1"] == relay_addr
                with contextlib.suppress(QuorumLogError, OSError):
                    await client.node_status(relay_addr)
                await await_until(lambda: _ready(r, ("client",), 1), 10, "a relayed client session")
                _check(r.sessions)
                sessions = r.finished("client")
                assert sessions and all(s.forwarded[:1] == ["> HELLO"] for s in sessions), sessions  # n2 reached
                if not rewrite:  # the client saw n2 answer for n1, and sent no proof
                    assert all("> AUTH" not in s.forwarded for s in sessions), sessions
                else:  # its proof names n1, which n2 refuses
                    assert all("< AUTH 200" not in s.forwarded for s in sessions), sessions
                try:  # and the client is told why
                    await client.node_status(relay_addr)
                    raise AssertionError("a relayed STATUS was answered")
                except HandshakeError as e:
                    refused = e
                except ConnectionClosedError as e:
                    raise AssertionError(f"rewrite={rewrite}: {e}; the relay's sessions: {r.sessions}") from None
                why = "authentication failed" if rewrite else "dialled n1 but the node answering is 'n2'"
                assert why in str(refused), refused
                # The client still works with the real nodes.
                assert "groups" in await client.node_status(cluster.nodes[2].address)

    asyncio.run(main())


async def _metadata(client: AsyncClient) -> Metadata | None:
    try:
        return await client.metadata(with_nodes=False)
    except QuorumLogError:
        return None  # n0 is still starting


async def _ready(relay: Relay, diallers: tuple[str, ...], n: int) -> bool:
    return all(len(relay.finished(d)) >= n for d in diallers)

