"""Fixtures of the store suite."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from store_helpers import StoreFactory, small_config

from quorumlog.config import StoreConfig
from quorumlog.store.file_store import FileStore


@pytest.fixture(params=["memory", "file"])
def factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    f = StoreFactory(request.param, tmp_path / "g0" / "n0", small_config())
    yield f
    f.close_all()


@pytest.fixture
def file_factory(tmp_path: Path) -> Callable[..., FileStore]:
    """Open FileStores at tmp_path/store; every one opened is closed at teardown."""
    opened: list[FileStore] = []

    def make(config: StoreConfig | None = None, directory: str | os.PathLike[str] | None = None,
             **kwargs: Any) -> FileStore:
        s = FileStore(directory or tmp_path / "store", config or small_config(), **kwargs)
        opened.append(s)
        return s

    yield make  # type: ignore[misc]
    for s in opened:
        try:
            s.close()
        except Exception:
            s.abandon()
