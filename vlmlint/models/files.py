"""A processor's files, from a local folder or a hub repo (downloaded and cached by transformers).

A local folder may come from an untrusted pull request (a discovered config's `model = "proc"`), so
its files are checked before anything reads them: each must be a regular file inside the folder
(an HF cache snapshot's links into its repo's blobs stay inside it), the tokenizer files and the
JSON configs have a size bound, and the JSON configs a nesting bound.
"""

from __future__ import annotations

import os
import re
from typing import Any

MAX_TOKENIZER_BYTES = 64 * 2**20  # tokenizer.json, vocab and merges files (Gemma 3's is ~33 MB)
# Entries a tokenizer file may hold, counted by its JSON separators (Qwen2-VL: 0.74M; Gemma 3, estimated: ~2M):
# the tokenizers library takes about 4 s and 0.3 GB per million on load (10M: 55 s, 3.4 GB).
MAX_TOKENIZER_ENTRIES = 3_000_000
MAX_CONFIG_BYTES = 16 * 2**20  # every other file (Gemma 3's tokenizer_config.json is ~1.2 MB)
MAX_JSON_DEPTH = 1024  # orjson's own nesting limit; json.loads would raise RecursionError instead

TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "spiece.model",
)
# The files a processor's loading reads (configs, templates, vocabularies, remote code), not weights.
_READ_SUFFIXES = ("config.json", ".jinja", ".tiktoken", ".py")
_READ_NAMES = frozenset({"special_tokens_map.json", "added_tokens.json", "chat_template.json"})
_HF_REPO = re.compile(r"^(models|datasets|spaces)--[^/]+$")


class ModelFileRefused(ValueError):
    """A file of a model folder that vlmlint will not read (outside the folder, not regular, too big)."""


def model_file(model: str, filename: str) -> str | None:
    """Path of a file of a local folder or a hub repo (downloaded and cached), or None when absent."""
    if os.path.isdir(model):
        path = os.path.join(model, filename)
        return path if os.path.isfile(path) else None
    from transformers.utils import cached_file

    try:
        return cached_file(model, filename, _raise_exceptions_for_missing_entries=False)
    except OSError:
        return None


def _allowed_root(folder: str) -> str:
    """Where the folder's files may resolve: the folder, or its HF cache repo for a snapshot."""
    real = os.path.realpath(folder)
    parent = os.path.dirname(real)
    repo = os.path.dirname(parent)
    if os.path.basename(parent) == "snapshots" and _HF_REPO.match(os.path.basename(repo)):
        return repo  # snapshots/<rev>/file -> ../../blobs/<hash>
    return real


def check_folder(folder: str) -> None:
    """Refuse a local model folder whose top-level files transformers or vlmlint would read unsafely.

    Only the files a processor's loading reads are checked: weights may be large or linked elsewhere.
    """
    root = _allowed_root(folder)
    with os.scandir(folder) as entries:
        names = sorted(entry.name for entry in entries)
    for name in names:
        if not (name.endswith(_READ_SUFFIXES) or name in _READ_NAMES or name in TOKENIZER_FILES):
            continue  # weights, training logs and other files no processor reads
        path = os.path.join(folder, name)
        real = os.path.realpath(path)
        if real != root and not real.startswith(root + os.sep):
            raise ModelFileRefused(f"{name} resolves outside the model folder ({real}); not read")
        if os.path.isdir(real):
            continue
        if not os.path.isfile(real):
            raise ModelFileRefused(f"{name} is not a regular file; not read")
        size = os.path.getsize(real)
        limit = MAX_TOKENIZER_BYTES if name in TOKENIZER_FILES else MAX_CONFIG_BYTES
        if size > limit:
            raise ModelFileRefused(
                f"{name} is {size:,} bytes, above the {limit // 2**20} MiB bound; not read"
            )
        if name in TOKENIZER_FILES:
            _check_entries(real, name)
        elif name.endswith(".json"):
            _check_depth(real, name)


def _check_entries(path: str, name: str) -> None:
    """A cheap upper bound on a tokenizer file's entries: its separators, counted in 1 MiB chunks."""
    separators = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(2**20):
            separators += chunk.count(b",") + (chunk.count(b"\n") if not name.endswith(".json") else 0)
    if separators > MAX_TOKENIZER_ENTRIES:
        raise ModelFileRefused(
            f"{name} holds about {separators:,} entries, above the {MAX_TOKENIZER_ENTRIES:,} bound; not read"
        )


def _check_depth(path: str, name: str) -> None:
    """A JSON config transformers reads with json.loads, which recurses: refused beyond 1024 levels."""
    import orjson

    with open(path, "rb") as handle:
        data = handle.read(MAX_CONFIG_BYTES + 1)
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if "depth" in str(exc):
            raise ModelFileRefused(f"{name} nests deeper than {MAX_JSON_DEPTH} levels; not read") from None
        # other malformed JSON: the reader that needs the file says so (or never reads it)


def read_json_file(path: str) -> Any:
    """A model JSON file, with the size and nesting bounds (ValueError beyond them)."""
    import orjson

    size = os.path.getsize(path)
    limit = MAX_TOKENIZER_BYTES if os.path.basename(path) in TOKENIZER_FILES else MAX_CONFIG_BYTES
    if size > limit:
        raise ModelFileRefused(f"{size:,} bytes, above the {limit // 2**20} MiB bound")
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    try:
        return orjson.loads(data)  # nests at most 1024 levels (MAX_JSON_DEPTH)
    except orjson.JSONDecodeError as exc:
        raise ValueError(str(exc)) from None
