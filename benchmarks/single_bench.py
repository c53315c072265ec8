"""One append at a time: quorumlog and the ceiling prototype as multiples of the hardware floor, in one run.

    python benchmarks/single_bench.py [--rounds 3] [--size 100] [--count 3000] [--seconds 8] [--json-out PATH]

Each round runs the ceiling (the bare prototype in shared/bench/ceiling, batch=1 inflight=1, for --seconds),
then `quorumlog bench --local 3 --seconds 0 --single COUNT`: alternately, so that the machine's drift touches
both. The floor is what that quorumlog run measures beside its appends: two loopback round trips and one
fdatasync (p50s). Prints each round and the medians, with each p50 as a multiple of the floor: is "one at a time,
p50 <= 2.5 x the floor" within reach here, and how far is each from it. Without the ceiling (no /tmp/ceil/bin/python
with uvloop, or no prototype), quorumlog runs alone.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))

import baselines  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

TARGET = 2.5  # one-at-a-time p50 as a multiple of the floor
COLUMNS = (  # key, heading, format
    ("floor_ms", "floor ms", "{:.3f}"),
    ("ceiling_p50_ms", "ceiling p50", "{:.3f}"), ("ceiling_p99_ms", "ceiling p99", "{:.3f}"),
    ("quorumlog_p50_ms", "quorumlog p50", "{:.3f}"), ("quorumlog_p99_ms", "quorumlog p99", "{:.3f}"),
    ("ceiling_vs_floor", "ceiling / floor", "{:.2f}×"), ("quorumlog_vs_floor", "quorumlog / floor", "{:.2f}×"),
    ("quorumlog_vs_ceiling", "quorumlog / ceiling", "{:.2f}×"),
)


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="rounds of ceiling then quorumlog (default 3)")
    p.add_argument("--size", type=int, default=100, help="entry body bytes (default 100)")
    p.add_argument("--count", type=int, default=3000, help="quorumlog's appends one at a time a round (default 3000)")
    p.add_argument("--seconds", type=float, default=8.0, help="the ceiling's timed phase a round (default 8)")
    p.add_argument("--no-ceiling", dest="ceiling", action="store_false", help="run quorumlog alone")
    p.add_argument("--ceiling-dir", type=Path, default=baselines.CEILING_DIR)
    p.add_argument("--ceiling-python", type=Path, default=baselines.CEILING_PYTHON,
                   help="a Python with uvloop for the ceiling (default /tmp/ceil/bin/python)")
    p.add_argument("--json-out", type=Path, help="write every raw result here as JSON")
    a = p.parse_args(argv)
    if a.rounds < 1 or a.count < 1 or a.seconds <= 0:
        p.error("--rounds and --count must be 1 or more, --seconds more than 0")
    return a


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def _row(ceiling: dict[str, Any] | None, ql: dict[str, Any] | None) -> dict[str, float | None]:
    """One round's figures; None where a run is missing or failed."""
    c = ceiling if ceiling and "error" not in ceiling else {}
    q = ql if ql and "error" not in ql else {}
    single = q.get("single") or {}
    floor = q.get("floor_ms")
    row = {"floor_ms": floor, "ceiling_p50_ms": c.get("p50_ms"), "ceiling_p99_ms": c.get("p99_ms"),
           "quorumlog_p50_ms": single.get("p50_ms"), "quorumlog_p99_ms": single.get("p99_ms")}
    return row | {"ceiling_vs_floor": _ratio(row["ceiling_p50_ms"], floor),
                  "quorumlog_vs_floor": _ratio(row["quorumlog_p50_ms"], floor),
                  "quorumlog_vs_ceiling": _ratio(row["quorumlog_p50_ms"], row["ceiling_p50_ms"])}


def _median(rows: list[dict[str, float | None]]) -> dict[str, float | None]:
    """Each column's median over the rounds that have it (ratios: the median of the rounds' ratios)."""
    out: dict[str, float | None] = {}
    for key, _, _ in COLUMNS:
        values = [v for r in rows if (v := r.get(key)) is not None]
        out[key] = round(statistics.median(values), 3) if values else None
    return out


def _table(rows: list[dict[str, float | None]], median: dict[str, float | None], title: str) -> Table:
    t = Table(title=title)
    t.add_column("round")
    for _, heading, _ in COLUMNS:
        t.add_column(heading, justify="right")

    def cells(r: dict[str, float | None]) -> list[str]:
        return ["-" if (v := r.get(key)) is None else fmt.format(v) for key, _, fmt in COLUMNS]

    for i, r in enumerate(rows, 1):
        t.add_row(str(i), *cells(r))
    t.add_section()
    t.add_row("[b]median[/b]", *(f"[b]{c}[/b]" for c in cells(median)))
    return t


def _verdict(median: dict[str, float | None]) -> str:
    def say(name: str, x: float | None) -> str:
        if x is None:
            return f"{name}: no figure"
        return f"{name} p50 = {x:.2f}× the floor ({'within' if x <= TARGET else 'above'} {TARGET:g}×)"

    return "; ".join([say("ceiling", median["ceiling_vs_floor"]), say("quorumlog", median["quorumlog_vs_floor"])])


