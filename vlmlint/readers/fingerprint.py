"""Content fingerprints of rows: what a baseline keys its entries by, instead of line numbers.

A row's fingerprint is a hash of its content as the reader saw it (the parsed object serialised with
sorted keys, bytes such as stored images hashed), so it survives re-ordering, insertions, whitespace
and key-order changes, and is the same for a row in a .json array, a .jsonl file or a parquet table.
"""

from __future__ import annotations

import json
from hashlib import blake2b
from typing import Any

import orjson

_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


def hash_bytes(data: bytes) -> str:
    """16-byte blake2b, as 32 hex digits."""
    return blake2b(data, digest_size=16).hexdigest()


def _fallback(value: Any) -> Any:
    # Why hash bytes: stored images (HF {"bytes", "path"} structs) would otherwise bloat the input.
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "bytes:" + hash_bytes(bytes(value))
    return str(value)  # Decimal, date objects orjson lacks, numpy scalars...


def _dumps_flat(row: Any) -> str:
    """The text json.dumps writes below, without recursion: rows nested deeper than it can go.

    (orjson stops at 255 levels and json.dumps near Python's recursion limit, while a JSONL line may
    nest 1024 levels.) The same text as json.dumps, so a fingerprint never depends on which one ran.
    """
    pieces: list[str] = []
    stack: list[tuple[bool, Any]] = [(False, row)]  # (is_text, item): text as it is, values encoded
    while stack:
        is_text, item = stack.pop()
        if is_text:
            pieces.append(item)
            continue
        if isinstance(item, dict):
            todo: list[tuple[bool, Any]] = [(True, "{")]
            for position, key in enumerate(sorted(item)):
                name = key if isinstance(key, str) else json.dumps(key)  # json writes 1, true, null keys so
                todo += [(True, ("," if position else "") + json.dumps(name) + ":"), (False, item[key])]
            todo.append((True, "}"))
        elif isinstance(item, (list, tuple)):
            todo = [(True, "[")]
            for position, value in enumerate(item):
                todo += [(True, ",")] if position else []
                todo.append((False, value))
            todo.append((True, "]"))
        else:
            pieces.append(json.dumps(item, default=_fallback))
            continue
        stack.extend(reversed(todo))
    return "".join(pieces)


def row_fingerprint(row: Any) -> str:
    """The content hash of one parsed row (any JSON-like value)."""
    try:
        canonical = orjson.dumps(row, default=_fallback, option=_OPTIONS)
    except orjson.JSONEncodeError:  # integers beyond 64 bits, deep nesting: the slower stdlib encoder
        try:
            text = json.dumps(row, sort_keys=True, default=_fallback, separators=(",", ":"))
        except RecursionError:
            text = _dumps_flat(row)
        canonical = text.encode()
    return hash_bytes(canonical)
