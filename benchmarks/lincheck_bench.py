"""How long the linearizability checker (quorumlog.lincheck) takes on simulated histories: clients issuing
appends (batches of 1-3, some conditional), reads and end queries one at a time with random timing against
a log that applies each at a random point of its interval; some appends are uncertain (half of them took
effect, possibly after their client gave up). Each history is checked as generated (linearizable), then
with a planted violation: an end query in the middle made stale.

    python benchmarks/lincheck_bench.py [--ops 10000] [--clients 4,8] [--reads 0.1] [--ends 0.1]
                                        [--uncertain 0.05] [--groups 1] [--seed 1] [--repeat 3] [--html FILE]

It prints seconds per check (the best of --repeat) and search states; nothing here asserts a figure.
"""

from __future__ import annotations

import argparse
import random
import time

from quorumlog import lincheck
from quorumlog.lincheck.gen import random_history, stale_end


def timed(history: list[lincheck.Operation], repeat: int) -> tuple[float, lincheck.Result]:
    best = float("inf")
    result = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = lincheck.check(history, timeout=600)
        best = min(best, time.perf_counter() - t0)
    assert result is not None
    return best, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=10_000)
    ap.add_argument("--clients", default="4,8", help="comma-separated client counts, one row pair each")
    ap.add_argument("--reads", type=float, default=0.1)
    ap.add_argument("--ends", type=float, default=0.1)
    ap.add_argument("--uncertain", type=float, default=0.05)
    ap.add_argument("--groups", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--html", help="write the planted violation's timeline (last row) here")
    args = ap.parse_args()
    print(f"{args.ops} operations: {args.reads:.0%} reads, {args.ends:.0%} end queries, {args.uncertain:.0%} of "
          f"appends uncertain, {args.groups} group(s)")
    print(f"{'clients':>7} {'history':<24} {'verdict':<10} {'seconds':>8} {'states':>8}")
    planted_result = None
    for clients in (int(c) for c in args.clients.split(",")):
        history = random_history(random.Random(args.seed), args.ops, clients, p_read=args.reads, p_end=args.ends,
                                 p_uncertain=args.uncertain, groups=args.groups)
        n_unc = sum(op.status == lincheck.UNCERTAIN for op in history)
        seconds, result = timed(history, args.repeat)
        states = sum(g.states for g in result.groups.values())
        print(f"{clients:>7} {f'linearizable ({n_unc} unc.)':<24} {result.verdict:<10} {seconds:>8.3f} {states:>8}")
        at = stale_end(history)
        seconds, planted_result = timed(history, args.repeat)
        states = sum(g.states for g in planted_result.groups.values())
        print(f"{clients:>7} {f'stale end at #{at}':<24} {planted_result.verdict:<10} {seconds:>8.3f} {states:>8}")
    if planted_result is not None:
        print("\nThe last planted violation's report, first lines:")
        print("\n".join(planted_result.report.splitlines()[:14]))
        if args.html:
            planted_result.write_html(args.html)
            print(f"timeline: {args.html}")


if __name__ == "__main__":
    main()
