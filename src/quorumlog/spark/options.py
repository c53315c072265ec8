"""Options of the "quorumlog" data source: parsed and checked once, with one clear error naming the option.

Spark hands options over as strings; names are matched case-insensitively, as Spark does. Unknown
options are ignored (Spark passes its own, such as checkpointLocation, to sinks).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..client import parse_endpoints
from ..client.aio import PRODUCER_WINDOW
from ..errors import QuorumLogError
from ..tls import client_context

N = TypeVar("N", int, float)


class OptionError(ValueError):
    """A data source option is missing or invalid; the message starts with the option's name."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"quorumlog option '{option}': {problem}")
        self.option = option


@dataclass(frozen=True, slots=True)
class Credentials:
    """How the executors prove themselves to the nodes: the cluster's name and either its shared secret or
    a client token's (`token` names it), and the files of mutual TLS (on every executor, at these paths)."""

    cluster: str = "quorumlog"
    secret: str | None = field(default=None, repr=False)
    token: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None

    def client_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of a Client or AsyncClient (the TLS context made here, where it is used)."""
        tls = client_context(self.tls_ca, self.tls_cert, self.tls_key) if self.tls_ca else None
        return {"cluster": self.cluster, "secret": self.secret, "token": self.token, "tls": tls}


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Reader options (batch and streaming)."""

    endpoints: str
    groups: tuple[str, ...] | None  # None: every group the cluster reports
    starting_offsets: str
    ending_offsets: str
    max_entries_per_trigger: int | None
    min_entries_per_trigger: int | None
    max_trigger_delay_ms: int
    max_entries_per_partition: int | None
    min_partitions: int | None
    fail_on_data_loss: bool
    read_from: str  # "leader" | "followers" | "any"
    check_crc: bool
    auth: Credentials
    request_timeout: float
    read_timeout: float


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """Writer options."""

    endpoints: str
    group: str | None  # used for rows without a `group` column
    max_batch_entries: int
    max_batch_bytes: int
    max_in_flight: int
    auth: Credentials
    request_timeout: float
    retry_timeout: float


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*$")
_UNITS_MS = {None: 1.0, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "min": 60_000.0, "h": 3_600_000.0}


class _Options:
    """Case-insensitive access to a string mapping, with typed getters raising OptionError."""

    def __init__(self, raw: Mapping[str, str]) -> None:
        self._raw = {str(k).lower(): v for k, v in dict(raw).items()}

    def text(self, name: str, default: str | None = None) -> str | None:
        v = self._raw.get(name.lower())
        if v is None:
            return default
        v = str(v).strip()
        return v if v else default

    def required(self, name: str) -> str:
        v = self.text(name)
        if v is None:
            raise OptionError(name, "is required")
        return v

    def integer(self, name: str, minimum: int = 1) -> int | None:
        v = self.text(name)
        return None if v is None else _number(name, v, int, lambda n: n >= minimum,
                                              f"an integer >= {minimum}")

    def seconds(self, name: str, default: float) -> float:
        v = self.text(name)
        return default if v is None else _number(name, v, float, lambda x: x > 0,
                                                  "a positive number of seconds")

    def flag(self, name: str, default: bool) -> bool:
        v = self.text(name)
        if v is None:
            return default
        if v.lower() in ("true", "1", "yes"):
            return True
        if v.lower() in ("false", "0", "no"):
            return False
        raise OptionError(name, f"expected true or false, got {v!r}")

    def duration_ms(self, name: str, default: int) -> int:
        v = self.text(name)
        if v is None:
            return default
        m = _DURATION.match(v)
        if m is None:
            raise OptionError(name, f"expected a duration such as 500ms, 30s, 15m; got {v!r}")
        return int(float(m.group(1)) * _UNITS_MS[m.group(2)])

    def choice(self, name: str, choices: tuple[str, ...], default: str) -> str:
        v = self.text(name)
        if v is None:
            return default
        if v.lower() not in choices:
            raise OptionError(name, f"expected one of {', '.join(choices)}; got {v!r}")
        return v.lower()


