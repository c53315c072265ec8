"""The synchronous Client shared by many threads: every call runs once and answers its own caller,
whether it was queued alone or in a burst that woke the client's loop once."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

import pytest

from quorumlog.client import AppendResult, Client, Metadata


def test_sync_client_from_many_threads(cluster_factory: Any) -> None:
    cluster = cluster_factory(nodes=1)
    threads, per_thread = 8, 60
    results: dict[bytes, int] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(threads)
    with Client(cluster.endpoints, retry_timeout=20.0) as c:

        def worker(k: int) -> None:
            try:
                start.wait(timeout=10)
                pending: list[tuple[bytes, Future[AppendResult]]] = []
                for i in range(per_thread):
                    body = f"t{k}-{i}".encode()
                    if i % 3 == 0:  # blocking calls between pipelined ones
                        r = c.append(body)
                        with lock:
                            results[body] = r.index
                    else:
                        pending.append((body, c.append_async(body)))
                for body, f in pending:
                    r = f.result(timeout=20)
                    with lock:
                        results[body] = r.index
            except BaseException as e:  # reported below: a thread's failure must fail the test
                errors.append(e)

        ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=60)
        assert not errors, errors
        assert len(results) == threads * per_thread
        indexes = sorted(results.values())
        assert len(set(indexes)) == len(indexes)  # each call appended once
        # Each caller got the index of its own body back.
        for body, index in list(results.items())[:50]:
            assert c.get(index).body == body


def test_arguments_are_checked_before_anything_is_sent_or_drawn(cluster_factory: Any) -> None:
    """A body the client refused still used up a sequence number, so the next valid
    append failed OUT_OF_ORDER_SEQUENCE (UNKNOWN_PRODUCER on a fresh client); and a negative index went to
    the server, which answered INDEX_LESS_THAN_LOCAL_BEGIN where a ValueError was promised."""
    cluster = cluster_factory(nodes=1)
    with Client(cluster.endpoints, retry_timeout=10) as c:
        with pytest.raises(TypeError):
            c.append("a str body")  # type: ignore[arg-type]
        first = c.append(b"next")
        with pytest.raises(TypeError):
            c.append_many([b"fine", "not bytes"])  # type: ignore[list-item]
        assert [r.index for r in c.append_many([b"a", b"b"])] == [first.index + 1, first.index + 2]
        for call in (lambda: c.get(-1), lambda: list(c.read(-1, 2)), lambda: list(c.read(0, -1))):
            with pytest.raises(ValueError, match="must not be negative"):
                call()
        assert c.get(first.index).body == b"next"


def test_metadata_prints_the_leader_term_and_members() -> None:
    """`print(c.metadata())` shows what it says it holds; each member's status document (kilobytes of
    histograms) stays in `nodes`, out of the repr."""
    md = Metadata("g0", "n1", 2, {"n0": "127.0.0.1:9000", "n1": "127.0.0.1:9001"},
                  {"n0": {"stats": "x" * 4000}, "n1": None})
    assert repr(md) == ("Metadata(group='g0', leader='n1', term=2, peers={'n0': '127.0.0.1:9000', "
                        "'n1': '127.0.0.1:9001'})")
    assert md.nodes["n0"] is not None
