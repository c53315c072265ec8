"""The benchmark scripts still run against the current code (tiny sizes; no figure is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.mark.parametrize("args", [
    ["core_bench.py", "--entries", "2000"],
    ["core_bench.py", "--entries", "2000", "--core-only"],
])
def test_benchmark_script_runs(args: list[str]) -> None:
    done = subprocess.run([sys.executable, str(BENCH / args[0]), *args[1:]], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "entries/s" in done.stdout


def test_hotpath_benchmark_runs() -> None:
    """Python against C for the per-entry hot paths (the C column is "-" where the extension is not built)."""
    done = subprocess.run([sys.executable, str(BENCH / "hotpath_bench.py"), "--batch", "64", "--repeat", "1"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("encode_run") == 2 and "checked_runs" in done.stdout


def test_failover_benchmark_runs_one_round() -> None:
    """The controller failover benchmark (a real 3-node primary/backup cluster, one SIGKILLed primary)."""
    done = subprocess.run([sys.executable, str(BENCH / "failover_bench.py"), "--rounds", "1"], capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "no acknowledged append lost" in done.stdout


def test_spark_benchmark_runs_with_its_arrow_source() -> None:
    """The Spark benchmark, quorumlog beside its in-process Arrow source (a real cluster and SparkSession)."""
    pytest.importorskip("pyspark")
    done = subprocess.run([sys.executable, str(BENCH / "spark_bench.py"), "--quick", "--entries", "3000",
                           "--repeat", "1"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "in-process Arrow source" in done.stdout and "quorumlog / Arrow" in done.stdout


def test_disk_benchmark_runs(tmp_path: Path) -> None:
    """Every way of preparing segments, two writers of 8 MiB; the files are removed afterwards."""
    done = subprocess.run([sys.executable, str(BENCH / "disk_bench.py"), "--writers", "2", "--mib", "8",
                           "--dir", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count(" ms\n") == 5 and "fallocate ahead" in done.stdout
    assert list(tmp_path.iterdir()) == []


def test_relay_benchmark_runs() -> None:
    """The bare uvloop relay in quorumlog's topology (the floor under its one-at-a-time appends)."""
    done = subprocess.run([sys.executable, str(BENCH / "relay_bench.py"), "--count", "200"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "relay client -> leader -> 2 followers -> leader -> client, 100 B: p50" in done.stdout


def test_hop_trace_runs_and_leaves_nothing_behind() -> None:
    """Each hop of one append, from marks the three node processes and the client note."""
    before = set(Path(tempfile.gettempdir()).glob("quorumlog-hops-*"))
    done = subprocess.run([sys.executable, str(BENCH / "hop_trace.py"), "--count", "300"], capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("  ")]
    assert len(rows) == 15 and all(float(r.split()[-1]) >= float(r.split()[-2]) > 0 for r in rows), done.stdout
    assert "follower's fdatasync -> its end" in done.stdout
    assert set(Path(tempfile.gettempdir()).glob("quorumlog-hops-*")) == before


def test_hop_trace_with_steps_shows_each_nodes_share() -> None:
    """--steps: the nodes also mark each step inside their hops, in the order the append takes them."""
    done = subprocess.run([sys.executable, str(BENCH / "hop_trace.py"), "--count", "300", "--steps"],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    sections = done.stdout.split("inside the nodes")[1].split("\n")[1:]
    follower = sections[sections.index("a follower, from the push to its ack:") + 1:]
    at = {line.split()[1]: float(line.split()[0]) for line in follower if line.startswith("    ")}
    order = ["e:NodeServer._peer_frame", "e:FileStore.append_encoded_metas", "write-data",
             "x:FileStore.append_encoded_metas", "fsync", "fsynced", "e:PeerLinks.send", "send-peer"]
    assert [at[tag] for tag in order] == sorted(at[tag] for tag in order), done.stdout
    assert "e:Leader.dispatch_all" in done.stdout and "e:Group._complete_append" in done.stdout


def test_scale_benchmark_runs_quick_and_leaves_nothing_behind(tmp_path: Path) -> None:
    """Groups per node, log length and producers, each small. Not timings: an empty group's replica takes
    at most the 8 MiB of disk it may (the window ahead follows the write rate), every group is led, every
    append of the producer phase is acknowledged, and no process or directory is left."""
    before = set(Path(tempfile.gettempdir()).glob("quorumlog-scale-*"))
    out = tmp_path / "scale.json"
    done = subprocess.run([sys.executable, str(BENCH / "scale_bench.py"), "--quick", "--json", str(out)],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    figures = json.loads(out.read_text())
    assert figures["leftover_processes"] == []
    for g in figures["groups"]:
        assert g["disk_per_replica_mib"] <= 8 and sum(g["leaders"].values()) == g["groups"], g
    assert all(p["append_failures"] == 0 and min(p["group_producers_after"].values()) >= p["producers"]
               for p in figures["producers"]), figures["producers"]
    assert [r["entries"] for r in figures["log_entries"] if "clean" in r], figures["log_entries"]
    assert set(Path(tempfile.gettempdir()).glob("quorumlog-scale-*")) == before
