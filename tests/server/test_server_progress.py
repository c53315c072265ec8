"""Progress on a terminal: local-cluster, demo --store and check-store run under a pseudo-terminal show
their spinners and bars on stderr (piped, they show nothing: test_server_cli, test_store_verify_progress)."""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import signal
import subprocess
import time
from pathlib import Path

from quorumlog.config import StoreConfig
from quorumlog.store.file_store import FileStore

from .conftest import SMALL_STORE
from .test_server_cli import QL, free_range

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Terminal:
    """A command whose stdout and stderr are a pseudo-terminal; `text` is what it drew, without colours."""

    def __init__(self, *args: str) -> None:
        master, slave = pty.openpty()
        env = {**os.environ, "TERM": "xterm", "COLUMNS": "160"}
        env.pop("NO_COLOR", None)
        self.proc = subprocess.Popen([*QL, *args], stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env,
                                     start_new_session=True)
        os.close(slave)
        self.fd = master
        self.raw = b""

    @property
    def text(self) -> str:
        return ANSI.sub("", self.raw.decode(errors="replace")).replace("\r", "\n")

    def read_until(self, pattern: str | None, timeout: float) -> bool:
        """Read until `pattern` (a regex; None: the end of the output) shows up, the command's output ends,
        or `timeout`; True when it showed."""
        deadline = time.monotonic() + timeout
        while pattern is None or not re.search(pattern, self.text):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if select.select([self.fd], [], [], min(left, 0.2))[0]:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:  # EIO: every process holding the terminal has ended
                    chunk = b""
                if not chunk:
                    return pattern is None or bool(re.search(pattern, self.text))
                self.raw += chunk
        return True

    def finish(self, timeout: float = 60) -> int:
        """Read everything the command draws until it exits; its exit status."""
        try:
            self.read_until(None, timeout)
            code = self.proc.wait(5)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
            os.close(self.fd)
        return code


def test_local_cluster_shows_each_node_up_and_each_leader(tmp_path: Path) -> None:
    base = free_range()
    t = Terminal("local-cluster", "--nodes", "3", "--groups", "2", "--data-dir", str(tmp_path), "--base-port",
                 str(base))
    try:
        assert t.read_until(r"ready in [0-9.]+s: leaders g0 n\d, g1 n\d", 60), t.text
        text = t.text
        for i in range(3):
            assert re.search(rf"n{i}\s+127\.0\.0\.1:{base + i}\s+starting", text), text
            assert re.search(rf"n{i}\s+127\.0\.0\.1:{base + i}\s+up", text), text
        for g in ("g0", "g1"):
            assert re.search(rf"{g}\s+electing a leader", text) and re.search(rf"{g}\s+leader n\d", text), text
        os.killpg(t.proc.pid, signal.SIGTERM)
        assert t.read_until(r"stopped: n0 exit 0, n1 exit 0, n2 exit 0", 30), t.text
        assert t.finish() == 0
    finally:
        if t.proc.poll() is None:
            os.killpg(t.proc.pid, signal.SIGKILL)
            t.proc.wait(10)
        for pid in re.findall(r" pid (\d+) ", t.text):  # the nodes, in case it was killed before it stopped them
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


def test_store_demo_and_check_store_show_their_phases(tmp_path: Path) -> None:
    t = Terminal("demo", "--store", "--entries", "20000")
    assert t.finish(120) == 0, t.text
    text = t.text
    for phase in ("writing 20,000 entries", "recovering the store", "check-store: verifying every entry"):
        assert re.search(rf"✓ {re.escape(phase)}", text), text
    assert "100%" in text and re.search(r"check-store: 20,000 entries, [0-9,]+ bytes, digest \w+…, OK", text), text

    s = FileStore(tmp_path / "s", StoreConfig(**SMALL_STORE))
    s.append([b"x" * 100] * 100, term=1)
    s.flush()
    s.close()
    t = Terminal("check-store", str(tmp_path / "s"))
    assert t.finish(60) == 0, t.text
    assert re.search(rf"✓ checking {re.escape(str(tmp_path / 's'))}", t.text), t.text
    assert "OK" in t.text
