"""Subcommands of `quorumlog` that talk to nodes or run them (cli.py registers them)."""
