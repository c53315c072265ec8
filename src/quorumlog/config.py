"""Node and group settings: defaults (docs/design.md §7), TOML loading, validation."""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import logging
import os
import re
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .errors import ConfigError

log = logging.getLogger(__name__)

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

MAX_BODY_BYTES = 4 * MiB
INDEX_UNIT_BYTES = 32
_NODE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """How one store lays out and syncs its files."""

    data_segment_bytes: int = 1 * GiB
    index_segment_bytes: int = INDEX_UNIT_BYTES * 5_242_880
    flush: Literal["sync", "async"] = "sync"
    flush_interval_ms: int = 10
    checkpoint_interval_ms: int = 3000
    disk_clean_ratio: float = 0.85
    disk_full_ratio: float = 0.90
    file_reserved_hours: float = 72.0
    # A member unheard of for this long no longer holds expiry back (None: file_reserved_hours).
    member_timeout_hours: float | None = None
    max_body_bytes: int = MAX_BODY_BYTES

    def __post_init__(self) -> None:
        if self.flush not in ("sync", "async"):
            raise ConfigError(f"flush must be 'sync' or 'async', not {self.flush!r}")
        if self.index_segment_bytes <= 0 or self.index_segment_bytes % INDEX_UNIT_BYTES:
            raise ConfigError(f"index_segment_bytes must be a positive multiple of {INDEX_UNIT_BYTES}")
        # The largest entry (header, producer metadata, max body) plus a blank record must fit in one
        # data segment.
        if self.data_segment_bytes < self.max_body_bytes + 48 + 28 + 8:
            raise ConfigError(
                f"data_segment_bytes ({self.data_segment_bytes}) must hold the largest entry "
                f"({self.max_body_bytes} + 84 bytes)"
            )
        if not 0 < self.disk_clean_ratio <= self.disk_full_ratio <= 1:
            raise ConfigError("need 0 < disk_clean_ratio <= disk_full_ratio <= 1")
        if self.flush_interval_ms <= 0 or self.checkpoint_interval_ms <= 0:
            raise ConfigError("flush_interval_ms and checkpoint_interval_ms must be positive")
        if not 0 <= self.max_body_bytes <= MAX_BODY_BYTES:
            raise ConfigError(f"max_body_bytes must be in 0..{MAX_BODY_BYTES}")