def _endpoints(o: _Options) -> str:
    eps = o.required("endpoints")
    try:
        return ",".join(parse_endpoints(eps))
    except QuorumLogError as e:
        raise OptionError("endpoints", str(e)) from None


def _offsets_spec(o: _Options, name: str, default: str) -> str:
    from .offsets import parse_offsets_spec

    spec = o.text(name, default)
    assert spec is not None
    parse_offsets_spec(spec, name)  # checked now, resolved against the cluster later
    return spec


def parse_source_options(raw: Mapping[str, str]) -> SourceOptions:
    o = _Options(raw)
    groups_s = o.text("groups")
    groups: tuple[str, ...] | None = None
    if groups_s is not None:
        groups = tuple(dict.fromkeys(g.strip() for g in groups_s.split(",") if g.strip()))
        if not groups:
            raise OptionError("groups", f"expected a comma-separated list of group names, got {groups_s!r}")
    max_trigger = o.integer("maxEntriesPerTrigger")
    min_trigger = o.integer("minEntriesPerTrigger")
    if max_trigger is not None and min_trigger is not None and min_trigger > max_trigger:
        raise OptionError("minEntriesPerTrigger", f"{min_trigger} exceeds maxEntriesPerTrigger {max_trigger}")
    return SourceOptions(
        endpoints=_endpoints(o),
        groups=groups,
        starting_offsets=_offsets_spec(o, "startingOffsets", "earliest"),
        ending_offsets=_offsets_spec(o, "endingOffsets", "latest"),
        max_entries_per_trigger=max_trigger,
        min_entries_per_trigger=min_trigger,
        max_trigger_delay_ms=o.duration_ms("maxTriggerDelay", 15 * 60_000),
        max_entries_per_partition=o.integer("maxEntriesPerPartition"),
        min_partitions=o.integer("minPartitions"),
        fail_on_data_loss=o.flag("failOnDataLoss", True),
        read_from=o.choice("readFrom", ("leader", "followers", "any"), "leader"),
        check_crc=o.flag("checkCrc", True),
        auth=_credentials(o),
        request_timeout=o.seconds("requestTimeout", 10.0),
        read_timeout=o.seconds("readTimeout", 60.0),
    )


def parse_sink_options(raw: Mapping[str, str]) -> SinkOptions:
    o = _Options(raw)
    max_entries = o.integer("maxBatchEntries") or 2000
    max_bytes = o.integer("maxBatchBytes") or (4 << 20)
    max_in_flight = o.integer("maxInFlight") or 4
    if max_in_flight > PRODUCER_WINDOW:  # the leader recognises retries of that many requests per producer
        raise OptionError("maxInFlight", f"at most {PRODUCER_WINDOW}, got {max_in_flight}")
    return SinkOptions(
        endpoints=_endpoints(o),
        group=o.text("group"),
        max_batch_entries=max_entries,
        max_batch_bytes=max_bytes,
        max_in_flight=max_in_flight,
        auth=_credentials(o),
        request_timeout=o.seconds("requestTimeout", 10.0),
        retry_timeout=o.seconds("retryTimeout", 30.0),
    )


def _credentials(o: _Options) -> Credentials:
    token, ca, cert, key = o.text("token"), o.text("tlsCa"), o.text("tlsCert"), o.text("tlsKey")
    if token is not None and o.text("secret") is None:
        raise OptionError("token", "a token needs its secret: set the secret option to the token's secret")
    if (cert is None) != (key is None):
        raise OptionError("tlsCert" if cert is None else "tlsKey", "tlsCert and tlsKey go together")
    if cert is not None and ca is None:
        raise OptionError("tlsCa", "a client certificate needs the cluster's CA to check the nodes by")
    return Credentials(o.text("cluster", "quorumlog") or "quorumlog", o.text("secret"), token, ca, cert, key)


def _number(name: str, text: str, convert: Callable[[str], N], ok: Callable[[N], bool], expected: str) -> N:
    """`text` converted, or an OptionError naming the option and what it expects."""
    try:
        value = convert(text)
    except ValueError:
        value = None
    if value is None or not ok(value):
        raise OptionError(name, f"expected {expected}, got {text!r}")
    return value
