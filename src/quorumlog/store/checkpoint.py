"""The two small state files of a store: `checkpoint` and `currterm`, each replaced atomically.

Both are short `key=value` text files (as DLedger's checkpoint is) ending in a CRC line, so a file
damaged in any other way than by a torn rename is recognised rather than misread.
"""

from __future__ import annotations

import dataclasses
import os
import zlib
from dataclasses import dataclass

from ..errors import StoreError
from .vfs import OsFiles


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Where the log begins, how far it was durable and committed, and a recovery anchor:
    a committed entry (index, pos, chain CRC) from which the tail scan starts."""

    begin_index: int = 0
    begin_pos: int = 0
    begin_chain: int = 0  # chain CRC of the entry before begin_index (0 for a log from index 0)
    end_index: int = -1
    committed_index: int = -1
    anchor_index: int = -1
    anchor_pos: int = -1
    anchor_chain: int = 0


def _encode(fields: dict[str, object]) -> bytes:
    text = "".join(f"{k}={'' if v is None else v}\n" for k, v in fields.items())
    return (text + f"crc={zlib.crc32(text.encode())}\n").encode()


def _decode(path: str) -> dict[str, str] | None:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StoreError(f"cannot read {path}: {e.strerror}") from None
    try:
        text = raw.decode()
        body, _, last = text.rstrip("\n").rpartition("\n")
        body += "\n"
        key, _, crc = last.partition("=")
        if key != "crc" or int(crc) != zlib.crc32(body.encode()):
            raise ValueError("CRC mismatch")
        return dict(line.split("=", 1) for line in body.splitlines())
    except ValueError as e:
        raise StoreError(f"{path} is damaged ({e}); remove it to rebuild from the data files") from None


def read_checkpoint(directory: str) -> Checkpoint:
    fields = _decode(os.path.join(directory, "checkpoint"))
    if fields is None:
        return Checkpoint()
    try:
        return Checkpoint(**{f.name: int(fields[f.name]) for f in dataclasses.fields(Checkpoint)})
    except (KeyError, ValueError) as e:
        raise StoreError(f"{directory}/checkpoint lacks or garbles {e}") from None


def write_checkpoint(files: OsFiles, directory: str, cp: Checkpoint) -> None:
    files.write_atomic(os.path.join(directory, "checkpoint"), _encode(dataclasses.asdict(cp)))


@dataclass(frozen=True, slots=True)
class StableState:
    """What `currterm` holds: the current term, the vote cast in it, and whether the node is in
    protocol-aware recovery (it lost committed entries and may neither vote nor lead until it has
    them again)."""

    term: int = 0
    voted_for: str | None = None
    recovering: bool = False


def read_stable(directory: str) -> StableState:
    fields = _decode(os.path.join(directory, "currterm"))
    if fields is None:
        return StableState()
    try:
        return StableState(int(fields["term"]), fields["voted_for"] or None, fields.get("recovering") == "1")
    except (KeyError, ValueError) as e:
        raise StoreError(f"{directory}/currterm lacks or garbles {e}") from None


def write_stable(files: OsFiles, directory: str, state: StableState) -> None:
    voted_for = state.voted_for
    if voted_for is not None and (not voted_for or any(c in voted_for for c in "\n\r=\x00")):
        raise StoreError(f"invalid member id {voted_for!r}")
    files.write_atomic(os.path.join(directory, "currterm"), _encode(
        {"term": state.term, "voted_for": voted_for, "recovering": int(state.recovering)}))
