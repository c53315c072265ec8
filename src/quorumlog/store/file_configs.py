"""FileStore's configurations (mixed into it): the log's CONFIG entries kept in the `configs` file
(configs.py), taken back at open, written before an entry adds one and after a cut, expiry or reset."""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

from ..entry import Entry
from .configs import FILE as CONFIGS_FILE
from .configs import Config, ConfigLog, write_configs
from .vfs import NO_SPACE, OUT_OF_FILES, OsFiles


class FileConfigs:
    """`configs`, set_base_config and clear_base_config of a FileStore, and their file."""

    if TYPE_CHECKING:
        dir: str
        files: OsFiles
        notes: list[str]
        _begin: int
        _end: int
        _configs: ConfigLog
        _configs_saved: tuple[Config, ...] | None

        def get(self, index: int) -> Entry: ...
        def _check_writable(self) -> None: ...
        def _transient_or_fail(self, e: OSError) -> NoReturn: ...
        def _fail(self, e: OSError) -> NoReturn: ...

    def _recover_configs(self, saved: tuple[Config, ...] | None) -> None:
        """Take the `configs` file's entries that the recovered log holds (configs.py): the file is written
        before the entry that adds one, so it may name one a crash or a failed write kept out of the log,
        or one a cut removed before the file was rewritten. Rewritten when anything was dropped."""
        self._configs = ConfigLog(saved or ())
        self._configs_saved: tuple[Config, ...] | None = self._configs.entries  # what the file holds
        self.notes += self._configs.validate(self._begin, self._end, self._config_at)
        self._sync_configs()

    def _config_at(self, index: int) -> tuple[int, int, bytes]:
        e = self.get(index)
        return e.term, e.magic, e.body

    @property
    def configs(self) -> tuple[Config, ...]:
        return self._configs.entries

    def set_base_config(self, index: int, term: int, body: bytes) -> None:
        self._check_writable()
        before = self._configs.entries
        self._configs.set_base(index, term, body, self._begin)
        self._commit_configs(before)

    def clear_base_config(self) -> None:
        self._check_writable()
        before = self._configs.entries
        self._configs.clear_base(self._begin)
        self._commit_configs(before)

    # -- the configs file (configs.py) ----------------------------------------------------------
    def _write_configs(self) -> None:
        """Make the `configs` file name what `_configs` holds, unless it does already (OSError on failure:
        then what the file holds is not known, and the next call writes it)."""
        entries = self._configs.entries
        if entries is self._configs_saved or entries == self._configs_saved:
            return
        self._configs_saved = None
        write_configs(self.files, self.dir, entries)
        self._configs_saved = entries

    def _commit_configs(self, before: tuple[Config, ...]) -> None:
        """Before an entry or a base configuration is taken: write `configs` (changed from `before`),
        durably. On failure `_configs` goes back to `before` and nothing is taken: out of descriptors or
        space is transient (OutOfFilesError, DiskFullError), anything else fails the store."""
        try:
            self._write_configs()
        except OSError as e:
            self._configs.entries = before
            self._transient_or_fail(e)

    def _sync_configs(self) -> None:
        """After a removal took effect (or at open): rewrite `configs` without the entries that went. Out of
        descriptors or space, the file is left as it was and rewritten at the next change, or before an
        expiry or reset (a file naming entries the log no longer holds is harmless until then: open drops
        them); anything else fails the store."""
        try:
            self._write_configs()
        except OSError as e:
            if e.errno not in OUT_OF_FILES and e.errno not in NO_SPACE:
                self._fail(e)
            self.notes.append(f"could not rewrite {CONFIGS_FILE} ({e.strerror}): rewritten at the next change")
