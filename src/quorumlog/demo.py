"""`quorumlog demo`: write a store, tear its tail as a crash would, recover it and verify it."""

from __future__ import annotations

import os
import tempfile
import time

from rich.console import Console

from .config import StoreConfig
from .entry import HEADER_SIZE
from .store.file_store import FileStore, store_dir
from .store.verify import verify_store


def run_demo(entries: int = 200_000) -> int:
    console = Console()
    cfg = StoreConfig(data_segment_bytes=64 << 20, index_segment_bytes=32 << 16)
    with tempfile.TemporaryDirectory(prefix="quorumlog-demo-") as root:
        path = store_dir(root, "g0", "n0")
        store = FileStore(path, cfg)
        body = b'{"page": "/home", "user": 42}'.ljust(100, b" ")
        batch = [body] * 256
        t0 = time.perf_counter()
        while store.end_index + 1 < entries:
            store.append(batch[: min(256, entries - store.end_index - 1)], term=1)
            store.flush()
        secs = time.perf_counter() - t0
        store.set_committed(store.end_index - 100)
        store.checkpoint()
        console.print(f"wrote {store.end_index + 1:,} entries of {len(body)} B in {secs:.2f} s "
                      f"({(store.end_index + 1) / secs:,.0f} entries/s, fdatasync per 256-entry batch)")
        last = store.get(store.end_index)
        # Simulate a crash in the middle of the last write: the process dies without closing,
        # and the last entry is torn half way through its body.
        store.data.close()
        store.index.close()
        seg = os.path.join(path, "data", f"{last.pos - last.pos % cfg.data_segment_bytes:020d}")
        with open(seg, "r+b") as f:
            f.seek(last.pos % cfg.data_segment_bytes + HEADER_SIZE + 10)
            f.write(b"\x00" * 50)
        console.print(f"tore entry {last.index} (the last one, beyond the committed index) as a crash would")
        t0 = time.perf_counter()
        store = FileStore(path, cfg)
        console.print(f"recovered in {(time.perf_counter() - t0) * 1000:.1f} ms: end index {store.end_index}, "
                      f"committed {store.committed_index}")
        for note in store.notes:
            console.print(f"  recovery: {note}")
        store.close()
        report = verify_store(path)
        status = "[green]OK[/green]" if not report.errors else f"[red]{len(report.errors)} problems[/red]"
        console.print(f"check-store: {report.entries:,} entries, {report.data_bytes:,} bytes, "
                      f"digest {report.digest[:16]}…, {status}")
        return 0 if not report.errors and store.end_index == last.index - 1 else 1
