"""The `quorumlog` command."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from .argtypes import positive, seconds
from .errors import QuorumLogError


def _check_store(args: argparse.Namespace) -> int:
    from .progress import Phases
    from .store.verify import verify_store

    with Phases() as phases:  # on stderr, when it is a terminal: a large store takes a while
        phases.start(f"checking {args.dir}", total=None)
        report = verify_store(args.dir, progress=lambda done, total: phases.update(done, total))
    if args.json:
        print(json.dumps(report.as_json(), indent=2))
        return 1 if report.errors else 0
    console = Console()
    table = Table(title=f"store {args.dir}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    for key, value in report.as_json().items():
        if key != "errors":
            table.add_row(key, str(value))
    table.add_row("term / voted for", f"{report.term} / {report.voted_for or '-'}")
    table.add_row("status", "[red]CORRUPT[/red]" if report.errors else "[green]OK[/green]")
    console.print(table)
    if report.errors:
        problems = Table(title="problems")
        for col in ("file", "offset", "problem"):
            problems.add_column(col)
        for e in report.errors:
            problems.add_row(str(e["file"]), str(e["offset"]), str(e["problem"]))
        console.print(problems)
    return 1 if report.errors else 0


def _demo(args: argparse.Namespace) -> int:
    from .commands.sigterm import sigterm_exits

    with sigterm_exits():  # the demo's cluster, producer and Spark are stopped, its data removed
        if args.store:
            from .demo import run_demo

            return run_demo(entries=args.entries)
        from .demo import run_spark_demo

        return run_spark_demo(seconds=args.seconds, rate=args.rate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="quorumlog", description="A replicated, durable commit log.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("check-store", help="verify a store directory offline",
                       description="Verify one store directory (<data-dir>/<group>/<node-id>) without "
                                   "changing it. Exit status 1 when it is corrupt.")
    p.add_argument("dir", help="the store directory")
    p.add_argument("--json", action="store_true", help="print a JSON report")
    p.set_defaults(func=_check_store)

    # Listed for --help; main() hands "simulate" and its arguments to the simulator's own parser.
    sub.add_parser("simulate", help="run the deterministic cluster simulator (see: quorumlog simulate --help)",
                   add_help=False)

    p = sub.add_parser("demo", help="a Spark streaming pipeline surviving a leader kill (--store: the store demo)",
                       description="Start a local 3-node cluster with 2 groups, produce click events, count them "
                                   "per page with Spark Structured Streaming, and SIGKILL a leader midway "
                                   "(needs the spark extra). --store runs the store demo instead: write, tear "
                                   "and recover a store, then verify it.")
    p.add_argument("--store", action="store_true", help="run the store demo instead")
    p.add_argument("--seconds", type=seconds, default=30.0,
                   help="how long the stream runs once flowing; the leader is killed after a third (Spark demo)")
    p.add_argument("--rate", type=positive, default=2000, help="click events per second (Spark demo)")
    p.add_argument("--entries", type=positive, default=200_000, help="how many entries to write (store demo)")
    p.set_defaults(func=_demo)

    from .commands import bench, certs, client_cmds, members, serve

    serve.add_parsers(sub)
    client_cmds.add_parsers(sub)
    members.add_parsers(sub)
    bench.add_parsers(sub)
    certs.add_parsers(sub)
    return parser


def _hint(e: QuorumLogError) -> str:
    """What to do about an error the command line can fix."""
    from .net.errors import SecretRequiredError

    if isinstance(e, SecretRequiredError):
        return ("; pass --secret-file FILE, or set QUORUMLOG_SECRET_FILE (local-cluster keeps the secret in "
                "DATA_DIR/secret and prints the line to run)")
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["simulate"]:
        # The simulator parses its own options (argparse's REMAINDER would not pass on "--seeds").
        from .sim.runner import main as simulate_main

        return simulate_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except QuorumLogError as e:
        print(f"quorumlog: error: {e}{_hint(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
