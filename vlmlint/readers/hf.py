"""Hugging Face datasets: save_to_disk folders, local parquet / arrow files, and hub dataset ids.

Rows are read in Arrow batches and converted to Python one batch at a time. Image columns come out as
their stored {"bytes", "path"} structs: nothing is decoded, and nothing is cast (a cast would write
cache files next to the dataset).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from vlmlint.readers.files import DatasetError
from vlmlint.readers.layouts import ImageResolver, detect_layout, row_to_sample
from vlmlint.sample import Sample

BATCH_ROWS = 256


def is_saved_dataset(folder: str) -> bool:
    return any(os.path.isfile(os.path.join(folder, name)) for name in ("state.json", "dataset_dict.json"))


def _rows_to_samples(
    batches: Iterable[list[dict[str, Any]]],
    *,
    layout: str | None,
    resolve: ImageResolver,
    source: str,
    convert: Callable[[Any], Any] | None = None,
) -> Iterator[Sample]:
    index = 0
    chosen = layout
    for rows in batches:
        for row in rows:
            if chosen is None and isinstance(row, dict):
                chosen = detect_layout(row)
            yield row_to_sample(
                row, layout=chosen, resolve=resolve, source=source, index=index, convert=convert
            )
            index += 1


def _arrow_batches(dataset) -> Iterator[list[dict[str, Any]]]:
    for table in dataset.with_format("arrow").iter(batch_size=BATCH_ROWS):
        yield table.to_pylist()


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
    folder: str, *, layout: str | None, image_root: str | None, split: str | None, rel
) -> Iterator[Sample]:
    import pyarrow as pa
    from datasets import load_from_disk

    try:
        loaded = load_from_disk(folder)
    except (pa.ArrowException, OSError, ValueError, KeyError, TypeError) as exc:  # corrupt state/info files
        raise DatasetError(f"{folder}: not a readable save_to_disk dataset: {exc}") from None
    dataset, split = _pick_split(loaded, split)
    source = rel(folder) + (f"[{split}]" if split else "")
    resolve = ImageResolver(folder, image_root)
    yield from _rows_to_samples(_arrow_batches(dataset), layout=layout, resolve=resolve, source=source)


def _table_errors(path: str, kind: str, batches: Callable[[], Iterator[list[dict[str, Any]]]]):
    """Batches of a table file; a corrupt file (at its start or further in) is a DatasetError."""
    import pyarrow as pa

    try:
        yield from batches()
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise DatasetError(f"{path}: not a readable {kind} file: {exc}") from None


def read_parquet(
    path: str,
    *,
    layout: str | None,
    image_root: str | None,
    source: str,
    convert: Callable[[Any], Any] | None = None,
) -> Iterator[Sample]:
    import pyarrow.parquet as pq

    def batches() -> Iterator[list[dict[str, Any]]]:
        parquet = pq.ParquetFile(path)
        for batch in parquet.iter_batches(batch_size=BATCH_ROWS):
            yield batch.to_pylist()

    resolve = ImageResolver(os.path.dirname(os.path.abspath(path)), image_root)
    rows = _table_errors(path, "parquet", batches)
    yield from _rows_to_samples(rows, layout=layout, resolve=resolve, source=source, convert=convert)


def read_arrow(
    path: str,
    *,
    layout: str | None,
    image_root: str | None,
    source: str,
    convert: Callable[[Any], Any] | None = None,
) -> Iterator[Sample]:
    import pyarrow as pa

    def batches() -> Iterator[list[dict[str, Any]]]:
        with pa.memory_map(path, "r") as source_file:
            try:
                reader = pa.ipc.open_stream(source_file)  # what datasets writes
            except pa.ArrowInvalid:
                source_file.seek(0)
                reader = pa.ipc.open_file(source_file)
                for i in range(reader.num_record_batches):
                    yield reader.get_batch(i).to_pylist()
            else:
                for batch in reader:
                    yield batch.to_pylist()

    resolve = ImageResolver(os.path.dirname(os.path.abspath(path)), image_root)
    rows = _table_errors(path, "Arrow", batches)
    yield from _rows_to_samples(rows, layout=layout, resolve=resolve, source=source, convert=convert)


def read_hub_dataset(
    name: str, *, layout: str | None, image_root: str | None, split: str | None, streaming: bool
) -> Iterator[Sample]:
    from datasets import load_dataset

    dataset, split = _pick_split(load_dataset(name, split=split, streaming=streaming), split)
    resolve = ImageResolver(os.getcwd(), image_root)
    source = name + (f"[{split}]" if split else "")
    yield from _rows_to_samples(_arrow_batches(dataset), layout=layout, resolve=resolve, source=source)
