"""The synchronous Client shared by many threads: every call runs once and answers its own caller,
whether it was queued alone or in a burst that woke the client's loop once."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

from quorumlog.client import AppendResult, Client


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