@dataclass(frozen=True, slots=True)
class RaftConfig:
    """Timing and limits of one Raft group (docs/design.md §4, §7)."""

    # 100 ms heartbeats and 5 missed ones: a dead leader is noticed in 0.5-1 s, while a loop
    # stalled by a burst of fsyncs (tens of ms) never looks dead.
    heartbeat_interval_ms: int = 100
    max_heartbeat_leak: int = 5
    election_backoff_ms: int = 300
    max_pending_requests: int = 10_000
    max_wait_ack_ms: int = 2500
    max_push_timeout_ms: int = 1000
    max_inflight_pushes: int = 64
    push_batch_bytes: int = 1 * MiB
    push_batch_entries: int = 4096
    max_transfer_lag: int = 1000
    transfer_timeout_ms: int = 1000
    # A learner is promoted to voter only within this many entries of the leader's end (raft/membership.py).
    learner_promote_lag: int = 1000
    preferred_leader: str | None = None
    pre_vote: bool = True
    check_quorum: bool = True
    # A group quiet for an election timeout, every member caught up, stops heartbeating; its followers then
    # wait for its leader's node to fall silent (raft/quiesce.py). Idle groups cost next to nothing.
    quiesce: bool = True
    # The idempotent producer (core/producers.py): requests a producer may have in flight, and how long
    # an idle producer is remembered (by the wall clock written in the log). Keep the idle time below
    # the store's retention: a member reset to the leader's begin only knows producers it can read.
    producer_window: int = 64
    producer_idle_ms: int = 24 * 3_600_000

    def __post_init__(self) -> None:
        for name in ("heartbeat_interval_ms", "max_heartbeat_leak", "max_pending_requests",
                     "max_wait_ack_ms", "max_push_timeout_ms", "max_inflight_pushes",
                     "push_batch_bytes", "push_batch_entries", "transfer_timeout_ms", "producer_window",
                     "producer_idle_ms"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive")
        if self.election_backoff_ms < 0 or self.max_transfer_lag < 0 or self.learner_promote_lag < 0:
            raise ConfigError("election_backoff_ms, max_transfer_lag and learner_promote_lag must not be negative")

    @property
    def election_timeout_ms(self) -> int:
        return self.heartbeat_interval_ms * self.max_heartbeat_leak


@dataclass(frozen=True, slots=True)
class HaConfig:
    """A primary/backup group's settings (docs/design.md §5, docs/replication.md); the TOML keys of [[group]]."""

    replication: Literal["raft", "primary-backup"] = "raft"
    ack: Literal["sync", "async"] = "sync"
    primary: str | None = None  # the first primary (epoch 1)
    min_in_sync: int = 1  # backups that must be in sync (and ack) for a SYNC append to succeed
    max_in_sync_lag: int = 64 * MiB  # bytes a backup may stay behind (ha_ack_timeout_ms long) and be in sync
    ha_transfer_batch_bytes: int = 1 * MiB
    # A backup reports at least every heartbeat interval; one silent for ha_ack_timeout_ms leaves the
    # in-sync set, before the appends waiting for it time out (max_wait_ack_ms, 2.5 s by default).
    ha_heartbeat_interval_ms: int = 500
    ha_ack_timeout_ms: int = 2000
    controller: str | None = None  # the Raft group that holds epochs and in-sync sets
    auto_failover: bool | None = None  # default: true when a controller is configured
    failover_timeout_ms: int = 1000
    # With a controller: the order in which it elects among live in-sync backups (higher first, then by id;
    # RocketMQ's elect policy priority), and the member it switches back to once that one is in sync again.
    priority: dict[str, int] = field(default_factory=dict)
    preferred_primary: str | None = None

    def __post_init__(self) -> None:
        if self.replication not in ("raft", "primary-backup"):
            raise ConfigError(f"replication must be 'raft' or 'primary-backup', not {self.replication!r}")
        if self.ack not in ("sync", "async"):
            raise ConfigError(f"ack must be 'sync' or 'async', not {self.ack!r}")
        if self.min_in_sync < 0 or self.max_in_sync_lag < 0:
            raise ConfigError("min_in_sync and max_in_sync_lag must not be negative")
        for name in ("ha_transfer_batch_bytes", "ha_heartbeat_interval_ms", "ha_ack_timeout_ms",
                     "failover_timeout_ms"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive")
        if self.ha_ack_timeout_ms <= self.ha_heartbeat_interval_ms:
            raise ConfigError("ha_ack_timeout_ms must exceed ha_heartbeat_interval_ms (an idle backup reports "
                              "once per heartbeat interval)")

    @property
    def primary_backup(self) -> bool:
        return self.replication == "primary-backup"

    @property
    def failover(self) -> bool:
        """Does the controller promote a backup by itself when the primary is gone?"""
        return self.controller is not None and self.auto_failover is not False


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """One replication group hosted by a node: its name, members and settings."""

    name: str
    peers: dict[str, str]  # node id -> "host:port"
    raft: RaftConfig = field(default_factory=RaftConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    ha: HaConfig = field(default_factory=HaConfig)
    # This node joins the running group: `peers` name its members and this node, which counts for nothing
    # until a membership change names it (quorumlog members add, docs/operations.md).
    join: bool = False

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name or self.name.startswith("."):
            raise ConfigError(f"invalid group name {self.name!r}")
        if not self.peers:
            raise ConfigError(f"group {self.name!r} has no peers")
        for pid in self.peers:
            if not _NODE_ID.fullmatch(pid):
                raise ConfigError(f"invalid node id {pid!r} in group {self.name!r}: use letters, digits, '.', '_' "
                                  "and '-'")
        ha = self.ha
        if ha.primary_backup:
            if ha.primary is None or ha.primary not in self.peers:
                raise ConfigError(f"group {self.name!r}: a primary-backup group needs primary = one of its peers")
            backups = len(self.peers) - 1
            if ha.ack == "sync" and ha.min_in_sync > backups:  # (ASYNC appends never wait for a backup)
                raise ConfigError(f"group {self.name!r}: min_in_sync {ha.min_in_sync} exceeds its {backups} backups: "
                                  f"no SYNC append could succeed (set min_in_sync = {backups}, or ack = \"async\")")
            if ha.controller == self.name:
                raise ConfigError(f"group {self.name!r} cannot be its own controller")
            if ha.preferred_primary is not None and ha.preferred_primary not in self.peers:
                raise ConfigError(f"group {self.name!r}: preferred_primary {ha.preferred_primary!r} is not one of its "
                                  "peers")
            if not isinstance(ha.priority, dict) or any(
                    m not in self.peers or type(p) is not int for m, p in ha.priority.items()):
                raise ConfigError(f"group {self.name!r}: priority must map its peers to integers, e.g. "
                                  "priority = { n1 = 2 }")
            if (ha.preferred_primary is not None or ha.priority) and ha.controller is None:
                raise ConfigError(f"group {self.name!r}: priority and preferred_primary need a controller")
        elif ha.controller is not None or ha.primary is not None:
            raise ConfigError(f"group {self.name!r}: primary and controller apply to primary-backup groups only")


PERMISSIONS = frozenset({"read", "append", "admin"})


@dataclass(frozen=True, slots=True)
class TokenConfig:
    """A named client credential: its secret, and what it may do in each group ("*": every group).

    read: READ, GET, TAIL, METADATA; append: APPEND, APPEND_BATCH; admin: LEADERSHIP_TRANSFER, PROMOTE,
    CHANGE_MEMBERS, STATUS. A client using it connects as "client:<name>" and proves the secret at HELLO.
    Its permissions are also those of a client whose TLS certificate names "client:<name>"; on a node with
    TLS a token may have no secret and stand for such certificates only."""

    name: str
    secret: str = field(repr=False)
    permissions: dict[str, frozenset[str]]

    def __post_init__(self) -> None:
        if not _NODE_ID.fullmatch(self.name):
            raise ConfigError(f"invalid token name {self.name!r}: use letters, digits, '.', '_' and '-'")
        for group, perms in self.permissions.items():
            unknown = set(perms) - PERMISSIONS
            if unknown:
                raise ConfigError(f"token {self.name!r}: unknown permission(s) {', '.join(sorted(unknown))} for "
                                  f"{group!r}; use {', '.join(sorted(PERMISSIONS))}")


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """One node process: its id, listen address, data directory and groups."""

    node_id: str
    data_dir: Path
    groups: tuple[GroupConfig, ...]
    cluster: str = "quorumlog"
    listen: str = "127.0.0.1:9000"
    admin_listen: str | None = None
    # The admin HTTP port (server/admin.py, docs/security.md): the bearer token its requests need, the names
    # their Host may carry besides addresses and localhost (DNS rebinding), /metrics left open for a scraper
    # without the token, the connections it holds at once, and serving beyond loopback without a token.
    admin_token: str | None = field(default=None, repr=False)
    admin_hosts: tuple[str, ...] = ()
    admin_metrics_open: bool = False
    max_admin_connections: int = 64
    insecure_admin: bool = False  # serve the admin port beyond loopback without a token (refused otherwise)
    secret: str | None = field(default=None, repr=False)
    max_frame_bytes: int = 16 * MiB
    # Limits that keep one client from taking the node's memory or descriptors (docs/operations.md).
    max_connections: int = 1024  # established connections, clients and peers; more are refused
    # Connections still in their handshake (TLS, HELLO): a cap of their own, and one per remote address.
    max_handshakes: int = 64
    max_handshakes_per_address: int = 16
    max_requests_per_connection: int = 1024  # unanswered requests before the node stops reading one
    max_output_bytes_per_connection: int = 32 * MiB  # unsent answers before the node stops reading one
    max_tails_per_connection: int = 16  # TAIL subscriptions one connection may hold
    insecure: bool = False  # listen beyond loopback without a secret (refused otherwise)
    tokens: tuple[TokenConfig, ...] = ()  # client credentials with permissions ([[token]] tables)
    # Mutual TLS (tls.py): this node's certificate and key, and the CA every peer's and client's is signed by.
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    # The background scrub (server/scrub.py): every group's committed log read back and checked, at most
    # this many bytes a second over all groups (0: off), a pass starting this often.
    scrub_bytes_per_s: int = 8 * MiB
    scrub_interval_hours: float = 24.0

    def __post_init__(self) -> None:
        if not self.node_id:
            raise ConfigError("node id is empty")
        for name in ("max_connections", "max_requests_per_connection", "max_output_bytes_per_connection",
                     "max_tails_per_connection", "max_handshakes", "max_handshakes_per_address"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive")
        if self.max_admin_connections <= 0:
            raise ConfigError("max_admin_connections must be positive")
        if self.admin_token == "":
            raise ConfigError("admin_token is empty")
        if not isinstance(self.admin_hosts, tuple) or not all(isinstance(h, str) and h for h in self.admin_hosts):
            raise ConfigError('admin_hosts must be a list of host names, e.g. ["quorumlog-admin.example"]')
        if self.scrub_bytes_per_s < 0 or not self.scrub_interval_hours > 0:
            raise ConfigError("scrub_bytes_per_s must be 0 (off) or more, scrub_interval_hours positive")
        if self.max_frame_bytes < 64 * 1024:
            raise ConfigError("max_frame_bytes must be at least 64 KiB")
        if len({self.tls_cert is None, self.tls_key is None, self.tls_ca is None}) > 1:
            raise ConfigError("TLS needs all of tls_cert, tls_key and tls_ca")
        for t in self.tokens:
            if t.secret and not self.secret:
                raise ConfigError(f"token {t.name!r} has a secret, which needs the cluster's shared secret too: "
                                  "peers authenticate with it")
            if not t.secret and self.tls_cert is None:
                raise ConfigError(f"token {t.name!r} has no secret: without one it stands only for TLS "
                                  f"certificates naming client:{t.name}, and this node has no TLS")
        by_name = {g.name: g for g in self.groups}
        for g in self.groups:
            if self.node_id not in g.peers:
                raise ConfigError(f"node {self.node_id!r} is not a peer of group {g.name!r}")
            c = g.ha.controller
            if c is not None:
                ctl = by_name.get(c)
                if ctl is None or ctl.ha.primary_backup:
                    raise ConfigError(f"group {g.name!r}: its controller {c!r} must be a Raft group this node hosts")
                if set(g.peers) != set(ctl.peers):
                    # A node manages only the groups it hosts: while a controller leader outside the
                    # group led, nobody would fail the group over.
                    diff = []
                    extra, missing = sorted(set(ctl.peers) - set(g.peers)), sorted(set(g.peers) - set(ctl.peers))
                    if extra:
                        diff.append(f"{', '.join(extra)} in {c!r} but not in {g.name!r}")
                    if missing:
                        diff.append(f"{', '.join(missing)} in {g.name!r} but not in {c!r}")
                    raise ConfigError(f"group {g.name!r}: its controller {c!r} must have exactly the same members "
                                      f"({'; '.join(diff)})")


def _sub(cls: type, values: dict[str, Any], where: str) -> Any:
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = set(values) - known
    if unknown:
        raise ConfigError(f"unknown setting(s) in {where}: {', '.join(sorted(unknown))}")
    try:
        return cls(**values)
    except TypeError as e:
        raise ConfigError(f"{where}: {e}") from None


def parse_peers(text: str) -> dict[str, str]:
    """Parse 'n0=127.0.0.1:9000,n1=127.0.0.1:9001' into {id: address}."""
    peers: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        node, sep, addr = part.partition("=")
        if not sep or not node or ":" not in addr:
            raise ConfigError(f"bad peer {part!r}: expected id=host:port")
        peers[node] = addr
    if not peers:
        raise ConfigError("no peers given")
    return peers


def is_loopback(host: str) -> bool:
    """Whether `host` (an address, or "localhost") is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # any other name may resolve to an outside address


def warn_if_others_read(path: str | Path, mode: int, what: str = "the secret file {path}") -> None:
    """Log a WARNING (not an error) when `mode`, that of the file at `path` holding a secret, grants its
    group or other users any access. `what` names the file ("{path}" stands for its path)."""
    if stat.S_ISREG(mode) and mode & 0o077:
        log.warning("%s may be read by other users (mode %04o): run chmod 600 %s", what.format(path=path),
                    stat.S_IMODE(mode), path)


def read_secret_file(path: str | Path) -> str:
    """A shared secret kept in a file: its text without the trailing newline (ConfigError if unreadable
    or empty). A file its group or other users may read draws a warning."""
    try:
        with open(path) as f:
            warn_if_others_read(path, os.fstat(f.fileno()).st_mode)
            secret = f.read().rstrip("\r\n")
    except OSError as e:
        raise ConfigError(f"cannot read the secret file {path}: {e.strerror}") from None
    if not secret:
        raise ConfigError(f"the secret file {path} is empty")
    return secret


def _token(t: dict[str, Any]) -> TokenConfig:
    """A [[token]] table: name, secret or secret_file (or neither, for TLS certificates only), permissions =
    {group = ["read", ...]}."""
    t = dict(t)
    if "secret_file" in t:
        t["secret"] = read_secret_file(t.pop("secret_file"))
    t.setdefault("secret", "")
    perms = t.pop("permissions", {})
    if not isinstance(perms, dict) or not all(isinstance(v, list) for v in perms.values()):
        raise ConfigError(f"token {t.get('name')!r}: permissions must be a table of lists, e.g. {{ g0 = [\"read\"] }}")
    return _sub(TokenConfig, {**t, "permissions": {g: frozenset(v) for g, v in perms.items()}}, "[[token]]")


def load_node_config(path: str | Path, node_id: str | None = None) -> NodeConfig:
    """Load a node's TOML file: top-level node settings, [raft] and [store] defaults, [[group]] tables.

    `node_id` (`quorumlog serve --id`) overrides the file's `id`, which may then be left out: one file
    serves every node (a Kubernetes ConfigMap; each pod passes its own name)."""
    try:
        doc = tomllib.loads(Path(path).read_text())
    except OSError as e:
        raise ConfigError(f"cannot read config {path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config {path} is not valid TOML: {e}") from None
    tokens = doc.get("token", [])
    if "secret" in doc or "admin_token" in doc or isinstance(tokens, list) and any(
            isinstance(t, dict) and "secret" in t for t in tokens):
        with contextlib.suppress(OSError):
            warn_if_others_read(path, os.stat(path).st_mode, "the config {path}, which holds a secret,")
    raft_defaults = doc.pop("raft", {})
    store_defaults = doc.pop("store", {})
    groups = []
    for g in doc.pop("group", []):
        raft = _sub(RaftConfig, {**raft_defaults, **g.pop("raft", {})}, "[raft]")
        store = _sub(StoreConfig, {**store_defaults, **g.pop("store", {})}, "[store]")
        ha_keys = {f.name for f in dataclasses.fields(HaConfig)}
        ha = _sub(HaConfig, {k: g.pop(k) for k in list(g) if k in ha_keys}, "[[group]]")
        peers = g.pop("peers", None)
        if isinstance(peers, str):
            peers = parse_peers(peers)
        groups.append(_sub(GroupConfig, {**g, "peers": peers or {}, "raft": raft, "store": store, "ha": ha},
                           "[[group]]"))
    if "id" in doc:
        doc["node_id"] = doc.pop("id")
    if node_id:
        doc["node_id"] = node_id
    if "node_id" not in doc:
        raise ConfigError(f"config {path} names no node: set id = \"...\" in it, or pass --id")
    if "secret_file" in doc:  # the secret in a file of its own (permissions of its own), not in this one
        doc["secret"] = read_secret_file(doc.pop("secret_file"))
    if "admin_token_file" in doc:
        doc["admin_token"] = read_secret_file(doc.pop("admin_token_file"))
    if isinstance(doc.get("admin_hosts"), list):
        doc["admin_hosts"] = tuple(doc["admin_hosts"])
    doc["tokens"] = tuple(_token(t) for t in doc.pop("token", []))
    doc["data_dir"] = Path(doc.get("data_dir", "data"))
    return _sub(NodeConfig, {**doc, "groups": tuple(groups)}, "the node settings")
