"""msgpack bodies with strict validation: a body is a msgpack array checked against a small schema.

A schema is an ordered table of (field name, field type). Decoding checks arity and every type; any
mismatch, and any bytes msgpack cannot decode, raise ProtocolError and nothing else (a field of the wrong
type or range as FieldTypeError or FieldValueError, which a caller encoding its arguments can also catch
as TypeError or ValueError). `bytes` fields go out as msgpack bin straight from the caller's
bytes/bytearray/memoryview (packed once into the body) and come back as `bytes` (msgpack copies a bin
value once when decoding).
"""

from __future__ import annotations

import math
from collections import namedtuple
from collections.abc import Sequence
from typing import Any

import msgpack

from ..errors import ResponseCode
from .errors import FieldTypeError, FieldValueError, ProtocolError, ResponseError
from .frames import GATHER_BYTES, Body, Buffer

_packb = msgpack.packb
_SUCCESS_CODE = int(ResponseCode.SUCCESS)
_unpackb = msgpack.unpackb

I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
U64_MAX = (1 << 64) - 1


class FieldType:
    """Checks one value; subclasses say what they accept."""

    __slots__ = ()
    name = "any"

    def check(self, value: Any, where: str) -> None:
        """Raise ProtocolError if value does not fit."""

    def test(self, var: str, ns: dict[str, Any]) -> str:
        """A Python expression, true exactly when the value named `var` passes `check` (and raising
        nothing `check` would not): a schema compiles its fields' tests into one function. This default
        calls `check`; the common types inline theirs."""
        name = f"_check{len(ns)}"
        ns[name] = self.check
        return f"_check_passes({name}, {var})"

    def __repr__(self) -> str:
        return self.name


def _bad(where: str, expected: str, value: Any) -> ProtocolError:
    return FieldTypeError(f"{where}: expected {expected}, got {type(value).__name__}")


class Int(FieldType):
    """An integer (never a bool) within [lo, hi]."""

    __slots__ = ("lo", "hi", "name")

    def __init__(self, lo: int = I64_MIN, hi: int = I64_MAX, name: str = "int") -> None:
        self.lo, self.hi, self.name = lo, hi, name

    def check(self, value: Any, where: str) -> None:
        if type(value) is not int:
            raise _bad(where, self.name, value)
        if not self.lo <= value <= self.hi:
            raise FieldValueError(f"{where}: {value} outside {self.lo}..{self.hi}")

    def test(self, var: str, ns: dict[str, Any]) -> str:
        return f"type({var}) is int and {self.lo} <= {var} <= {self.hi}"


class Float(FieldType):
    """A finite float (ints accepted: msgpack keeps 1.0 and 1 apart, callers need not)."""

    __slots__ = ()
    name = "float"

    def check(self, value: Any, where: str) -> None:
        if type(value) not in (float, int) or not math.isfinite(value):
            raise _bad(where, self.name, value)

    def test(self, var: str, ns: dict[str, Any]) -> str:
        return f"(type({var}) is float or type({var}) is int) and _isfinite({var})"


class Str(FieldType):
    """A UTF-8 string of at most max_len characters."""

    __slots__ = ("max_len",)
    name = "str"

    def __init__(self, max_len: int = 1 << 16) -> None:
        self.max_len = max_len

    def check(self, value: Any, where: str) -> None:
        if type(value) is not str:
            raise _bad(where, self.name, value)
        if len(value) > self.max_len:
            raise FieldValueError(f"{where}: string longer than {self.max_len}")

    def test(self, var: str, ns: dict[str, Any]) -> str:
        return f"type({var}) is str and len({var}) <= {self.max_len}"


class Bytes(FieldType):
    """Binary data (msgpack bin); bytes-like values are accepted when encoding."""

    __slots__ = ("max_len",)
    name = "bytes"

    def __init__(self, max_len: int | None = None) -> None:
        self.max_len = max_len

    def check(self, value: Any, where: str) -> None:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise _bad(where, self.name, value)
        if self.max_len is not None and len(value) > self.max_len:
            raise FieldValueError(f"{where}: {len(value)} bytes, more than {self.max_len}")

    def test(self, var: str, ns: dict[str, Any]) -> str:
        bound = "" if self.max_len is None else f" and len({var}) <= {self.max_len}"
        return f"isinstance({var}, _BYTES_LIKE){bound}"


