"""benchmarks/single_bench.py still runs: one short round, the ceiling too where /tmp/ceil has uvloop."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "single_bench.py"
# As benchmarks/peers/baselines.py looks for it: the prototype beside the repository, a Python with uvloop in /tmp.
CEILING = (SCRIPT.parents[2] / "shared" / "bench" / "ceiling" / "spike_bench.py").is_file() and \
    Path("/tmp/ceil/bin/python").is_file()


def _temp_dirs() -> set[Path]:
    tmp = Path(tempfile.gettempdir())
    return set(tmp.glob("peers-ceiling-*")) | set(tmp.glob("quorumlog-bench-*"))


def test_single_bench_runs_one_round_and_leaves_nothing_behind(tmp_path: Path) -> None:
    before = _temp_dirs()
    out = tmp_path / "single.json"
    args = ["--rounds", "1", "--count", "200", "--seconds", "2", "--json-out", str(out)]
    if not CEILING:
        args.append("--no-ceiling")  # CI has no /tmp/ceil: quorumlog alone
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "quorumlog / floor" in done.stdout and "median" in done.stdout
    assert "quorumlog bench --local 3 --size 100 --seconds 0" in done.stdout
    doc = json.loads(out.read_text())
    row = doc["rounds"][0]["row"]
    assert row["floor_ms"] > 0 and row["quorumlog_p50_ms"] > 0 and row["quorumlog_vs_floor"] > 0
    if CEILING:
        assert row["ceiling_p50_ms"] > 0 and row["ceiling_vs_floor"] > 0 and row["quorumlog_vs_ceiling"] > 0
        assert "spike_bench.py c1 body=100 batch=1 inflight=1" in done.stdout
    else:
        assert row["ceiling_p50_ms"] is None
    assert doc["leftover_processes"] == []
    assert _temp_dirs() == before
