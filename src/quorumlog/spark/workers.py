"""Which Python interpreter Spark's Python workers run, checked when the data source is registered.

Spark starts every Python worker (planners, executors' readers and writers) with the SparkContext's
`pythonExec`: `$PYSPARK_PYTHON` as it was when the context started, else `python3` from PATH. A driver
started as `venv/bin/python job.py`, without activating the venv, thus runs workers that cannot import
quorumlog ("No module named 'quorumlog'"). `spark.pyspark.python` is only read by spark-submit: set in
a SparkSession builder, it is ignored, and it cannot be changed once the session runs; `PYSPARK_PYTHON`
set after the context started is ignored too. What does take effect is the context's `pythonExec`,
read whenever a Python function or data source is handed to the JVM; so it is set before the data
source is registered.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("quorumlog.spark")

DEFAULT_PYTHON = "python3"  # what Spark runs when PYSPARK_PYTHON is not set
PROBE_TIMEOUT = 30.0
# The modules a worker of this data source imports; the version must be the driver's too (Spark checks).
_PROBE = "import sys, quorumlog, pyarrow; print('%d.%d' % sys.version_info[:2])"
_VERSION = f"{sys.version_info[0]}.{sys.version_info[1]}"


@dataclass(frozen=True, slots=True)
class Decision:
    python: str | None  # the interpreter to set for the workers, or None to leave the context as it is
    message: str | None  # what to log as a warning


def same_host(master: str) -> bool:
    """Executors of this master run on the driver's machine, where the driver's interpreter exists."""
    return master.startswith("local")  # local, local[N], local[N,F], local-cluster[...]


def workers_can_import(python: str) -> bool:
    """`python` (a path, or a name looked up in PATH as Spark does) imports quorumlog and pyarrow and has
    this interpreter's version: one short subprocess, none for one in this interpreter's own directory."""
    path = shutil.which(python)
    if path is None:
        return False
    if os.path.dirname(os.path.abspath(path)) == os.path.dirname(os.path.abspath(sys.executable)):
        return True  # this interpreter's own bin directory: the same environment
    try:
        r = subprocess.run([path, "-c", _PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0 and r.stdout.strip() == _VERSION


def decide(python_exec: str, conf_python: str | None, env_python: str | None, master: str) -> Decision:
    """What to do about the workers' interpreter, from the context's pythonExec, the spark.pyspark.python
    conf and $PYSPARK_PYTHON as they are now, and the master URL."""
    wanted, source = (conf_python, "spark.pyspark.python") if conf_python else (env_python, "PYSPARK_PYTHON")
    if wanted:
        if wanted == python_exec:
            return Decision(None, None)
        # spark-submit turns the conf into PYSPARK_PYTHON, read when the context starts; not so here.
        return Decision(wanted, f"{source}={wanted} was not applied to this SparkContext (spark-submit reads "
                                f"spark.pyspark.python, the SparkContext PYSPARK_PYTHON as it starts): its Python "
                                f"workers now run {wanted}")
    if python_exec != DEFAULT_PYTHON:
        return Decision(None, None)  # chosen by the user
    if workers_can_import(DEFAULT_PYTHON):
        return Decision(None, None)
    found = shutil.which(DEFAULT_PYTHON) or "not found"
    lacking = f"which is not a Python {_VERSION} that imports quorumlog and pyarrow"
    if same_host(master):
        return Decision(sys.executable,
                        f"Spark starts Python workers with {DEFAULT_PYTHON} from PATH ({found}), {lacking}; they "
                        f"now run this driver's interpreter {sys.executable}. Set "
                        f"PYSPARK_PYTHON before the SparkContext starts (or spark-submit --conf "
                        f"spark.pyspark.python=...) to choose it yourself")
    return Decision(None, f"PYSPARK_PYTHON is not set, so executors start Python workers with {DEFAULT_PYTHON} "
                          f"from their PATH; on this machine that is {found}, {lacking}. If tasks fail with \"No "
                          f"module named 'quorumlog'\", set PYSPARK_PYTHON (or spark-submit --conf "
                          f"spark.pyspark.python=...) to an interpreter that has quorumlog on every worker, such as "
                          f"{sys.executable} when it exists there too")


def ensure_worker_python(spark: Any) -> Decision:
    """Apply `decide` to a classic SparkSession (a Spark Connect session has no SparkContext: its server
    chooses the interpreter)."""
    try:
        sc = spark.sparkContext
        python_exec = str(sc.pythonExec)
    except Exception:
        return Decision(None, None)
    d = decide(python_exec, sc.getConf().get("spark.pyspark.python", None), os.environ.get("PYSPARK_PYTHON"),
               str(sc.master))
    if d.python is not None:
        sc.pythonExec = d.python
    if d.message:
        log.warning("%s", d.message)
    return d
