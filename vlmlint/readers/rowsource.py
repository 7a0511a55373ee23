"""One data file's rows as the readers parse them: built once per file, passed whole.

A file's rows share their name in reports, the folder their image paths resolve against, the layout
(forced, else detected from the first object) and a conversion; RowSource carries them so that each
function reading the file takes one record, not the same five keywords. FileLayout is the part that
changes as the file is read: the layout detected from its first object.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from vlmlint.readers.layouts import ImageResolver, RowError, detect_layout, row_to_sample, shared_resolver
from vlmlint.records import Sample

Convert = Callable[[Any], Any]  # a decoded row -> the row to parse (llamafactory.py, columns.py)


def travels(convert: Convert | None) -> bool:
    """Whether rows with this conversion may be sent unparsed to another process: none, or plain
    data that says so (a ColumnMap); a closure (a dataset_info.json entry's converter) stays here."""
    return convert is None or getattr(convert, "travels", False)


@dataclass(frozen=True)
class RowSource:
    """Where one file's rows come from and how they parse.

    `source`: the file's name in reports. Image paths resolve against `image_root`, else `base_dir`.
    `layout`: forced, or None (detected from the file's first object). `convert` maps each decoded
    row first (LLaMA-Factory columns, a --columns map); rows whose conversion does not `travels`
    are parsed where they are read, never sent to a worker. `own_resolver`: a resolver of its own (cached for this file's read)
    rather than the process's shared one.
    """

    source: str
    base_dir: str
    image_root: str | None = None
    layout: str | None = None
    convert: Convert | None = None
    own_resolver: bool = False

    @classmethod
    def of_file(cls, path: str, source: str, **fields: Any) -> RowSource:
        """The rows of the file at `path`: their image paths resolve against its folder."""
        return cls(source, os.path.dirname(os.path.abspath(path)), **fields)

    @cached_property
    def resolve(self) -> ImageResolver:
        """Image reference -> ImageRef, built on first use (frozen: cached_property writes __dict__)."""
        if self.own_resolver:
            return ImageResolver(self.base_dir, self.image_root)
        return shared_resolver(self.base_dir, self.image_root)

    def layout_of(self, row: Any, first: bool = False) -> str | None:
        """The layout of `row` as it parses: after its conversion (a --columns map renames fields).

        `first`: the file's first object, which a column map must find some of its fields in
        (ColumnMap.check_first_row raises the DatasetError that stops the scan).
        """
        if self.convert is None:
            return detect_layout(row)
        check = getattr(self.convert, "check_first_row", None)
        if first and check is not None:
            check(row, self.source)
        try:
            return detect_layout(self.convert(row))
        except RowError:
            return None  # the row's own problem: reported when it is parsed

    def sample(
        self, row: Any, index: int, layout: str | None, line: int | None = None, from_first_row: bool = False
    ) -> Sample:
        """One decoded row of the file, parsed as `layout` (row_to_sample)."""
        return row_to_sample(
            row,
            layout=layout,
            resolve=self.resolve,
            source=self.source,
            index=index,
            line=line,
            from_first_row=from_first_row,
            convert=self.convert,
        )


class FileLayout:
    """Remembers the layout detected from the first object of a file (unless one was forced)."""

    def __init__(self, forced: str | None):
        self.value = forced
        self.detected = forced is None  # rows fitting no layout at all are then VLM102, not VLM101
        self.first = True  # no object row seen yet

    def for_row(self, row: Any, rows: RowSource | None = None) -> str | None:
        if self.value is None and isinstance(row, dict):
            first, self.first = self.first, False
            self.value = detect_layout(row) if rows is None else rows.layout_of(row, first)
        return self.value

    def sample(self, rows: RowSource, row: Any, index: int, line: int | None = None) -> Sample:
        """`row` parsed as this file's layout (detected from it when it is the first object)."""
        return rows.sample(row, index, self.for_row(row, rows), line, self.detected)
