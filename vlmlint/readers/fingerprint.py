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


def row_fingerprint(row: Any) -> str:
    """The content hash of one parsed row (any JSON-like value)."""
    try:
        canonical = orjson.dumps(row, default=_fallback, option=_OPTIONS)
    except orjson.JSONEncodeError:  # integers beyond 64 bits, deep nesting: the slower stdlib encoder
        canonical = json.dumps(row, sort_keys=True, default=_fallback, separators=(",", ":")).encode()
    return hash_bytes(canonical)
