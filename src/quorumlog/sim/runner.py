"""`quorumlog simulate`: run seeded simulations, report failures with a replayable trace.

    quorumlog simulate --seeds 0:1000 --steps 5000 [--nodes 5] [--faults drop,crash,...] [--file-store]

A failing seed prints the violated property, the last trace events and the command that replays it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from ..argtypes import positive
from .checker import InvariantViolation
from .cluster import ALL_FAULTS, SINGLE_NODE_FAULTS, Cluster, SimConfig


@dataclass(slots=True)
class SeedResult:
    seed: int
    ok: bool
    error: str = ""
    trace: str = ""
    step: int = 0
    stats: Counter[str] = field(default_factory=Counter)


def run_seed(seed: int, cfg: SimConfig) -> SeedResult:
    """Run one seed to the end or to the first violated invariant."""
    return run_cluster(seed, Cluster(seed, cfg), cfg.steps)


def first_failure(run: Callable[[int, Any], SeedResult], cfg: Any, seeds: Iterable[int]) -> str:
    """The error of the first seed `run` fails with `cfg` ("" when none does): planted-bug tests."""
    for seed in seeds:
        r = run(seed, cfg)
        if not r.ok:
            assert r.trace, "a failure comes with a trace"
            return r.error
    return ""


def run_cluster(seed: int, cluster: Any, steps: int) -> SeedResult:
    """Step a simulated cluster (Raft's, or pb.py's) `steps` times and check the end; the first violated
    invariant, or exception of a core (a finding too, with the same trace), ends the run."""
    try:
        for _ in range(steps):
            cluster.step()
        cluster.checker.final()
    except InvariantViolation as e:
        return SeedResult(seed, False, str(e), cluster.format_trace(), cluster.step_no, cluster.stats)
    except Exception as e:
        return SeedResult(seed, False, f"{type(e).__name__}: {e}", cluster.format_trace(), cluster.step_no,
                          cluster.stats)
    finally:
        cluster.close()
    stats = cluster.stats
    stats["acked_entries"] += cluster.checker.acked_entries
    stats["committed_entries"] += len(cluster.checker.ref)
    stats["messages_sent"] += cluster.net.sent
    stats["messages_dropped"] += cluster.net.dropped
    return SeedResult(seed, True, step=cluster.step_no, stats=stats)


def parse_seeds(text: str) -> list[int]:
    """"7", "0:1000" (half-open) or "1,5,9" (an argparse type: anything else is refused, as is no seed)."""
    seeds: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if ":" in part:
                a, b = part.split(":", 1)
                seeds.extend(range(int(a), int(b)))
            elif part:
                seeds.append(int(part))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a seed, a range a:b (b excluded) or a list a,b,c") \
            from None
    if not seeds:
        raise argparse.ArgumentTypeError(f"{text!r} names no seed (a range a:b needs b > a)")
    return seeds


def parse_faults(text: str) -> tuple[str, ...]:
    if text in ("all", ""):
        return ALL_FAULTS
    if text == "none":
        return ()
    names = tuple(f.strip() for f in text.split(",") if f.strip())
    unknown = [f for f in names if f not in ALL_FAULTS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown fault(s) {unknown}; choose from {', '.join(ALL_FAULTS)}")
    return names


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="quorumlog simulate", description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=parse_seeds, default="0:100", help="seed, range a:b (b excluded) or list a,b,c")
    p.add_argument("--steps", type=positive, default=5000, help="steps per seed (10 ms of virtual time each)")
    p.add_argument("--nodes", type=int, default=3, choices=(1, 3, 5))
    p.add_argument("--faults", type=parse_faults, default=ALL_FAULTS,
                   help=f"comma list from {','.join(ALL_FAULTS)}, or all / none (default all; with one node "
                        f"{','.join(SINGLE_NODE_FAULTS)})")
    p.add_argument("--file-store", action="store_true", help="FileStores in temporary directories")
    p.add_argument("--flush", choices=("sync", "async"), default="sync",
                   help="stores' flush mode (async: durable at write, and FIFO links)")
    p.add_argument("--trace", type=positive, default=120, help="trace lines shown for a failure")
    p.add_argument("--max-failures", type=positive, default=3, help="stop after this many failing seeds")
    p.add_argument("-q", "--quiet", action="store_true", help="only failures and the summary")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.nodes == 1 and args.faults == ALL_FAULTS:
        args.faults = SINGLE_NODE_FAULTS
    cfg = replace(SimConfig(), nodes=args.nodes, steps=args.steps, faults=args.faults,
                  file_store=args.file_store, flush=args.flush, trace_len=max(args.trace, 1))
    seeds: list[int] = args.seeds
    totals: Counter[str] = Counter()
    failures: list[SeedResult] = []
    started = time.monotonic()
    for n, seed in enumerate(seeds, 1):
        r = run_seed(seed, cfg)
        if r.ok:
            totals.update(r.stats)
        else:
            failures.append(r)
            print(f"\nFAIL seed {seed} at step {r.step}: {r.error}", file=sys.stderr)
            print(f"--- last {args.trace} events ---\n{r.trace}", file=sys.stderr)
            faults = ",".join(cfg.faults) or "none"
            print(f"--- replay: quorumlog simulate --seeds {seed} --steps {cfg.steps} --nodes {cfg.nodes} "
                  f"--faults {faults}{' --file-store' if cfg.file_store else ''}"
                  f"{' --flush async' if cfg.flush == 'async' else ''}", file=sys.stderr)
            if len(failures) >= args.max_failures:
                break
        if not args.quiet and n % 100 == 0:
            print(f"  {n}/{len(seeds)} seeds, {len(failures)} failed, {time.monotonic() - started:.0f}s",
                  flush=True)
    elapsed = time.monotonic() - started
    ran = n if seeds else 0
    print(f"{ran} seeds x {cfg.steps} steps, {cfg.nodes} nodes, faults {','.join(cfg.faults) or 'none'}: "
          f"{len(failures)} failed in {elapsed:.1f}s")
    if not args.quiet and totals:
        keys = ("acked_entries", "committed_entries", "elections", "crashes", "restarts",
                "restarts_from_a_producer_snapshot", "pauses", "idle_spans", "quiesce_heartbeats",
                "quiet_ended_node_silent",
                "corruptions", "messages_sent", "messages_dropped", "append_SUCCESS",
                "append_WAIT_QUORUM_ACK_TIMEOUT", "append_TERM_CHANGED", "append_NOT_LEADER", "append_DISK_FULL",
                "append_LEADER_TRANSFERRING",
                "transfer_SUCCESS", "transfer_TAKE_LEADERSHIP_FAILED", "end_reads_checked", "end_NOT_LEADER",
                "end_TIMEOUT")
        print("  " + ", ".join(f"{k}={totals[k]}" for k in keys if totals[k]))
    return 1 if failures else 0
