"""Readers: a dataset (file, folder or hub id) -> a stream of Sample records, one row at a time.

READERS is the registry: each source kind is a Reader (readers/base.py) with `matches`, `read` and
`parts`; the first that matches a target reads it. A new source kind is its module and one line here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from vlmlint.readers import sources
from vlmlint.readers.base import Reader, ReadOptions, display_path
from vlmlint.readers.batches import RowBatch
from vlmlint.readers.files import DatasetError
from vlmlint.readers.layouts import LAYOUTS, detect_layout, row_to_sample
from vlmlint.records import Sample

__all__ = [
    "LAYOUTS",
    "READERS",
    "DatasetError",
    "ReadOptions",
    "Reader",
    "RowBatch",
    "dataset_parts",
    "detect_layout",
    "display_path",
    "iter_samples",
    "read_dataset",
    "row_to_sample",
]

# In the order they are asked: the first that matches a target reads it.
READERS: tuple[Reader, ...] = (
    sources.DatasetInfoReader(),
    sources.DataFileReader(),
    sources.PatternReader(),
    sources.SAVED_DATASET,
    sources.IMAGE_FOLDER,
    sources.DataFolderReader(),
    sources.SIDECAR_FOLDER,
    sources.HubReader(),
)


def check_options(options: ReadOptions) -> None:
    """DatasetError for settings no reader accepts (an unknown layout, --columns with what it cannot meet)."""
    if options.layout is not None and options.layout not in LAYOUTS:
        raise DatasetError(f"unknown layout {options.layout!r}; choose one of {', '.join(LAYOUTS)}")
    columns = options.columns
    if columns is None:
        return
    if options.dataset_name is not None:
        raise DatasetError(
            "--columns and --dataset: a dataset_info.json entry's own columns and tags map its fields; "
            "set them there, or scan the data file with --columns"
        )
    if columns.mode != "rename" and options.layout not in (None, "sharegpt", "openai"):
        raise DatasetError(
            f"--columns {columns.describe()} converts rows to the sharegpt layout (LLaMA-Factory's "
            f"{columns.mode} converter): --layout {options.layout} does not apply"
        )


def reader_for(target: str, options: ReadOptions) -> Reader | None:
    """The first reader of READERS that reads `target`; None when none does."""
    return next((reader for reader in READERS if reader.matches(target, options)), None)


def _unreadable(target: str) -> DatasetError:
    if os.path.isdir(target):
        return DatasetError(
            f"{target}: no manifest, table, tar shard, metadata file or image found in this folder"
        )
    if os.path.exists(target):  # a FIFO, socket or device: never opened (a FIFO would block the scan)
        return DatasetError(f"{target}: not a regular file or folder")
    return DatasetError(f"{target}: no such file or folder (and not a hub dataset id like 'org/name')")


def read_dataset(target: str, options: ReadOptions) -> Iterator[Sample | RowBatch]:
    """Stream the samples of a dataset file, folder, shard pattern or Hugging Face hub id.

    Folders: a save_to_disk dataset; an imagefolder (metadata.jsonl / metadata.csv); manifests and
    parquet/arrow files inside it; else webdataset tar shards; else images with sidecar captions. A
    pattern (`shards/train-{000..099}.tar`, `shards/*.tar`) reads each file it names in order; a
    missing shard is a VLM101 row. `options.batch_rows` > 0: JSONL lines, JSON array elements and
    Arrow record batches (parquet, arrow, save_to_disk) come as RowBatch units, parsed where they are
    scanned (readers/batches.py); other sources yield Samples.
    """
    check_options(options)
    reader = reader_for(target, options)
    if reader is None:
        raise _unreadable(target)
    yield from reader.read(target, options)


def dataset_parts(target: str, options: ReadOptions | None = None) -> list[str]:
    """Parts whose samples, read one after the other, are the samples of `target` (in order).

    Files of a pattern, or of a folder of dataset files or shards, are parts of their own so that
    they are read in parallel; anything else (save_to_disk, imagefolder, sidecar folders, hub ids) is
    read whole. A folder whose files include a symlink out of it is read whole too, so that the
    readers' own check of such files applies unchanged. A missing path: itself (the reader says why).
    """
    options = ReadOptions() if options is None else options
    reader = reader_for(target, options)
    return [target] if reader is None else reader.parts(target, options)


def iter_samples(target: str, **settings: Any) -> Iterator[Sample | RowBatch]:
    """read_dataset with the ReadOptions fields as keywords (layout=, image_root=, split=, ...)."""
    return read_dataset(target, ReadOptions(**settings))
