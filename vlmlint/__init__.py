"""vlmlint: lint image+text datasets for vision-language models before training."""

from __future__ import annotations

from typing import Any

from vlmlint.version import __version__

__all__ = ["__version__", "check_batch", "check_rows", "row_columns"]

# Why lazy: `import vlmlint` (and the CLI's start) must not import transformers, pandas or pyarrow.
_API = {"check_batch", "check_rows", "row_columns"}


def __getattr__(name: str) -> Any:
    if name in _API:
        from vlmlint import api

        return getattr(api, name)
    raise AttributeError(f"module 'vlmlint' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _API)
