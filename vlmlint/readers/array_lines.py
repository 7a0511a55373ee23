"""Line numbers of a JSON array's elements, found while ijson streams the file.

ijson yields items but no positions. CI annotations need the line each row starts on, so the bytes
ijson reads pass through `ArrayElementLines`, which scans them as they go by: strings are skipped
whole, brackets counted, and the line of each element's first byte at depth 1 is queued. Items come
out of ijson in the same order, so each one takes the next queued line. Nothing is read twice and
nothing is kept beyond the lines of the elements ijson has read ahead (one 64 KiB buffer's worth).
"""

from __future__ import annotations

import re
from collections import deque
from typing import BinaryIO

# Outside strings at depth 0 or >= 2: skip anything but brackets, and complete strings in one go
# (unrolled so it never backtracks); it stops at a bracket or at a string that the chunk cuts.
_SKIP = re.compile(rb'[^\[\]{}"]*(?:"[^"\\]*(?:\\.[^"\\]*)*"[^\[\]{}"]*)*', re.DOTALL)
_STRING_BODY = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*', re.DOTALL)  # up to the closing quote
_BLANK = re.compile(rb"[ \t\r\n]*")
_SCALAR = re.compile(rb'[^ \t\r\n,\[\]{}"]*')  # a number, true, false, null (or junk)


def _nested(levels: int) -> re.Pattern[bytes]:
    """A whole object or array nested at most `levels` deep, in one match (the fast path per row).

    Every alternative starts with a different byte, so a failed match (a row the chunk cuts, or one
    nested deeper) costs linear time; the byte-by-byte path then takes over for that row.
    """
    string = rb'"[^"\\]*(?:\\.[^"\\]*)*"'
    plain = rb'[^\[\]{}"]*'
    inner = plain + rb"(?:" + string + plain + rb")*"
    for _ in range(levels - 1):
        inner = plain + rb"(?:(?:" + string + rb"|[\[{]" + inner + rb"[\]}])" + plain + rb")*"
    return re.compile(rb"[\[{]" + inner + rb"[\]}]", re.DOTALL)


_VALUE = _nested(6)
_QUOTE, _COMMA = ord('"'), ord(",")
_OPEN, _CLOSE = frozenset(b"[{"), frozenset(b"]}")


# Limits on one element, checked before ijson sees the bytes. Why: ijson's memory grows with the
# square of the nesting depth (10,000 levels: 250 MB; 100,000: gigabytes) and its time with the
# square of a string's length (40 MB: 6 s; 100 MB: 35 s). orjson refuses JSONL lines nested beyond
# the same 1024 levels; JSONL lines are capped at the same 64 MiB (manifest.MAX_LINE_BYTES).
MAX_DEPTH = 1024
MAX_ELEMENT_BYTES = 64 * 2**20
MAX_STRING_BYTES = 16 * 2**20


class ElementLimit(ValueError):
    """An array element beyond MAX_DEPTH, MAX_ELEMENT_BYTES or MAX_STRING_BYTES; raised from `read`.

    `position`: where in its chunk the limit was passed; the bytes before it still reach ijson, so
    the rows before the offending element are read.
    """

    def __init__(self, message: str, position: int):
        super().__init__(message)
        self.position = position


class ArrayElementLines:
    """A binary file wrapper for ijson: `read` passes bytes through and notes element start lines."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self.lines: deque[int] = deque()  # start lines of elements read but not yet taken
        self._line = 1  # line number at the start of the next chunk
        self._depth = 0
        self._in_string = False
        self._escaped = False  # the previous chunk ended on a backslash inside a string
        self._expect = False  # at depth 1 after '[' or ',': the next value starts an element
        self._started = False
        self._offset = 0  # bytes scanned before the current chunk
        self._element_start = 0  # offsets where the open element and the open string started
        self._string_start = 0
        self._limit: ElementLimit | None = None

    def read(self, size: int = -1) -> bytes:
        if self._limit is not None:
            raise self._limit
        chunk = self._raw.read(size)
        if chunk and not self._started:
            self._started = True
            if chunk.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte-order mark, which ijson refuses
                chunk = chunk[3:] or self._raw.read(size)
        if chunk:
            try:
                self._scan(chunk)
            except ElementLimit as exc:
                if not exc.position:
                    raise
                self._limit = exc  # raised on the next read, once ijson has the rows before it
                return chunk[: exc.position]
        return chunk

    def take(self) -> int | None:
        """The start line of the next element (None if the scan lost track, e.g. a malformed file)."""
        return self.lines.popleft() if self.lines else None

    def _scan(self, chunk: bytes) -> None:
        pos, end, counted = 0, len(chunk), 0
        while pos < end:
            if self._in_string:
                pos = self._string_step(chunk, pos, end)
                continue
            if self._depth == 1:
                pos = _BLANK.match(chunk, pos).end()
                if pos == end:
                    break
                byte = chunk[pos]
                if byte == _COMMA:
                    self._expect = True
                    pos += 1
                    continue
                if byte not in _CLOSE and self._expect:
                    self._line += chunk.count(b"\n", counted, pos)
                    counted = pos
                    self.lines.append(self._line)
                    self._expect = False
                    self._element_start = self._offset + pos
                if byte in _OPEN:
                    whole = _VALUE.match(chunk, pos)
                    if whole is not None:  # the row's object ends in this chunk: skip it at once
                        pos = whole.end()
                        continue
                elif byte != _QUOTE and byte not in _CLOSE:
                    pos = _SCALAR.match(chunk, pos + 1).end()
                    continue
            else:
                pos = _SKIP.match(chunk, pos).end()
                if pos == end:
                    break
                byte = chunk[pos]
            pos += 1
            if byte == _QUOTE:
                self._in_string = True
                self._string_start = self._offset + pos
            elif byte in _OPEN:
                self._depth += 1
                if self._depth == 1:
                    self._expect = True  # the top-level '['
                elif self._depth > MAX_DEPTH + 1:  # the array's own level does not count
                    raise ElementLimit(f"an element is nested more than {MAX_DEPTH} levels deep", pos)
            else:  # a closing bracket
                self._depth = max(0, self._depth - 1)
        self._line += chunk.count(b"\n", counted)
        self._offset += end
        self._check_cut(end)

    def _string_step(self, chunk: bytes, pos: int, end: int) -> int:
        """Inside a string: the position past its closing quote, or `end` when the chunk ends first."""
        if self._escaped:
            self._escaped = False
            return pos + 1
        pos = _STRING_BODY.match(chunk, pos).end()
        if pos == end:
            return end
        if chunk[pos] == _QUOTE:
            self._in_string = False
        else:  # a backslash as the chunk's last byte: its escaped byte opens the next chunk
            self._escaped = True
        return pos + 1

    def _check_cut(self, end: int) -> None:
        # Strings and elements that the chunk cuts (those within a chunk are at most its 64 KiB).
        if self._in_string and self._offset - self._string_start > MAX_STRING_BYTES:
            raise ElementLimit(f"a string is longer than {MAX_STRING_BYTES // 2**20} MiB", end)
        if self._depth and not self._expect and self._offset - self._element_start > MAX_ELEMENT_BYTES:
            raise ElementLimit(f"an element is larger than {MAX_ELEMENT_BYTES // 2**20} MiB", end)
