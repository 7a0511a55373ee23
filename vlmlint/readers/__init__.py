"""Readers: a dataset (file, folder or hub id) -> a stream of Sample records, one row at a time."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

from vlmlint.readers.batches import RowBatch
from vlmlint.readers.files import DatasetError, is_regular_file, outside_target, walk
from vlmlint.readers.folder import has_metadata, is_image_name, read_imagefolder, read_sidecar_folder
from vlmlint.readers.hf import (
    is_saved_dataset,
    read_arrow,
    read_hub_dataset,
    read_parquet,
    read_saved_dataset,
)
from vlmlint.readers.layouts import LAYOUTS, detect_layout, row_to_sample
from vlmlint.readers.manifest import read_json, read_jsonl
from vlmlint.readers.webdataset import is_shard_name, is_shard_pattern, read_webdataset, shard_paths
from vlmlint.records import RowProblem, Sample

__all__ = ["LAYOUTS", "DatasetError", "RowBatch", "detect_layout", "iter_samples", "row_to_sample"]

MANIFEST_READERS = {".jsonl": read_jsonl, ".ndjson": read_jsonl, ".json": read_json}
TABLE_READERS = {".parquet": read_parquet, ".arrow": read_arrow}


def display_path(path: str) -> str:
    """A path as reports show it: relative to the working folder when inside it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def _read_file(
    path: str,
    layout: str | None,
    image_root: str | None,
    rel: Callable[[str], str] = display_path,
    batch_rows: int = 0,
) -> Iterator[Sample | RowBatch]:
    extension = os.path.splitext(path)[1].lower()
    reader = MANIFEST_READERS.get(extension) or TABLE_READERS.get(extension)
    if is_shard_name(path):
        reader = read_webdataset
    if reader is None:
        raise DatasetError(
            f"{path}: not a dataset file vlmlint reads (.json, .jsonl, .parquet, .arrow, .tar shards)"
        )
    batching = {"batch_rows": batch_rows} if batch_rows and reader is not read_webdataset else {}
    yield from reader(path, layout=layout, image_root=image_root, source=rel(path), **batching)


def outside_sample(path: str, target: str, rel: Callable[[str], str] = display_path) -> Sample:
    """A data file that is a symlink out of the scanned folder: a VLM104 problem, the file not read."""
    message = f"data file {rel(path)} is a symlink to {target}, outside the dataset folder: not read"
    return Sample(source=rel(path), index=0, problems=(RowProblem("VLM104", message),))


def _dataset_files(folder: str) -> list[str]:
    """Manifests and tables in a folder and below it, in path order; dataset_info and the like skipped.

    Only regular files: a FIFO named data.jsonl would block the scan forever.
    """
    found = []
    for directory, subdirs, files in walk(folder):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        image_stems = {os.path.splitext(name)[0] for name in files if is_image_name(name)}
        for name in sorted(files):
            stem, extension = os.path.splitext(name)
            extension = extension.lower()
            if name.startswith(".") or name in ("dataset_info.json", "state.json", "dataset_dict.json"):
                continue
            if extension == ".json" and stem in image_stems:
                continue  # foo.json beside foo.jpg is a sidecar caption, not a manifest
            path = os.path.join(directory, name)
            if (extension in MANIFEST_READERS or extension in TABLE_READERS) and is_regular_file(path):
                found.append(path)
    return found


def _shard_files(folder: str) -> list[str]:
    """WebDataset tar shards in a folder and below it, in path order (a folder without manifests)."""
    found = []
    for directory, subdirs, files in walk(folder):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        for name in sorted(files):
            path = os.path.join(directory, name)
            if is_shard_name(name) and not name.startswith(".") and is_regular_file(path):
                found.append(path)
    return found


