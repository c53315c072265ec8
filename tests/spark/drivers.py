"""Spark driver scripts run as processes of their own (a session of their own, so the driver, its JVM and
the JVM's Python workers all stop together), and the one `RESULT {json}` line each prints."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from .conftest import wait_until


def session_pids(sid: int) -> list[int]:
    """Live processes of session `sid`: a driver started in a session of its own, its JVM, the JVM's
    Python workers (whose daemon moves to a process group of its own, but not to another session)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        state, _ppid, _pgrp, session = stat.rsplit(")", 1)[1].split()[:4]
        if int(session) == sid and state != "Z":
            pids.append(int(d))
    return pids


def kill_session(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL every process of `proc`'s session, and wait (bounded) until they are gone."""
    for pid in session_pids(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(10)
    wait_until(lambda: not session_pids(proc.pid), 30, f"the processes of session {proc.pid} to end")


def run_driver(script: str, args: list[str], *, cwd: Path, env: dict[str, str], log: Path,
               timeout: float = 180, context: str = "") -> dict[str, Any]:
    """Run `script args` with this interpreter in a session of its own, its output in `log`; stop the whole
    session after it ends or after `timeout` s; assert it exited 0 (`context` added to the failure) and
    return its RESULT."""
    with log.open("wb") as out:
        driver = subprocess.Popen([sys.executable, script, *args], cwd=cwd, env=env, stdout=out,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        with contextlib.suppress(subprocess.TimeoutExpired):
            driver.wait(timeout)
    finally:
        kill_session(driver)
    text = log.read_text(errors="replace")
    assert driver.returncode == 0, text[-4000:] + context
    return dict(json.loads(next(line for line in text.splitlines() if line.startswith("RESULT "))[len("RESULT "):]))
