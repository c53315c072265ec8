"""The primary/backup settings of a [[group]] table: names, defaults, and the errors of a bad config."""

from __future__ import annotations

from pathlib import Path

import pytest

from quorumlog.config import load_node_config
from quorumlog.errors import ConfigError
from quorumlog.ha.controller_core import ranked

BASE = 'id = "n0"\ndata_dir = "d"\n'
PEERS = 'peers = "n0=127.0.0.1:1,n1=127.0.0.1:2,n2=127.0.0.1:3"\n'


def _load(tmp_path: Path, groups: str) -> object:
    p = tmp_path / "node.toml"
    p.write_text(BASE + groups)
    return load_node_config(p)


def test_a_primary_backup_group_reads_its_keys_and_defaults(tmp_path: Path) -> None:
    cfg = _load(tmp_path, '[[group]]\nname = "g0"\n' + PEERS + 'replication = "primary-backup"\nprimary = "n1"\n'
                          'ack = "async"\nha_transfer_batch_bytes = 65536\n'
                          '[[group]]\nname = "g1"\n' + PEERS)
    g0, g1 = cfg.groups  # type: ignore[attr-defined]
    assert g0.ha.primary_backup and g0.ha.primary == "n1" and g0.ha.ack == "async"
    assert g0.ha.ha_transfer_batch_bytes == 65536 and g0.ha.min_in_sync == 1
    assert g0.ha.controller is None and not g0.ha.failover
    assert not g1.ha.primary_backup and g1.ha.replication == "raft"


def test_a_controller_turns_automatic_failover_on_unless_told_otherwise(tmp_path: Path) -> None:
    ctl = '[[group]]\nname = "ctl"\n' + PEERS
    on = _load(tmp_path, ctl + '[[group]]\nname = "g0"\n' + PEERS +
               'replication = "primary-backup"\nprimary = "n0"\ncontroller = "ctl"\n')
    assert on.groups[1].ha.failover  # type: ignore[attr-defined]
    off = _load(tmp_path, ctl + '[[group]]\nname = "g0"\n' + PEERS +
                'replication = "primary-backup"\nprimary = "n0"\ncontroller = "ctl"\nauto_failover = false\n')
    assert not off.groups[1].ha.failover  # type: ignore[attr-defined]


@pytest.mark.parametrize(("extra", "message"), [
    ('replication = "primary-backup"\n', "needs primary"),
    ('replication = "primary-backup"\nprimary = "n9"\n', "needs primary"),
    ('replication = "primary-backup"\nprimary = "n0"\nmin_in_sync = 3\n', "exceeds its 2 backups"),
    ('replication = "chain"\n', "replication must be"),
    ('replication = "primary-backup"\nprimary = "n0"\nack = "quorum"\n', "ack must be"),
    ('primary = "n0"\n', "primary-backup groups only"),
    ('replication = "primary-backup"\nprimary = "n0"\ncontroller = "nope"\n', "must be a Raft group"),
    ('replication = "primary-backup"\nprimary = "n0"\nha_heartbeat_interval_ms = 0\n', "must be positive"),
])
def test_bad_primary_backup_settings_are_refused_with_a_clear_error(tmp_path: Path, extra: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, '[[group]]\nname = "g0"\n' + PEERS + extra)


def test_a_lone_primary_needs_async_or_min_in_sync_0(tmp_path: Path) -> None:
    """min_in_sync bounds SYNC appends only: a primary without backups may run ASYNC (it once refused to
    start), and SYNC with min_in_sync = 0; SYNC by default is refused with the way out in the message."""
    lone = '[[group]]\nname = "g0"\npeers = "n0=127.0.0.1:1"\nreplication = "primary-backup"\nprimary = "n0"\n'
    assert _load(tmp_path, lone + 'ack = "async"\n').groups[0].ha.ack == "async"  # type: ignore[attr-defined]
    assert _load(tmp_path, lone + 'min_in_sync = 0\n').groups[0].ha.min_in_sync == 0  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match='exceeds its 0 backups.*min_in_sync = 0, or ack = "async"'):
        _load(tmp_path, lone)


def test_a_controller_must_hold_every_member(tmp_path: Path) -> None:
    ctl = '[[group]]\nname = "ctl"\npeers = "n0=127.0.0.1:1,n1=127.0.0.1:2"\n'
    with pytest.raises(ConfigError, match=r"controller 'ctl' must have exactly the same members \(n2 in 'g0' but not"):
        _load(tmp_path, ctl + '[[group]]\nname = "g0"\n' + PEERS +
              'replication = "primary-backup"\nprimary = "n0"\ncontroller = "ctl"\n')


def test_a_controller_with_more_members_than_its_group_is_refused(tmp_path: Path) -> None:
    """A controller group holding a member the primary/backup group lacks is refused: a node manages only
    the groups it hosts, so while that member led the controller group nobody would fail the group over.
    The error names both groups and the member; the same members (in any order) are accepted."""
    ctl = '[[group]]\nname = "ctl"\npeers = "n0=127.0.0.1:1,n1=127.0.0.1:2,n2=127.0.0.1:3,n3=127.0.0.1:4"\n'
    pb = 'replication = "primary-backup"\nprimary = "n0"\ncontroller = "ctl"\n'
    with pytest.raises(ConfigError, match=r"group 'g0'.* controller 'ctl'.*n3.* not in 'g0'"):
        _load(tmp_path, ctl + '[[group]]\nname = "g0"\n' + PEERS + pb)
    same = '[[group]]\nname = "ctl"\npeers = "n2=127.0.0.1:3,n0=127.0.0.1:1,n1=127.0.0.1:2"\n'
    cfg = _load(tmp_path, same + '[[group]]\nname = "g0"\n' + PEERS + pb)
    assert cfg.groups[1].ha.failover  # type: ignore[attr-defined]


def test_priority_and_preferred_primary_are_read_and_checked(tmp_path: Path) -> None:
    ctl = '[[group]]\nname = "ctl"\n' + PEERS
    pb = '[[group]]\nname = "g0"\n' + PEERS + 'replication = "primary-backup"\nprimary = "n0"\n'
    cfg = _load(tmp_path, ctl + pb + 'controller = "ctl"\npreferred_primary = "n1"\npriority = { n2 = 3 }\n')
    g0 = cfg.groups[1]  # type: ignore[attr-defined]
    assert g0.ha.preferred_primary == "n1" and g0.ha.priority == {"n2": 3}
    for extra, message in (('preferred_primary = "n9"\n', "preferred_primary 'n9' is not one of its peers"),
                           ('priority = { n9 = 1 }\n', "priority must map its peers to integers"),
                           ('priority = { n1 = "high" }\n', "priority must map its peers to integers")):
        with pytest.raises(ConfigError, match=message):
            _load(tmp_path, ctl + pb + 'controller = "ctl"\n' + extra)
    with pytest.raises(ConfigError, match="need a controller"):
        _load(tmp_path, pb + 'preferred_primary = "n1"\n')


def test_the_controller_elects_by_priority_then_by_id() -> None:
    assert ranked(["n2", "n0", "n1"], {}) == ["n0", "n1", "n2"]
    assert ranked(["n2", "n0", "n1"], {"n2": 3, "n1": -1}) == ["n2", "n0", "n1"]
