"""Text that came from the network, made safe to write into a log line, an event or a terminal.

A HELLO's node id, a GOODBYE's reason or a refused cluster name are chosen by whoever connects. Written as
they are, a newline forges a log line of any level and an escape sequence rewrites an operator's terminal.
`shown` escapes every control or format character (and the Unicode line separators) and bounds the
length; `EscapingFormatter` does the same to whole log messages, whatever path their text took.
"""

from __future__ import annotations

import logging
import unicodedata

_SAFE_CACHE: dict[str, bool] = {}


def _unsafe(ch: str) -> bool:
    safe = _SAFE_CACHE.get(ch)
    if safe is None:
        safe = unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")
        if len(_SAFE_CACHE) < 4096:
            _SAFE_CACHE[ch] = safe
    return not safe


def escape(text: str) -> str:
    """`text` with each control, format or line-separator character written as a Python escape."""
    if text.isprintable():  # the common case: nothing to do (isprintable is False for every unsafe one)
        return text
    return "".join(ch.encode("unicode_escape").decode("ascii") if _unsafe(ch) else ch for ch in text)


def shown(text: object, limit: int = 200) -> str:
    """`text` escaped (see escape) and cut to `limit` characters, for a log line or an event."""
    s = escape(str(text))
    return s if len(s) <= limit else s[:limit - 1] + "…"


class EscapingFormatter(logging.Formatter):
    """A Formatter whose messages (not their tracebacks) have control characters escaped: one record is
    one line, whatever text from the network it carries."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        record.message = escape(record.message)
        return super().formatMessage(record)