def pattern_files(target: str) -> list[str]:
    """The files a brace/glob pattern names; DatasetError for none, a missing file or a non-regular one."""
    paths = shard_paths(target)
    if not paths:
        raise DatasetError(f"{target}: the pattern names no file")
    for path in paths:
        if not is_shard_name(path) and not os.path.isfile(path):
            raise DatasetError(f"{path}: no such file (named by the pattern {target})")
        if os.path.exists(path) and not is_regular_file(path):  # a FIFO would block the scan
            raise DatasetError(f"{path}: not a regular file (named by the pattern {target})")
    return paths


def iter_samples(
    target: str,
    *,
    layout: str | None = None,
    image_root: str | None = None,
    split: str | None = None,
    streaming: bool = False,
    allow_outside_root: bool = False,
    rel: Callable[[str], str] = display_path,
    dataset_name: str | None = None,
    batch_rows: int = 0,
) -> Iterator[Sample | RowBatch]:
    """Stream the samples of a dataset file, folder, shard pattern or Hugging Face hub id.

    `dataset_name` (--dataset): `target` is a LLaMA-Factory data folder and the named entries of its
    dataset_info.json are read, with their columns and tags (readers/llamafactory.py).

    Folders: a save_to_disk dataset; an imagefolder (metadata.jsonl / metadata.csv); manifests and
    parquet/arrow files inside it; else webdataset tar shards; else images with sidecar captions. A
    data file of a folder that is a symlink out of it is a VLM104 problem and is not read, unless
    `allow_outside_root`. A pattern (`shards/train-{000..099}.tar`, `shards/*.tar`) reads each file
    it names in order; a missing shard is a VLM101 row. `rel`: a path -> its name in reports.
    `batch_rows` > 0: JSONL lines, JSON array elements and Arrow record batches (parquet, arrow,
    save_to_disk) come as RowBatch units, parsed where they are scanned (readers/batches.py); other
    sources yield Samples.
    """
    if layout is not None and layout not in LAYOUTS:
        raise DatasetError(f"unknown layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
    if dataset_name is not None:
        from vlmlint.readers.llamafactory import read_llamafactory

        yield from read_llamafactory(
            target, dataset_name, image_root=image_root, rel=rel, allow_outside_root=allow_outside_root
        )
        return
    if os.path.isfile(target):
        yield from _read_file(target, layout, image_root, rel, batch_rows)
        return
    if is_shard_pattern(target):
        for path in pattern_files(target):
            yield from _read_file(path, layout, image_root, rel, batch_rows)
        return
    if os.path.isdir(target):
        if is_saved_dataset(target):
            yield from read_saved_dataset(
                target,
                layout=layout,
                image_root=image_root,
                split=split,
                rel=rel,
                batch_rows=batch_rows,
                allow_outside_root=allow_outside_root,
            )
        elif has_metadata(target):
            yield from read_imagefolder(
                target,
                layout=layout,
                image_root=image_root,
                rel=rel,
                allow_outside_root=allow_outside_root,
            )
        elif files := _dataset_files(target) or _shard_files(target):
            for path in files:
                outside = None if allow_outside_root else outside_target(path, target)
                if outside is not None:
                    yield outside_sample(path, outside, rel)
                else:
                    yield from _read_file(path, layout, image_root, rel, batch_rows)
        elif any(is_image_name(name) for _, _, names in walk(target) for name in names):
            yield from read_sidecar_folder(
                target, image_root=image_root, rel=rel, allow_outside_root=allow_outside_root
            )
        else:
            raise DatasetError(
                f"{target}: no manifest, table, tar shard, metadata file or image found in this folder"
            )
        return
    if os.path.exists(target):  # a FIFO, socket or device: never opened (a FIFO would block the scan)
        raise DatasetError(f"{target}: not a regular file or folder")
    if (
        target.count("/") == 1
        and not target.startswith((".", "/"))
        and not os.path.exists(os.path.dirname(target))
    ):
        yield from read_hub_dataset(
            target, layout=layout, image_root=image_root, split=split, streaming=streaming
        )
        return
    raise DatasetError(f"{target}: no such file or folder (and not a hub dataset id like 'org/name')")
