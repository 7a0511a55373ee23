"""JSON and JSONL manifests, streamed one row at a time.

JSONL is read line by line (orjson); a JSON array is streamed item by item with ijson so that a
665k-row LLaVA mix never sits in memory whole. The layout is detected from the file's first object.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import orjson

from vlmlint.readers.fingerprint import hash_bytes
from vlmlint.readers.layouts import ImageResolver, detect_layout, row_to_sample
from vlmlint.sample import RowProblem, Sample


class _FileLayout:
    """Remembers the layout detected from the first object of a file (unless one was forced)."""

    def __init__(self, forced: str | None):
        self.value = forced
        self.detected = forced is None  # rows fitting no layout at all are then VLM102, not VLM101

    def for_row(self, row: Any) -> str | None:
        if self.value is None and isinstance(row, dict):
            self.value = detect_layout(row)
        return self.value


def _malformed(source: str, index: int, line: int | None, message: str, raw: bytes) -> Sample:
    problems = (RowProblem("VLM101", message),)
    return Sample(source=source, index=index, line=line, problems=problems, fingerprint=hash_bytes(raw))


def read_jsonl(path: str, *, layout: str | None, image_root: str | None, source: str) -> Iterator[Sample]:
    resolve = ImageResolver(os.path.dirname(os.path.abspath(path)), image_root)
    file_layout = _FileLayout(layout)
    index = 0
    with open(path, "rb") as handle:
        for line_number, raw in enumerate(handle, start=1):
            if line_number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]  # UTF-8 byte-order mark
            if not raw.strip():
                continue  # blank lines carry no row
            try:
                row = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                yield _malformed(source, index, line_number, f"line is not valid JSON: {exc}", raw.strip())
            else:
                yield row_to_sample(
                    row,
                    layout=file_layout.for_row(row),
                    resolve=resolve,
                    source=source,
                    index=index,
                    line=line_number,
                    from_first_row=file_layout.detected,
                )
            index += 1


def _first_significant_byte(path: str) -> bytes:
    with open(path, "rb") as handle:
        chunk = handle.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    return chunk[:1]


def read_json(path: str, *, layout: str | None, image_root: str | None, source: str) -> Iterator[Sample]:
    """A .json manifest: a top-level array streamed with ijson, or JSONL content under a .json name."""
    first = _first_significant_byte(path)
    if first != b"[":
        # A single object, or JSON Lines saved as .json: the JSONL reader handles both.
        yield from read_jsonl(path, layout=layout, image_root=image_root, source=source)
        return
    import ijson  # streaming parser with a C backend

    from vlmlint.readers.array_lines import ArrayElementLines

    resolve = ImageResolver(os.path.dirname(os.path.abspath(path)), image_root)
    file_layout = _FileLayout(layout)
    index = 0
    with open(path, "rb") as raw:
        handle = ArrayElementLines(raw)  # notes the line each element starts on as ijson reads
        try:
            for row in ijson.items(handle, "item", use_float=True):
                yield row_to_sample(
                    row,
                    layout=file_layout.for_row(row),
                    resolve=resolve,
                    source=source,
                    index=index,
                    line=handle.take(),
                    from_first_row=file_layout.detected,
                )
                index += 1
        except ijson.JSONError as exc:
            message = f"JSON array is malformed after item {index}: {exc}"
            yield _malformed(source, index, handle.take(), message, message.encode())  # no raw bytes to hash
