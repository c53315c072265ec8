"""The primary/backup simulator's command line: python -m quorumlog.sim --mode pb (pb.py)."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from ..argtypes import positive
from .pb import EXTRA_FAULTS, PB_FAULTS, PbConfig, run_pb_seed
from .pb import __doc__ as pb_doc
from .runner import parse_seeds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m quorumlog.sim --mode pb", description=pb_doc.split("\n\n")[0])
    ap.add_argument("--seeds", type=parse_seeds, default="0:100", help="seed, range a:b (b excluded) or list a,b,c")
    ap.add_argument("--steps", type=positive, default=1000, help="steps per seed (10 ms of virtual time each)")
    ap.add_argument("--nodes", type=int, default=3, choices=(2, 3, 4, 5))
    ap.add_argument("--faults", default="tcp", choices=("tcp", "all", "none"),
                    help=f"tcp: {','.join(PB_FAULTS)}; all: also {','.join(EXTRA_FAULTS)}")
    ap.add_argument("--no-controller", action="store_true", help="the first primary stays: no failover")
    ap.add_argument("--trace", type=positive, default=150, help="trace lines shown for a failure")
    args = ap.parse_args(argv)
    faults = {"tcp": PB_FAULTS, "all": PB_FAULTS + EXTRA_FAULTS, "none": ()}[args.faults]
    cfg = PbConfig(args.nodes, args.steps, faults=faults, controller=not args.no_controller, trace_len=args.trace)
    seeds, totals, started = args.seeds, Counter[str](), time.monotonic()
    results = [run_pb_seed(seed, cfg) for seed in seeds]
    for r in results:
        totals.update(r.stats)
        if not r.ok:
            print(f"\nFAIL seed {r.seed} at step {r.step}: {r.error}\n{r.trace}\n--- replay: python -m quorumlog.sim "
                  f"--mode pb --seeds {r.seed} --steps {cfg.steps} --nodes {cfg.nodes} --faults {args.faults}"
                  f"{' --no-controller' * (not cfg.controller)}", file=sys.stderr)
    failed = sum(not r.ok for r in results)
    print(f"{len(seeds)} seeds x {cfg.steps} steps, {cfg.nodes} nodes, controller {cfg.controller}, faults "
          f"{args.faults}: {failed} failed in {time.monotonic() - started:.1f}s")
    print("  " + ", ".join(f"{k}={v}" for k, v in sorted(totals.items()) if not k.startswith("isr_")))
    return 1 if failed else 0
