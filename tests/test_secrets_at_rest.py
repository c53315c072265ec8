"""Secrets at rest: files holding a secret are written 0600 (an existing file's mode is fixed too), a store's
directories are made 0700 whatever the umask, a secret file others can read draws a warning naming the
chmod to run, and no config or client object shows a secret in its repr."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from quorumlog.client import AsyncClient, Client
from quorumlog.config import GroupConfig, NodeConfig, TokenConfig, load_node_config, read_secret_file
from quorumlog.server.cluster import LocalCluster
from quorumlog.spark.options import Credentials
from quorumlog.store.file_store import FileStore, store_dir

SECRET = "s3cret-at-rest-9f2c"
TOKENS = [{"name": "reader", "secret": "r-s3cret-71ab", "permissions": {"g0": ["read"]}}]


def mode(path: Path | str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask, so that a mode of 0644/0755 would show if a file or directory followed it."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_local_cluster_writes_every_secret_file_0600_and_fixes_an_existing_ones_mode(tmp_path: Path,
                                                                                       umask_022: None) -> None:
    c = LocalCluster(tmp_path / "c", 2, secret=SECRET, tokens=TOKENS)
    for node in c.nodes:
        assert "r-s3cret-71ab" in node.config_path.read_text()  # the token's secret is in node.toml
        assert mode(node.config_path) == 0o600, oct(mode(node.config_path))
        assert mode(node.data_dir) == 0o700, oct(mode(node.data_dir))
    assert mode(c.secret_path) == 0o600
    # Files left readable by others (an older version wrote node.toml 0644) are fixed when rewritten.
    for path in [c.secret_path, *(n.config_path for n in c.nodes)]:
        os.chmod(path, 0o644)
    c.write_configs()
    for path in [c.secret_path, *(n.config_path for n in c.nodes)]:
        assert mode(path) == 0o600, (path, oct(mode(path)))
    assert c.secret_path.read_text() == SECRET + "\n"
    c.check_configs()  # and they still load


def test_a_store_makes_its_directories_0700(tmp_path: Path, umask_022: None) -> None:
    data_dir = tmp_path / "data"
    d = store_dir(data_dir, "g0", "n0")
    s = FileStore(d)
    try:
        for path in (data_dir, data_dir / "g0", Path(d), Path(d) / "data", Path(d) / "index"):
            assert mode(path) == 0o700, (path, oct(mode(path)))
    finally:
        s.close()


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "quorumlog.config" and r.levelno == logging.WARNING]


def test_read_secret_file_warns_when_others_can_read_it(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    f = tmp_path / "secret"
    f.write_text(SECRET + "\n")
    os.chmod(f, 0o644)
    with caplog.at_level(logging.WARNING, logger="quorumlog.config"):
        assert read_secret_file(f) == SECRET  # a warning, not an error
    (msg,) = _warnings(caplog)
    assert str(f) in msg and f"chmod 600 {f}" in msg and SECRET not in msg
    caplog.clear()
    os.chmod(f, 0o640)  # group read is enough to warn
    with caplog.at_level(logging.WARNING, logger="quorumlog.config"):
        read_secret_file(f)
    assert len(_warnings(caplog)) == 1
    caplog.clear()
    os.chmod(f, 0o600)
    with caplog.at_level(logging.WARNING, logger="quorumlog.config"):
        read_secret_file(f)
    assert _warnings(caplog) == []


def test_a_config_holding_a_secret_warns_when_others_can_read_it(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    cfg = tmp_path / "node.toml"
    cfg.write_text(f'id = "n0"\nsecret = "{SECRET}"\n[[group]]\nname = "g0"\npeers = "n0=127.0.0.1:9000"\n')
    os.chmod(cfg, 0o644)
    with caplog.at_level(logging.WARNING, logger="quorumlog.config"):
        assert load_node_config(cfg).secret == SECRET
    (msg,) = _warnings(caplog)
    assert f"chmod 600 {cfg}" in msg


def test_reprs_show_no_secret() -> None:
    token = TokenConfig("reader", "r-s3cret-71ab", {"g0": frozenset({"read"})})
    node = NodeConfig("n0", Path("data"), (GroupConfig("g0", {"n0": "127.0.0.1:9000"}),), secret=SECRET,
                      tokens=(token,))
    for obj in (token, node, Credentials(secret=SECRET)):
        text = repr(obj)
        assert SECRET not in text and "r-s3cret-71ab" not in text, text
    assert "reader" in repr(token) and "n0" in repr(node)  # the rest still shows


def test_local_cluster_repr_shows_no_secret(tmp_path: Path) -> None:
    c = LocalCluster(tmp_path / "c", 1, secret=SECRET, tokens=TOKENS)
    assert SECRET not in repr(c) and "r-s3cret-71ab" not in repr(c)


def test_clients_repr_shows_no_secret() -> None:
    with Client("127.0.0.1:1", secret=SECRET, token="reader") as c:
        assert SECRET not in repr(c) and SECRET not in repr(c.aio)
    assert SECRET not in repr(AsyncClient("127.0.0.1:1", secret=SECRET))
