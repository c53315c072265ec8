"""quorumlog._hotpath, built from native/ (optional): see quorumlog.hotpath."""

from collections.abc import Mapping, Sequence

WALK_DONE: int
WALK_BLANK: int
WALK_BAD: int
WALK_UNSUPPORTED: int
CRC: str

def encode_run(bodies: Sequence[bytes], magic: int, first_index: int, term: int, first_pos: int, prev_chain: int,
               positions: list[int], metas: Mapping[int, bytes] | None = None) -> tuple[bytearray, bytearray, int]: ...
def verify_run(data: bytes | bytearray | memoryview, first_index: int, write_pos: int, prev_chain: int | None,
               end_term: int, segment_bytes: int,
               max_body: int) -> tuple[list[tuple[int, int, int, int, int, int]], list[tuple[int, bytes]]]: ...
def walk_segment(view: memoryview, rel: int, seg_bytes: int, base: int, index: int, last: int, start: int, used: int,
                 max_bytes: int, chain: int | None, control: bool, max_body: int,
                 runs: list[memoryview]) -> tuple[int, int, int, int, int | None]: ...
def crc32(data: bytes | bytearray | memoryview, value: int = 0, tables: bool = False) -> int: ...