class Bool(FieldType):
    __slots__ = ()
    name = "bool"

    def check(self, value: Any, where: str) -> None:
        if type(value) is not bool:
            raise _bad(where, self.name, value)

    def test(self, var: str, ns: dict[str, Any]) -> str:
        return f"type({var}) is bool"


class Opt(FieldType):
    """None or a value of the inner type."""

    __slots__ = ("inner", "name")

    def __init__(self, inner: FieldType) -> None:
        self.inner = inner
        self.name = f"{inner.name}|None"

    def check(self, value: Any, where: str) -> None:
        if value is not None:
            self.inner.check(value, where)

    def test(self, var: str, ns: dict[str, Any]) -> str:
        return f"{var} is None or ({self.inner.test(var, ns)})"


class List(FieldType):
    """An array of values of one type, at most max_len long."""

    __slots__ = ("item", "max_len", "name")

    def __init__(self, item: FieldType, max_len: int = 1 << 20) -> None:
        self.item, self.max_len = item, max_len
        self.name = f"list[{item.name}]"

    def check(self, value: Any, where: str) -> None:
        if not isinstance(value, list | tuple):
            raise _bad(where, self.name, value)
        if len(value) > self.max_len:
            raise FieldValueError(f"{where}: more than {self.max_len} items")
        check = self.item.check
        for i, v in enumerate(value):
            check(v, f"{where}[{i}]")

    def test(self, var: str, ns: dict[str, Any]) -> str:
        item = f"_item{len(ns)}"
        ns[item] = None  # (reserves the name: a list of lists gets a variable per level)
        return (f"isinstance({var}, _SEQUENCE) and len({var}) <= {self.max_len} "
                f"and all({self.item.test(item, ns)} for {item} in {var})")


