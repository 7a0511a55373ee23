"""A processor's files, from a local folder or a hub repo (downloaded and cached by transformers)."""

from __future__ import annotations

import os


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
