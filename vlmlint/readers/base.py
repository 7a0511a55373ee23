"""What every reader is: the read settings (ReadOptions) and the protocol a source kind implements."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from vlmlint.readers.batches import RowBatch
    from vlmlint.readers.columns import ColumnMap
    from vlmlint.records import Sample


def display_path(path: str) -> str:
    """A path as reports show it: relative to the working folder when inside it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


@dataclass(frozen=True)
class ReadOptions:
    """How to read a dataset, built once and passed to every reader (local and Ray paths alike).

    `dataset_name` (--dataset): the target is a LLaMA-Factory data folder and the named entries of
    its dataset_info.json are read. `rel`: a path -> its name in reports. `batch_rows` > 0: JSONL
    lines, JSON array elements and Arrow record batches come as RowBatch units (readers/batches.py).
    `columns` (--columns): the column map every row of a manifest or table is read through
    (readers/columns.py).
    """

    layout: str | None = None
    image_root: str | None = None
    split: str | None = None
    streaming: bool = False
    allow_outside_root: bool = False
    rel: Callable[[str], str] = display_path
    dataset_name: str | None = None
    batch_rows: int = 0
    columns: ColumnMap | None = None

    @classmethod
    def from_config(cls, config: Any, **overrides: Any) -> ReadOptions:
        """The options a scan config names (the fields both have), then `overrides`."""
        names = (
            "layout",
            "image_root",
            "split",
            "streaming",
            "allow_outside_root",
            "dataset_name",
            "batch_rows",
        )
        given = {name: getattr(config, name) for name in names if hasattr(config, name)}
        if getattr(config, "columns", None):  # the config's table -> plain data that pickles
            from vlmlint.readers.columns import ColumnMap

            given["columns"] = ColumnMap.of(config.columns)
        return cls(**{**given, **overrides})


class Reader(Protocol):
    """One source kind. The registry (readers/__init__.py READERS) asks each in order whether it
    `matches` a target; the first that does reads it.

    `parts`: targets whose samples, read one after the other with the same options, are the samples
    of `target`, in order (what a parallel or Ray scan splits the dataset into); `[target]` when it
    is read whole.
    """

    name: str

    def matches(self, target: str, options: ReadOptions) -> bool: ...

    def read(self, target: str, options: ReadOptions) -> Iterator[Sample | RowBatch]: ...

    def parts(self, target: str, options: ReadOptions) -> list[str]: ...
