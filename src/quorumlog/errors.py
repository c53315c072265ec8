"""Response codes (DLedger's numbers, on the wire) and the exception hierarchy."""

from __future__ import annotations

from enum import IntEnum


class ResponseCode(IntEnum):
    """Wire response codes; the numbers are DLedger's so tools and logs read alike."""

    UNKNOWN = -1
    SUCCESS = 200
    TIMEOUT = 300
    METADATA_ERROR = 301
    NETWORK_ERROR = 302
    UNSUPPORTED = 303
    UNKNOWN_GROUP = 400
    UNKNOWN_MEMBER = 401
    UNEXPECTED_MEMBER = 402
    EXPIRED_TERM = 403
    NOT_LEADER = 404
    NOT_FOLLOWER = 405
    INCONSISTENT_STATE = 406
    INCONSISTENT_TERM = 407
    INCONSISTENT_INDEX = 408
    INCONSISTENT_LEADER = 409
    INDEX_OUT_OF_RANGE = 410
    UNEXPECTED_ARGUMENT = 411
    REPEATED_REQUEST = 412
    REPEATED_PUSH = 413
    DISK_ERROR = 414
    DISK_FULL = 415
    TERM_NOT_READY = 416
    FALL_BEHIND_TOO_MUCH = 417
    TAKE_LEADERSHIP_FAILED = 418
    INDEX_LESS_THAN_LOCAL_BEGIN = 419
    REQUEST_WITH_EMPTY_BODYS = 420
    PUSH_REQUEST_IS_FULL = 421
    # The idempotent producer and conditional appends (quorumlog's own).
    OUT_OF_ORDER_SEQUENCE = 422  # an earlier request of the producer is not in the log: nothing written
    UNKNOWN_PRODUCER = 423  # a sequence above 0 from a producer the leader does not know (expired?)
    SEQUENCE_TOO_OLD = 424  # written once already, too long ago for its position to be known
    EXPECTED_END_MISMATCH = 425  # the group's last entry is not the one the request expected
    INTERNAL_ERROR = 500
    TERM_CHANGED = 501
    WAIT_QUORUM_ACK_TIMEOUT = 502
    LEADER_PENDING_FULL = 503
    ILLEGAL_MEMBER_STATE = 504
    LEADER_NOT_READY = 505
    LEADER_TRANSFERRING = 506
    TOO_MANY_CONNECTIONS = 507  # the node holds max_connections connections: try another node, or later
    OUT_OF_FILES = 508  # the node has no file descriptor left to open a segment: nothing written, retry
    PERMISSION_DENIED = 509  # the client's token lacks the permission for this group: nothing was done
    TOO_MANY_SUBSCRIPTIONS = 510  # the connection holds max_tails_per_connection TAILs: nothing was started
    CHANGE_IN_PROGRESS = 511  # a membership change is not committed yet: one at a time, nothing was done
    # Primary/backup mode (RocketMQ's names).
    FLUSH_SLAVE_TIMEOUT = 600
    SLAVE_NOT_AVAILABLE = 601


class QuorumLogError(Exception):
    """Base of every quorumlog error; `code` is the matching wire response code."""

    code: ResponseCode = ResponseCode.INTERNAL_ERROR

    def __init__(self, message: str = "", code: ResponseCode | None = None) -> None:
        super().__init__(message or self.__class__.__name__)
        if code is not None:
            self.code = code


class StoreError(QuorumLogError):
    """A store operation could not be carried out."""


class CorruptEntryError(StoreError):
    """Bytes that do not decode as a valid entry (bad magic, size, CRC, chain, index or position).

    `index` names the stored entry found bad, when the bytes were read from the store (None for bytes
    that came from elsewhere, e.g. a pushed batch): the caller may cut the log there (mark_damaged).
    """

    code = ResponseCode.INCONSISTENT_STATE

    def __init__(self, message: str = "", code: ResponseCode | None = None, *, index: int | None = None) -> None:
        super().__init__(message, code)
        self.index = index


class CorruptCommittedError(StoreError):
    """Corruption at or below the committed index: never dropped, the node must re-fetch the range.

    `first_bad_index` is the first index that could not be read back intact.
    """

    code = ResponseCode.DISK_ERROR

    def __init__(self, message: str, first_bad_index: int) -> None:
        super().__init__(message)
        self.first_bad_index = first_bad_index


class StoreLockedError(StoreError):
    """Another open store (`pid`, None when unknown) holds the store directory's lock."""

    def __init__(self, message: str, pid: int | None = None) -> None:
        super().__init__(message)
        self.pid = pid


class StoreStateError(StoreError):
    """The store's state files do not match its data (its term and vote, or its data, are lost): it must
    not open, because a replica that forgot what it promised could break a promise. The message tells the
    operator what to do."""


class DiskError(StoreError):
    """A write or sync failed. The store is failed-stop: after a failed fsync the page cache is untrusted."""

    code = ResponseCode.DISK_ERROR


class DiskFullError(StoreError):
    """Disk use is past disk_full_ratio; appends are refused until space returns."""

    code = ResponseCode.DISK_FULL


class OutOfFilesError(DiskFullError):
    """The process has no file descriptor left (EMFILE, ENFILE) to open the file a write needs: nothing
    was written, the store goes on, and the same write succeeds once descriptors are free again."""

    code = ResponseCode.OUT_OF_FILES


class IndexOutOfRangeError(StoreError):
    """The index is outside [begin_index, end_index]."""

    code = ResponseCode.INDEX_OUT_OF_RANGE


