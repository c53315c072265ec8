"""Random linearizable histories, for tests and benchmarks: clients issue operations one at a time with random
timing against a simulated log that applies each at a random point of its interval."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from .ops import APPEND, MISMATCH, OK, UNCERTAIN, Operation, append, end, read


@dataclass(slots=True)
class _Call:
    client: int
    call: float
    ret: float
    at: float  # the linearization point
    kind: str
    group: str


def random_history(rng: random.Random, n_ops: int, clients: int = 8, *, p_read: float = 0.1, p_end: float = 0.1,
                   p_uncertain: float = 0.05, p_conditional: float = 0.05, p_failed: float = 0.0, max_batch: int = 3,
                   groups: int = 1, final_read: bool = False) -> list[Operation]:
    """`n_ops` operations of `clients` sequential clients, linearizable by construction. An uncertain append
    took effect with probability 1/2, possibly after the client gave up on it. With `final_read`, one more
    read of every group's whole log after everything returned."""
    clock = [rng.uniform(0.0, 1.0) for _ in range(clients)]
    calls = []
    for _ in range(n_ops):
        c = min(range(clients), key=clock.__getitem__)
        call = clock[c] + rng.expovariate(4.0)
        ret = call + rng.expovariate(1.0)
        clock[c] = ret
        x = rng.random()
        kind = "read" if x < p_read else "end" if x < p_read + p_end else APPEND
        if kind == APPEND and rng.random() < p_uncertain:
            kind = UNCERTAIN
            at = rng.uniform(call, ret + 3.0)  # a write may land after its client timed out
        else:
            at = rng.uniform(call, ret)
        calls.append(_Call(c, call, ret, at, kind, f"g{rng.randrange(groups)}" if groups > 1 else ""))
    logs: dict[str, list[bytes]] = {}
    out = []
    for k, cl in enumerate(sorted(calls, key=lambda cl: cl.at)):
        log = logs.setdefault(cl.group, [])
        if cl.kind == "read":
            start = rng.randint(max(0, len(log) - 12), len(log) + 1)
            limit = rng.randint(1, 8)
            out.append(read(cl.client, cl.call, cl.ret, start, log[start:start + limit], limit=limit, group=cl.group))
            continue
        if cl.kind == "end":
            out.append(end(cl.client, cl.call, cl.ret, len(log) - 1, group=cl.group))
            continue
        bodies = [f"c{cl.client}.{k}.{j}".encode() for j in range(rng.randint(1, max_batch))]
        expected = None
        if rng.random() < p_conditional:
            expected = len(log) - 1 if rng.random() < 0.5 else max(-1, len(log) - 1 + rng.choice((-1, 1, 2)))
        if cl.kind == UNCERTAIN:
            if rng.random() < 0.5 and (expected is None or expected == len(log) - 1):
                log.extend(bodies)
            out.append(append(cl.client, cl.call, None, bodies, expected_end=expected, group=cl.group))
        elif expected is not None and expected != len(log) - 1:
            out.append(append(cl.client, cl.call, cl.ret, bodies, expected_end=expected, status=MISMATCH,
                              group=cl.group))
        elif expected is None and rng.random() < p_failed:
            out.append(append(cl.client, cl.call, cl.ret, bodies, status="failed", group=cl.group))
        else:
            out.append(append(cl.client, cl.call, cl.ret, bodies, len(log), expected_end=expected, group=cl.group))
            log.extend(bodies)
    if final_read:
        t = max((op.ret for op in out if op.ret != math.inf), default=0.0) + 1.0
        for g, log in logs.items():
            out.append(read("final", t, t, 0, log, limit=len(log) + 1, group=g))
    out.sort(key=lambda op: op.call)
    return out


def stale_end(history: list[Operation], near: float = 0.5) -> int:
    """Plant a violation: the end query nearest `near` of the way through returns one less than an append
    acknowledged before it was called shows. Returns its position."""
    acked = [(op.ret, op.index + len(op.bodies) - 1, op.group) for op in history
             if op.kind == APPEND and op.status == OK and op.index is not None]
    ends = [i for i, op in enumerate(history) if op.kind == "end"]
    ends.sort(key=lambda i: abs(i - near * len(history)))
    for i in ends:
        op = history[i]
        floor = max((last for done, last, g in acked if done < op.call and g == op.group), default=-1)
        if floor >= 0:
            history[i] = end(op.client, op.call, op.ret, floor - 1, group=op.group, label="planted: stale")
            return i
    raise ValueError("no end query follows an acknowledged append")


def operations_of(history: list[Operation], kind: str, status: str = OK) -> list[int]:
    return [i for i, op in enumerate(history) if op.kind == kind and op.status == status]
