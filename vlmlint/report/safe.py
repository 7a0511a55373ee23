"""Untrusted names (file names, row ids, messages) made safe for every output: one place, every format.

A dataset file name can hold any byte but "/" and NUL: a newline (a line of its own in a CI log, where
`::error ...` is a GitHub Actions command), terminal escape sequences, or bytes that are not UTF-8
(os.fsdecode turns them into lone surrogates, which no UTF-8 stream can write). Two levels:

- `unicode_safe`: lone surrogates shown as `\\xff` (the byte) or `\\ud800`; the text is then valid
  UTF-8, for the formats whose own escaping handles control characters (JSON, XML, HTML, github).
- `printable`: also every control character shown escaped (`\\n`, `\\x1b`), for the terminal, the
  text report and stderr, where a raw one would start a new line or drive the terminal.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

_SURROGATE = re.compile("[\ud800-\udfff]")
# C0 and C1 controls, DEL, and the Unicode line and paragraph separators (a new line to some viewers).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(match: re.Match) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # os.fsdecode's surrogateescape: the original byte
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def unicode_safe(text: str) -> str:
    """`text` with lone surrogates escaped: always encodable as UTF-8."""
    if text.isascii() or not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub(_escaped, text)


def printable(text: str) -> str:
    """`text` as one line for a terminal or log: control characters and surrogates shown escaped."""
    if text.isprintable() and text.isascii():
        return text
    return _CONTROL.sub(_escaped, text)


def safe_record(value: Any) -> Any:
    """A JSON-like value with every string (keys too) made unicode_safe."""
    if isinstance(value, str):
        return unicode_safe(value)
    if isinstance(value, dict):
        return {safe_record(k) if isinstance(k, str) else k: safe_record(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [safe_record(v) for v in value]
    return value


def dumps_safe(value: Any, option: int | None = None) -> bytes:
    """orjson.dumps, with strings made unicode_safe when orjson refuses them (lone surrogates)."""
    try:
        return orjson.dumps(value, option=option)
    except orjson.JSONEncodeError:
        return orjson.dumps(safe_record(value), option=option)