def _leftovers() -> list[str]:
    """Our own child processes still alive (there should be none)."""
    ps = subprocess.run(["ps", "--ppid", str(os.getpid()), "-o", "pid=,args="], capture_output=True, text=True,
                        timeout=10)
    return [line.strip() for line in ps.stdout.splitlines() if line.strip() and "ps --ppid" not in line]


def _on_sigterm(_sig: int, _frame: object) -> None:
    sys.exit(143)  # unwinds through every `finally`: clusters and prototypes stopped, temp dirs removed


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started with SIGINT ignored (`&`)
    console = Console(stderr=True)
    if a.ceiling and (why := baselines.ceiling_available(a.ceiling_dir, a.ceiling_python)):
        console.print(f"[yellow]ceiling skipped, quorumlog runs alone: {why}[/yellow]", soft_wrap=True)
        a.ceiling = False
    doc: dict[str, Any] = {
        "taken_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "command": " ".join(["single_bench.py", *(sys.argv[1:] if argv is None else argv)]),
        "machine": {"cpus": os.cpu_count(), "loadavg_before": os.getloadavg()},
        "settings": {"rounds": a.rounds, "size": a.size, "count": a.count, "seconds": a.seconds,
                     "ceiling": a.ceiling, "target_vs_floor": TARGET},
        "floor": "2 x loopback round trip p50 + fdatasync p50, measured by each round's quorumlog run",
        "rounds": []}
    started = time.monotonic()
    interrupted = False
    try:
        for i in range(1, a.rounds + 1):
            rnd: dict[str, Any] = {"round": i}
            doc["rounds"].append(rnd)
            if a.ceiling:
                console.print(f"round {i}/{a.rounds}: ceiling, one {a.size} B append at a time for {a.seconds:g} s…")
                rnd["ceiling_loadavg_1m"] = os.getloadavg()[0]
                try:
                    rnd["ceiling"] = baselines.run_ceiling(a.size, a.seconds, a.ceiling_dir, a.ceiling_python,
                                                           batch=1, inflight=1)
                except Exception as e:  # one failed run must not lose the others' figures
                    console.print(f"[red]ceiling failed: {e}[/red]")
                    rnd["ceiling"] = {"error": str(e)}
            console.print(f"round {i}/{a.rounds}: quorumlog, {a.count} appends of {a.size} B one at a time…")
            rnd["quorumlog_loadavg_1m"] = os.getloadavg()[0]
            try:
                # --seconds 0: no throughput phase (its connection/in-flight/batch settings go unused).
                rnd["quorumlog"] = baselines.run_quorumlog(a.size, 0, 1, 1, 1, a.count)
            except Exception as e:
                console.print(f"[red]quorumlog failed: {e}[/red]")
                rnd["quorumlog"] = {"error": str(e)}
            rnd["row"] = _row(rnd.get("ceiling"), rnd["quorumlog"])
    except KeyboardInterrupt:
        interrupted = True
        console.print("[yellow]interrupted: the figures so far[/yellow]")
        doc["rounds"] = [r for r in doc["rounds"] if "row" in r]
    doc["machine"]["loadavg_after"] = os.getloadavg()
    doc["wall_s"] = round(time.monotonic() - started, 1)
    doc["leftover_processes"] = _leftovers()
    rows = [r["row"] for r in doc["rounds"]]
    doc["median"] = _median(rows)
    doc["commands"] = list(dict.fromkeys(r[k]["command"] for r in doc["rounds"] for k in ("ceiling", "quorumlog")
                                         if "command" in r.get(k, {})))

    out = Console()
    if not out.is_terminal:
        out = Console(width=170)  # a file or pipe: keep the table's rows on one line each
    if rows:
        out.print(_table(rows, doc["median"], f"one {a.size} B append at a time, 3 nodes on 127.0.0.1, flush sync; "
                                              f"{doc['taken_at']}, {os.cpu_count()} cores"))
        out.print(f"floor = 2 × loopback round trip p50 + fdatasync p50, from each round's quorumlog run; a median "
                  f"ratio is the median of the rounds' ratios. Median: {_verdict(doc['median'])}.", soft_wrap=True)
        out.print("commands:")
        for command in doc["commands"]:
            out.print(f"  {command}", soft_wrap=True, highlight=False)
    if a.json_out:
        a.json_out.parent.mkdir(parents=True, exist_ok=True)
        a.json_out.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        console.print(f"results: {a.json_out}")
    if doc["leftover_processes"]:
        console.print(f"[red]processes left running: {doc['leftover_processes']}[/red]")
        return 1
    if interrupted:
        return 130
    failed = [k for r in doc["rounds"] for k in ("ceiling", "quorumlog") if "error" in r.get(k, {})]
    console.print(f"done in {doc['wall_s']:.0f} s" + (f"; failed runs: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
