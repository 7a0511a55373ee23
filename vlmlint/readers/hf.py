"""Hugging Face datasets: save_to_disk folders, local parquet / arrow files, and hub dataset ids.

Rows are read in Arrow batches and converted to Python one batch at a time. Image columns come out as
their stored {"bytes", "path"} structs: nothing is decoded, and nothing is cast (a cast would write
cache files next to the dataset).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from vlmlint.readers.batches import RowBatch
from vlmlint.readers.files import DatasetError
from vlmlint.readers.layouts import detect_layout, row_to_sample, shared_resolver
from vlmlint.sample import RowProblem, Sample

BATCH_ROWS = 256


def is_saved_dataset(folder: str) -> bool:
    return any(os.path.isfile(os.path.join(folder, name)) for name in ("state.json", "dataset_dict.json"))


@dataclass(frozen=True)
class TableBatch(RowBatch):
    """An Arrow record batch (or table) of rows not converted yet (readers/batches.py)."""

    source: str
    base_dir: str
    image_root: str | None
    layout: str | None
    first_index: int
    table: Any  # pyarrow.RecordBatch or pyarrow.Table: sent to a worker as Arrow buffers

    def __len__(self) -> int:
        return self.table.num_rows

    def samples(self) -> list[Sample]:
        return self._parse(python_rows(self.table), self.first_index)

    def sample(self, position: int) -> Sample:
        return self._parse(python_rows(self.table.slice(position, 1)), self.first_index + position)[0]

    def split(self, count: int) -> tuple[TableBatch, TableBatch]:
        head = replace(self, table=self.table.slice(0, count))
        return head, replace(self, table=self.table.slice(count), first_index=self.first_index + count)

    def _parse(self, rows: list[Any], first: int) -> list[Sample]:
        resolve = shared_resolver(self.base_dir, self.image_root)
        return [
            _sample(row, self.layout, resolve, self.source, first + k, None) for k, row in enumerate(rows)
        ]


class _Unreadable(str):
    """A row Arrow cannot turn into Python values (e.g. a string column holding invalid UTF-8)."""


def python_rows(batch: Any) -> list[Any]:
    """A record batch's rows as dicts; a row that cannot be converted is an _Unreadable message.

    Why row by row on failure: one bad value must cost its own row (a VLM101 finding), not the file.
    """
    import pyarrow as pa

    try:
        return batch.to_pylist()
    except (pa.ArrowException, ValueError):
        rows: list[Any] = []
        for position in range(batch.num_rows):
            try:
                rows.extend(batch.slice(position, 1).to_pylist())
            except (pa.ArrowException, ValueError) as exc:
                rows.append(_Unreadable(f"row cannot be read from the table: {type(exc).__name__}: {exc}"))
        return rows


def _sample(row: Any, layout: str | None, resolve, source: str, index: int, convert) -> Sample:
    if isinstance(row, _Unreadable):
        return Sample(source=source, index=index, problems=(RowProblem("VLM101", str(row)),))
    return row_to_sample(row, layout=layout, resolve=resolve, source=source, index=index, convert=convert)


def _rows_to_units(
    batches: Iterable[Any],
    *,
    layout: str | None,
    base_dir: str,
    image_root: str | None,
    source: str,
    convert: Callable[[Any], Any] | None = None,
    batch_rows: int = 0,
) -> Iterator[Sample | TableBatch]:
    """Arrow batches -> Samples, or TableBatch units once the layout is known (batch_rows > 0)."""
    resolve = shared_resolver(base_dir, image_root)
    index = 0
    chosen = layout
    for batch in batches:
        if batch_rows and convert is None and chosen is not None:  # a convert may not travel to a worker
            yield TableBatch(source, base_dir, image_root, chosen, index, batch)
            index += batch.num_rows
            continue
        for row in python_rows(batch):
            if chosen is None and isinstance(row, dict):
                chosen = detect_layout(row)
            yield _sample(row, chosen, resolve, source, index, convert)
            index += 1


def _arrow_batches(dataset) -> Iterator[Any]:
    yield from dataset.with_format("arrow").iter(batch_size=BATCH_ROWS)


def _pick_split(dataset_or_dict, split: str | None):
    from datasets import DatasetDict, IterableDatasetDict

    if isinstance(dataset_or_dict, (DatasetDict, IterableDatasetDict)):
        if split is None:
            split = "train" if "train" in dataset_or_dict else next(iter(dataset_or_dict))
        if split not in dataset_or_dict:
            raise ValueError(f"split {split!r} not found; available: {sorted(dataset_or_dict)}")
        return dataset_or_dict[split], split
    return dataset_or_dict, split


def read_saved_dataset(
    folder: str, *, layout: str | None, image_root: str | None, split: str | None, rel, batch_rows: int = 0
) -> Iterator[Sample | TableBatch]:
    import pyarrow as pa
    from datasets import load_from_disk

    try:
        loaded = load_from_disk(folder)
    except (pa.ArrowException, OSError, ValueError, KeyError, TypeError) as exc:  # corrupt state/info files
        raise DatasetError(f"{folder}: not a readable save_to_disk dataset: {exc}") from None
    dataset, split = _pick_split(loaded, split)
    source = rel(folder) + (f"[{split}]" if split else "")
    yield from _rows_to_units(
        _arrow_batches(dataset),
        layout=layout,
        base_dir=folder,
        image_root=image_root,
        source=source,
        batch_rows=batch_rows,
    )


def _table_file(
    path: str,
    kind: str,
    batches: Callable[[], Iterator[Any]],
    layout: str | None,
    image_root: str | None,
    source: str,
    convert: Callable[[Any], Any] | None,
    batch_rows: int,
) -> Iterator[Sample | TableBatch]:
    """The rows of a parquet/arrow file; a corrupt file (at its start or further in) is a DatasetError."""
    import pyarrow as pa

    def checked() -> Iterator[Any]:
        try:
            yield from batches()
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise DatasetError(f"{path}: not a readable {kind} file: {exc}") from None

    base_dir = os.path.dirname(os.path.abspath(path))
    yield from _rows_to_units(
        checked(),
        layout=layout,
        base_dir=base_dir,
        image_root=image_root,
        source=source,
        convert=convert,
        batch_rows=batch_rows,
    )


def read_parquet(
    path: str,
    *,
    layout: str | None,
    image_root: str | None,
    source: str,
    convert: Callable[[Any], Any] | None = None,
    batch_rows: int = 0,
) -> Iterator[Sample | TableBatch]:
    import pyarrow.parquet as pq

    def batches() -> Iterator[Any]:
        yield from pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS)

    yield from _table_file(path, "parquet", batches, layout, image_root, source, convert, batch_rows)


def read_arrow(
    path: str,
    *,
    layout: str | None,
    image_root: str | None,
    source: str,
    convert: Callable[[Any], Any] | None = None,
    batch_rows: int = 0,
) -> Iterator[Sample | TableBatch]:
    import pyarrow as pa

    def batches() -> Iterator[Any]:
        with pa.memory_map(path, "r") as source_file:
            try:
                reader = pa.ipc.open_stream(source_file)  # what datasets writes
            except pa.ArrowInvalid:
                source_file.seek(0)
                reader = pa.ipc.open_file(source_file)
                for i in range(reader.num_record_batches):
                    yield reader.get_batch(i)
            else:
                yield from reader

    yield from _table_file(path, "Arrow", batches, layout, image_root, source, convert, batch_rows)


def read_hub_dataset(
    name: str, *, layout: str | None, image_root: str | None, split: str | None, streaming: bool
) -> Iterator[Sample]:
    from datasets import load_dataset

    dataset, split = _pick_split(load_dataset(name, split=split, streaming=streaming), split)
    source = name + (f"[{split}]" if split else "")
    yield from _rows_to_units(
        _arrow_batches(dataset), layout=layout, base_dir=os.getcwd(), image_root=image_root, source=source
    )