class InvalidArgumentError(QuorumLogError):
    """A caller passed something the operation cannot take (e.g. a body over the maximum)."""

    code = ResponseCode.UNEXPECTED_ARGUMENT


class ConfigError(QuorumLogError):
    """A configuration value is missing or invalid."""

    code = ResponseCode.UNEXPECTED_ARGUMENT


# --- errors a node answers with (raised by the clients) ---------------------------------------------
class RequestError(QuorumLogError):
    """A node refused or failed a request; `code` is its ResponseCode and `leader` its leader hint."""

    def __init__(self, message: str = "", code: ResponseCode | None = None, leader: str | None = None) -> None:
        super().__init__(message, code)
        self.leader = leader


class NotLeaderError(RequestError):
    """The node is not the group's leader (`leader` names the one it knows, if any)."""

    code = ResponseCode.NOT_LEADER


class UnknownGroupError(RequestError):
    """No such group on that node."""

    code = ResponseCode.UNKNOWN_GROUP


class UnknownMemberError(RequestError):
    """The named node is not a member of the group."""

    code = ResponseCode.UNKNOWN_MEMBER


class IndexExpiredError(RequestError):
    """The index is below the node's first index: its segment has expired."""

    code = ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN


class LeaderUnavailableError(RequestError):
    """No leader could be reached before the retry deadline (an election, a partition, nodes down)."""

    code = ResponseCode.LEADER_NOT_READY


class AppendUncertainError(RequestError):
    """The append may or may not have been committed (TERM_CHANGED, WAIT_QUORUM_ACK_TIMEOUT,
    FLUSH_SLAVE_TIMEOUT, connection
    lost after sending) and the retry deadline passed; retrying it may write it twice."""


class TransferError(RequestError):
    """A leadership transfer was refused or did not complete (FALL_BEHIND_TOO_MUCH, TAKE_LEADERSHIP_FAILED…)."""


class ReadBehindError(RequestError):
    """A read (READ, GET, TAIL) found no node that had committed as far as the client had already seen (its
    min_index) before its retry deadline: each answered FALL_BEHIND_TOO_MUCH or could not be reached. Nothing
    older was returned instead; `leader` is the last leader hint."""

    code = ResponseCode.FALL_BEHIND_TOO_MUCH


class ExpectedEndMismatchError(RequestError):
    """A conditional append found another last entry in the group than it expected: nothing was written.
    `actual_end` is the index of the group's last client entry (-1: none)."""

    code = ResponseCode.EXPECTED_END_MISMATCH

    def __init__(self, message: str = "", code: ResponseCode | None = None, leader: str | None = None,
                 actual_end: int = -1) -> None:
        super().__init__(message, code, leader)
        self.actual_end = actual_end


class BackupUnavailableError(RequestError):
    """A SYNC primary/backup group has fewer than min_in_sync backups in sync (SLAVE_NOT_AVAILABLE): the
    append was refused and nothing was written."""


class PromoteError(RequestError):
    """A promotion was refused: the target is behind another member (a backup's log, or what a live
    primary acknowledged), the epoch is stale, or the target cannot be reached."""


class SequenceError(RequestError):
    """The idempotent producer's sequence was refused (OUT_OF_ORDER_SEQUENCE: an earlier request is not in
    the log; UNKNOWN_PRODUCER: the producer is unknown or expired; SEQUENCE_TOO_OLD: written once, too long
    ago to know where). Nothing was written by this request."""


_BY_CODE: dict[ResponseCode, type[QuorumLogError]] = {
    ResponseCode.NOT_LEADER: NotLeaderError,
    ResponseCode.UNKNOWN_GROUP: UnknownGroupError,
    ResponseCode.UNKNOWN_MEMBER: UnknownMemberError,
    ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN: IndexExpiredError,
    ResponseCode.INDEX_OUT_OF_RANGE: IndexOutOfRangeError,
    ResponseCode.UNEXPECTED_ARGUMENT: InvalidArgumentError,
    ResponseCode.REQUEST_WITH_EMPTY_BODYS: InvalidArgumentError,
    ResponseCode.DISK_FULL: DiskFullError,
    ResponseCode.DISK_ERROR: DiskError,
    ResponseCode.FALL_BEHIND_TOO_MUCH: TransferError,
    ResponseCode.TAKE_LEADERSHIP_FAILED: TransferError,
    ResponseCode.EXPECTED_END_MISMATCH: ExpectedEndMismatchError,
    ResponseCode.OUT_OF_ORDER_SEQUENCE: SequenceError,
    ResponseCode.UNKNOWN_PRODUCER: SequenceError,
    ResponseCode.SEQUENCE_TOO_OLD: SequenceError,
    ResponseCode.SLAVE_NOT_AVAILABLE: BackupUnavailableError,
    ResponseCode.EXPIRED_TERM: PromoteError,
}


def error_for(code: int, reason: str = "", leader: str | None = None, detail: int | None = None) -> QuorumLogError:
    """The typed exception for a node's non-SUCCESS answer (`detail`: the error's number, if any)."""
    try:
        rc = ResponseCode(code)
    except ValueError:
        rc = ResponseCode.UNKNOWN
    message = f"{rc.name}: {reason}" if reason else rc.name
    cls = _BY_CODE.get(rc, RequestError)
    if cls is ExpectedEndMismatchError:
        return ExpectedEndMismatchError(message, rc, leader, -1 if detail is None else detail)
    if issubclass(cls, RequestError):
        return cls(message, rc, leader)
    return cls(message, rc)
