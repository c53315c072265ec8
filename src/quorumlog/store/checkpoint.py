"""The small state files of a store: `checkpoint`, `currterm` and `identity`, each replaced atomically.

All are short `key=value` text files (as DLedger's checkpoint is) ending in a CRC line, so a file
damaged in any other way than by a torn rename is recognised rather than misread.
"""

from __future__ import annotations

import dataclasses
import os
import zlib
from dataclasses import dataclass

from ..errors import InvalidArgumentError, StoreError, StoreStateError
from .vfs import OsFiles


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Where the log begins, how far it was durable and committed, and a recovery anchor:
    a committed entry (index, pos, chain CRC) from which the tail scan starts."""

    begin_index: int = 0
    begin_pos: int = 0
    begin_chain: int = 0  # chain CRC of the entry before begin_index (0 for a log from index 0)
    begin_term: int = 0  # term of the entry before begin_index (0 for a log from index 0)
    end_index: int = -1
    committed_index: int = -1
    anchor_index: int = -1
    anchor_pos: int = -1
    anchor_chain: int = 0
    tail_cut: int = -1  # the first entry a recovery cut as a torn tail, until the node made it good (-1: none)


# Fields a checkpoint written by an older version lacks, read as their defaults.
_OPTIONAL = frozenset({"begin_term", "tail_cut"})
_WHAT = {"checkpoint": "log bounds and committed index", "currterm": "term and vote", "identity": "group identity"}


def move_aside(directory: str) -> str:
    """The operator's way out when a store's state is lost (docs/operations.md)."""
    return (f"Move the whole store directory {directory} aside (keep it for inspection) and restart the node: "
            "it rejoins its group as a replacement replica and copies the log from the other members "
            "(see docs/operations.md).")


def check_token(value: str, what: str) -> None:
    """A value stored in a state file: non-empty, one line, no '=' and no NUL."""
    if not value or value.splitlines() != [value] or "=" in value or "\x00" in value:
        raise InvalidArgumentError(f"invalid {what} {value!r}: must be non-empty, one line, without '=' or NUL")


def _encode(fields: dict[str, object]) -> bytes:
    text = "".join(f"{k}={'' if v is None else v}\n" for k, v in fields.items())
    return (text + f"crc={zlib.crc32(text.encode())}\n").encode()


def read_if_present(path: str) -> bytes | None:
    """The bytes of the file at `path`; None when there is none (StoreError when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StoreError(f"cannot read {path}: {e.strerror}") from None


def _decode(path: str) -> dict[str, str] | None:
    raw = read_if_present(path)
    if raw is None:
        return None
    try:
        text = raw.decode()
        body, _, last = text.rstrip("\n").rpartition("\n")
        body += "\n"
        key, _, crc = last.partition("=")
        if key != "crc" or int(crc) != zlib.crc32(body.encode()):
            raise ValueError("CRC mismatch")
        return dict(line.split("=", 1) for line in body.splitlines())
    except ValueError as e:
        raise _damaged(path, str(e)) from None


def _damaged(path: str, problem: str) -> StoreStateError:
    directory, name = os.path.split(path)
    return StoreStateError(f"{path} is damaged ({problem}): this replica's {_WHAT.get(name, name)} cannot be "
                           f"trusted, so the store will not open. {move_aside(directory)}")


def read_checkpoint(directory: str) -> Checkpoint:
    fields = _decode(os.path.join(directory, "checkpoint"))
    if fields is None:
        return Checkpoint()
    try:
        return Checkpoint(**{f.name: int(fields[f.name]) for f in dataclasses.fields(Checkpoint)
                             if f.name in fields or f.name not in _OPTIONAL})
    except (KeyError, ValueError) as e:
        raise _damaged(os.path.join(directory, "checkpoint"), f"lacks or garbles {e}") from None


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
        raise _damaged(os.path.join(directory, "currterm"), f"lacks or garbles {e}") from None


def write_stable(files: OsFiles, directory: str, state: StableState) -> None:
    """Persist `currterm`; voted_for may be a member id or "*" (abstained: the term's vote counts as cast)."""
    if state.voted_for is not None:
        check_token(state.voted_for, "member id")
    files.write_atomic(os.path.join(directory, "currterm"), _encode(
        {"term": state.term, "voted_for": state.voted_for, "recovering": int(state.recovering)}))


def read_identity(directory: str) -> str | None:
    """The recorded group identity, None when the store has no `identity` file."""
    fields = _decode(os.path.join(directory, "identity"))
    if fields is None:
        return None
    identity = fields.get("identity", "")
    if not identity:
        raise _damaged(os.path.join(directory, "identity"), "lacks the identity")
    return identity


def write_identity(files: OsFiles, directory: str, identity: str) -> None:
    check_token(identity, "identity")
    files.write_atomic(os.path.join(directory, "identity"), _encode({"identity": identity}))