class Map(FieldType):
    """A map with string keys and values of one type."""

    __slots__ = ("value", "name")

    def __init__(self, value: FieldType) -> None:
        self.value = value
        self.name = f"map[str, {value.name}]"

    def check(self, value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise _bad(where, self.name, value)
        check = self.value.check
        for k, v in value.items():
            if type(k) is not str:
                raise _bad(f"{where} key", "str", k)
            check(v, f"{where}[{k!r}]")


class Any_(FieldType):
    """Any msgpack value except ext types (for free-form status documents)."""

    __slots__ = ()
    name = "any"

    def check(self, value: Any, where: str) -> None:
        if isinstance(value, msgpack.ExtType | msgpack.Timestamp):
            raise _bad(where, "plain msgpack value", value)
        if isinstance(value, list | tuple):
            for i, v in enumerate(value):
                self.check(v, f"{where}[{i}]")
        elif isinstance(value, dict):
            for k, v in value.items():
                self.check(k, f"{where} key")
                self.check(v, f"{where}[{k!r}]")


# Shared instances for the common cases.
INT = Int()
U8 = Int(0, 255, "u8")
U16 = Int(0, 0xFFFF, "u16")
U32 = Int(0, 0xFFFFFFFF, "u32")
U64 = Int(0, U64_MAX, "u64")
INDEX = Int(-1, I64_MAX, "index")  # -1: an empty log's end index
FLOAT = Float()
STR = Str()
BYTES = Bytes()
BOOL = Bool()
ANY = Any_()
OPT_STR = Opt(STR)


_LARGE = GATHER_BYTES  # bytes fields from this size are left as they are, between their neighbours' bytes


def _pack_parts(values: tuple[Any, ...]) -> list[Buffer]:
    """packb(values) as parts, large bytes fields (a READ answer's entries, a push's) left as they are
    rather than copied twice (msgpack packs into a buffer of its own, then copies that into the bytes it
    returns): joined, the same bytes as packb."""
    n = len(values)
    parts: list[Buffer] = []
    small: list[bytes] = [bytes((0x90 | n,)) if n < 16 else b"\xdc" + n.to_bytes(2, "big")]
    for v in values:
        size = v.nbytes if isinstance(v, memoryview) else len(v) if isinstance(v, bytes | bytearray) else -1
        if size >= _LARGE:
            small.append(b"\xc6" + size.to_bytes(4, "big"))  # bin 32, as msgpack packs 64 KiB and more
            parts += (b"".join(small), v)
            small = []
        else:
            small.append(_packb(v))
    if small:
        parts.append(b"".join(small))
    return parts


def _has_large(values: tuple[Any, ...], at: tuple[int, ...]) -> bool:
    for i in at:
        v = values[i]
        if isinstance(v, bytes | bytearray | memoryview) and len(v) >= _LARGE:
            return True
    return False


def _check_passes(check: Any, value: Any) -> bool:
    """Does `value` pass `check` (a field type without an expression of its own)?"""
    try:
        check(value, "")
    except ProtocolError:
        return False
    return True


def _compile_test(types: tuple[FieldType, ...]) -> Any:
    """One function testing a tuple of values against `types`: True when each passes its type's check.

    Generated once per schema from the types' `test` expressions, so the values of a message are tested
    in one call rather than one call per field (a node receives a few messages per append). False sends
    the caller to the field-by-field checks, which name what does not fit; a list of values goes there
    too (msgpack decodes arrays as tuples, and encoders pass tuples)."""
    ns: dict[str, Any] = {"_check_passes": _check_passes, "_isfinite": math.isfinite,
                          "_BYTES_LIKE": (bytes, bytearray, memoryview), "_SEQUENCE": (list, tuple)}
    names = [f"v{i}" for i in range(len(types))]
    tests = " and ".join(f"({t.test(v, ns)})" for t, v in zip(types, names, strict=True)) or "True"
    unpack_line = f"    {', '.join(names)}, = values\n" if names else ""
    source = (f"def passes(values):\n    if type(values) is not tuple or len(values) != {len(types)}:\n"
              f"        return False\n{unpack_line}    return {tests}\n")
    exec(source, ns)  # noqa: S102 (the source is made here, from the types' own expressions)
    return ns["passes"]


class Schema:
    """The body of one (operation, kind): an ordered tuple of (name, FieldType).

    `decode` returns a namedtuple named after the schema, so fields read as attributes.
    For responses, `generic_errors=True` means a non-SUCCESS code is answered with ERROR's layout
    (code, reason, leader) instead of this schema's; see decode_response().
    `defaults` are the values of the last len(defaults) fields when a body ends before them: fields added in
    a later protocol version, which a peer of an earlier one neither sends nor reads (encode them only on a
    connection of the version that added them).
    """

    __slots__ = ("name", "fields", "types", "record", "generic_errors", "defaults", "_bytes_at", "_checks",
                 "_passes")

    def __init__(self, name: str, fields: Sequence[tuple[str, FieldType]], *,
                 generic_errors: bool = True, defaults: tuple[Any, ...] = ()) -> None:
        self.name = name
        self.fields = tuple(fields)
        if len(defaults) > len(self.fields):
            raise ValueError(f"{name}: more defaults than fields")
        self.defaults = defaults
        self.types = tuple(t for _, t in self.fields)
        self.record: Any = namedtuple(name, [n for n, _ in self.fields])  # type: ignore[misc]
        self.generic_errors = generic_errors
        self._bytes_at = tuple(i for i, t in enumerate(self.types) if isinstance(t, Bytes))
        # (check, where) per field, made once: what names the field that does not fit.
        self._checks = tuple((t.check, f"{name}.{n}") for n, t in self.fields)
        self._passes = _compile_test(self.types)

    def __repr__(self) -> str:
        return f"Schema({self.name}: {', '.join(f'{n}: {t.name}' for n, t in self.fields)})"

    def validate(self, values: Sequence[Any]) -> Any:
        """Check already-unpacked values; return them as this schema's record."""
        self.check(values)
        if len(values) < len(self.fields):  # (check allows only a shorter body the defaults complete)
            values = (*values, *self.defaults[len(values) - len(self.fields):])
        return self.record._make(values)

    def check(self, values: Sequence[Any]) -> None:
        """Raise ProtocolError, naming the first field that does not fit, unless `values` fit (a body that
        ends before fields with defaults fits too)."""
        if self._passes(values):  # one compiled expression: the common case, every message received
            return
        if not isinstance(values, list | tuple):
            raise ProtocolError(f"{self.name}: body is not an array")
        n = len(self._checks)
        if not n - len(self.defaults) <= len(values) <= n:
            expected = f"{n - len(self.defaults)} to {n}" if self.defaults else f"{n}"
            raise ProtocolError(f"{self.name}: expected {expected} fields, got {len(values)}")
        for (check, where), v in zip(self._checks, values, strict=False):  # lengths compared above
            check(v, where)

    def encode(self, *values: Any) -> bytes:
        """Validate and pack the values; ProtocolError if they do not fit the schema."""
        self.check(values)
        return _packb(values)

    def encode_body(self, *values: Any) -> Body:
        """`encode`, but a large bytes field (a push's entries) comes back between the bytes around it,
        not copied, for a frame writer to send as parts."""
        self.check(values)
        if _has_large(values, self._bytes_at):
            return _pack_parts(values)
        return _packb(values)

    def ok(self, *values: Any) -> Body:
        """A SUCCESS response of this schema: the code, then `values` (every field after the code).
        Not validated field by field: the node builds these from its own state, and checking each
        position of a batch's answer would cost more than packing it; tests decode each kind through
        its schema. A large bytes field (a READ answer's entries) comes back as parts around it."""
        if len(values) != len(self.types) - 1:
            raise ValueError(f"{self.name}: {len(self.types) - 1} fields after the code, got {len(values)}")
        values = (_SUCCESS_CODE, *values)
        if _has_large(values, self._bytes_at):
            return _pack_parts(values)
        return _packb(values)

    def decode(self, body: bytes | bytearray | memoryview) -> Any:
        """Unpack and validate a body; ProtocolError on anything malformed."""
        return self.validate(unpack(body))


def unpack(body: bytes | bytearray | memoryview) -> Any:
    """msgpack-decode a whole body; every decoding failure becomes ProtocolError."""
    try:
        return _unpackb(body, raw=False, use_list=False, strict_map_key=True)
    except Exception as e:  # msgpack raises many types (ExtraData, FormatError, StackError, ValueError...)
        raise ProtocolError(f"malformed msgpack body: {type(e).__name__}: {e}") from None


_BIN_HEADS = {0xC4: 1, 0xC5: 2, 0xC6: 4}  # msgpack bin 8/16/32: bytes of the length that follows
_SUCCESS_PACKED = _packb(_SUCCESS_CODE)


def decode_response_view(schema: Schema, body: memoryview) -> Any:
    """decode_response for a schema (code, bytes, ...) whose bytes field is large: a SUCCESS answer's
    bytes come back as a view of `body`, not a copy (the view keeps the frame's buffer alive). Any
    other answer, or a layout this does not expect, goes through decode_response."""
    n = len(schema.fields)
    head = 1 + len(_SUCCESS_PACKED)  # the array's header, then the code
    if n > 15 or schema.types[1] is not BYTES or len(body) <= head or body[0] != 0x90 | n \
            or body[1:head] != _SUCCESS_PACKED or (width := _BIN_HEADS.get(body[head])) is None:
        return decode_response(schema, body)
    at = head + 1 + width
    size = int.from_bytes(body[head + 1:at], "big")
    if at + size > len(body):
        raise ProtocolError(f"{schema.name}: bytes field runs past the body")
    # The fields after the bytes field, decoded as an array of their own (strictly, as unpack does).
    rest = unpack(bytes((0x90 | (n - 2),)) + bytes(body[at + size:]))
    return schema.validate((_SUCCESS_CODE, body[at:at + size], *rest))


# A non-SUCCESS response of an operation whose schema has generic_errors.
ERROR = Schema("Error", [("code", INT), ("reason", STR), ("leader", OPT_STR)])
# An error that carries a number (EXPECTED_END_MISMATCH: the group's actual last entry).
ERROR_DETAIL = Schema("Error", [("code", INT), ("reason", STR), ("leader", OPT_STR), ("detail", INT)])


def encode_error(code: ResponseCode | int, reason: str = "", leader: str | None = None,
                 detail: int | None = None) -> bytes:
    """The body of an error response: [code, reason, leader hint] or, with a detail, [..., detail]."""
    if detail is not None:
        return _packb((int(code), reason, leader, detail))
    return _packb((int(code), reason, leader))


def decode_response(schema: Schema, body: bytes | bytearray | memoryview) -> Any:
    """Decode a response body; raise ResponseError for a non-SUCCESS code in the generic error form.

    The first field of every response is its ResponseCode.
    """
    values = unpack(body)
    if not isinstance(values, tuple) or not values:
        raise ProtocolError(f"{schema.name}: response body is not a non-empty array")
    code = values[0]
    if type(code) is not int:
        raise ProtocolError(f"{schema.name}.code: expected int, got {type(code).__name__}")
    if code != ResponseCode.SUCCESS and schema.generic_errors:
        err = (ERROR_DETAIL if len(values) == 4 else ERROR).validate(values)
        raise ResponseError(err.code, err.reason, err.leader, getattr(err, "detail", None))
    return schema.validate(values)
