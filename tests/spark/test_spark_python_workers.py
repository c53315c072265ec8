"""register() and the interpreter of Spark's Python workers: a driver whose PATH has a `python3` without
quorumlog (as `venv/bin/python job.py` has, the venv not activated) reads all the same, in a driver
process of its own; and the decisions for each setting, against real interpreters."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from quorumlog.spark.workers import DEFAULT_PYTHON, Decision, decide, workers_can_import

from . import python_workers_job
from .conftest import append_bodies
from .drivers import run_driver

VERSION = f"{sys.version_info[0]}.{sys.version_info[1]}"


def _foreign_python3() -> str | None:
    """An interpreter of this Python version that cannot import quorumlog (the system's, say)."""
    pyenv = sorted(str(p) for p in Path.home().glob(f".pyenv/versions/{VERSION}*/bin/python3"))
    candidates = ["/usr/bin/python3", *pyenv]
    for path in candidates:
        if not os.access(path, os.X_OK):
            continue
        r = subprocess.run([path, "-c", "import sys; print('%d.%d' % sys.version_info[:2]); import quorumlog"],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0 and r.stdout.strip() == VERSION and "No module named 'quorumlog'" in r.stderr:
            return path
    return None


@pytest.fixture
def foreign_path(tmp_path: Path) -> str:
    """A PATH whose python3 is a foreign interpreter, that still finds java."""
    python = _foreign_python3()
    if python is None:
        pytest.skip(f"no Python {VERSION} without quorumlog on this machine")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / DEFAULT_PYTHON).symlink_to(python)
    java = shutil.which("java")
    return os.pathsep.join([str(bin_dir), *([os.path.dirname(java)] if java else []), "/usr/bin", "/bin"])


def test_a_driver_whose_path_python3_lacks_quorumlog_reads(foreign_path: str, new_cluster: Any,
                                                           tmp_path: Path) -> None:
    cluster = new_cluster(1)
    append_bodies(cluster, "g0", [b"w-%d" % i for i in range(300)])
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")}
    env.update(PATH=foreign_path, SPARK_LOCAL_IP="127.0.0.1", SPARK_LOCAL_DIRS=str(tmp_path), TMPDIR=str(tmp_path))
    result = run_driver(python_workers_job.__file__, [cluster.endpoints, "g0", str(tmp_path / "ckpt")],
                        cwd=tmp_path, env=env, log=tmp_path / "driver.log")
    # Without register(), Spark's workers run python3 from PATH, and fail.
    assert result["python_exec_before"] == DEFAULT_PYTHON
    assert "No module named 'quorumlog'" in result.get("unregistered_error", ""), result
    # register() gave the workers this interpreter, said so, and both queries read every entry.
    assert result["python_exec_after"] == sys.executable
    text = (tmp_path / "driver.log").read_text(errors="replace")  # the driver's warning
    assert f"they now run this driver's interpreter {sys.executable}" in text
    assert "PYSPARK_PYTHON" in text
    assert result["count"] == 300 and result["stream_count"] == 300


def test_decisions(foreign_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", foreign_path)
    assert not workers_can_import(DEFAULT_PYTHON)
    assert workers_can_import(sys.executable)
    # Local mode: this interpreter, with a warning naming what to set.
    d = decide(DEFAULT_PYTHON, None, None, "local[2]")
    assert d.python == sys.executable and d.message is not None and "PYSPARK_PYTHON" in d.message
    assert decide(DEFAULT_PYTHON, None, None, "local-cluster[2,1,1024]").python == sys.executable
    # Another master: the executors' interpreter is theirs; a warning only.
    d = decide(DEFAULT_PYTHON, None, None, "spark://10.0.0.1:7077")
    assert d.python is None and d.message is not None
    assert "PYSPARK_PYTHON" in d.message and "No module named 'quorumlog'" in d.message
    # Set by the user and applied: left alone, wherever it points.
    assert decide("/opt/py/bin/python", None, "/opt/py/bin/python", "local[2]") == Decision(None, None)
    assert decide("./environment/bin/python", "./environment/bin/python", None, "yarn") == Decision(None, None)
    assert decide("/opt/py/bin/python", None, None, "local[2]") == Decision(None, None)
    # Set but not applied (a builder's spark.pyspark.python, PYSPARK_PYTHON set after the context started).
    d = decide(DEFAULT_PYTHON, "/opt/py/bin/python", None, "spark://10.0.0.1:7077")
    assert d.python == "/opt/py/bin/python" and d.message is not None and "spark.pyspark.python" in d.message
    assert decide(DEFAULT_PYTHON, None, "/opt/py/bin/python", "local[2]").python == "/opt/py/bin/python"
    # A python3 in this interpreter's own directory needs no check and no change.
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + foreign_path)
    assert decide(DEFAULT_PYTHON, None, None, "local[2]") == Decision(None, None)
