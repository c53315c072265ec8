"""argparse types for the command line's numbers: a bad value is refused with one line naming the
argument, never a traceback and never a run that measures nothing."""

from __future__ import annotations

import argparse


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def non_negative(text: str) -> int:
    """An integer of 0 or more (an index, a count, a size)."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def positive(text: str) -> int:
    """An integer of 1 or more (nodes, connections, steps)."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def base_port(text: str) -> int:
    """The first of a local cluster's ports: node i listens on P+i and its admin HTTP on P+100+i."""
    value = _integer(text)
    if not 1 <= value <= 65535 - 199:
        raise argparse.ArgumentTypeError(f"must be 1..{65535 - 199} (node i takes P+i and P+100+i), not {value}")
    return value


def port(text: str) -> int:
    """A TCP port, 0 for one the system picks."""
    value = _integer(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be 0..65535, not {value}")
    return value


def seconds(text: str) -> float:
    """A duration of 0 seconds or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0:  # (NaN too)
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
    return value
