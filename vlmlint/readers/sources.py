"""The source kinds vlmlint reads, one Reader each (readers/base.py), in the order the registry asks them.

A new source kind is a module with its Reader and one line in readers/__init__.py READERS.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from vlmlint.readers.base import ReadOptions, display_path
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
from vlmlint.readers.manifest import read_jsonl
from vlmlint.readers.meta import read_json_file
from vlmlint.readers.rowsource import RowSource
from vlmlint.readers.webdataset import is_shard_name, is_shard_pattern, read_shard, shard_paths
from vlmlint.records import RowProblem, Sample

MANIFEST_READERS = {".jsonl": read_jsonl, ".ndjson": read_jsonl, ".json": read_json_file}
TABLE_READERS = {".parquet": read_parquet, ".arrow": read_arrow}


def read_file(path: str, options: ReadOptions) -> Iterator[Sample | RowBatch]:
    """One manifest, table or tar shard, by its name."""
    extension = os.path.splitext(path)[1].lower()
    reader = MANIFEST_READERS.get(extension) or TABLE_READERS.get(extension)
    if is_shard_name(path):
        reader = read_shard
    if reader is None:
        raise DatasetError(
            f"{path}: not a dataset file vlmlint reads (.json, .jsonl, .parquet, .arrow, .tar shards)"
        )
    if reader is read_shard and options.columns is not None:
        raise DatasetError(
            f"{path}: --columns maps the fields of manifests and tables; a webdataset shard's samples "
            "are read by their members' extensions"
        )
    origin = RowSource.of_file(
        path, options.rel(path), image_root=options.image_root, layout=options.layout, convert=options.columns
    )
    yield from reader(path, origin, options.batch_rows)


def outside_sample(path: str, target: str, rel: Callable[[str], str] = display_path) -> Sample:
    """A data file that is a symlink out of the scanned folder: a VLM104 problem, the file not read."""
    message = f"data file {rel(path)} is a symlink to {target}, outside the dataset folder: not read"
    return Sample(source=rel(path), index=0, problems=(RowProblem("VLM104", message),))


def _visible_files(folder: str) -> Iterator[tuple[str, list[str]]]:
    """(folder, file names) for `folder` and below it, in path order, hidden folders left out."""
    for directory, subdirs, files in walk(folder):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        yield directory, files


def dataset_files(folder: str) -> list[str]:
    """Manifests and tables in a folder and below it, in path order; dataset_info and the like skipped.

    Only regular files: a FIFO named data.jsonl would block the scan forever.
    """
    found = []
    for directory, files in _visible_files(folder):
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
    # An InternVL meta file reads its annotation files (with their image roots): not read twice.
    followed = {
        annotation for path in found if path.endswith(".json") for annotation in _meta_annotations(path)
    }
    return [path for path in found if os.path.abspath(path) not in followed]


def _meta_annotations(path: str) -> set[str]:
    from vlmlint.readers.manifest import _first_significant_byte, _one_object
    from vlmlint.readers.meta import is_internvl_meta

    if _first_significant_byte(path) != b"{":
        return set()
    whole = _one_object(path)
    if whole is None or not is_internvl_meta(whole):
        return set()
    folder = os.path.dirname(os.path.abspath(path))
    return {os.path.normpath(os.path.join(folder, entry["annotation"])) for entry in whole.values()}


def shard_files(folder: str) -> list[str]:
    """WebDataset tar shards in a folder and below it, in path order (a folder without manifests)."""
    found = []
    for directory, files in _visible_files(folder):
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


class _Whole:
    """A source read in one piece: its only part is itself."""

    def parts(self, target: str, options: ReadOptions) -> list[str]:
        return [target]


ReadWhole = Callable[[str, ReadOptions], Iterator[Sample | RowBatch]]


@dataclass(frozen=True)
class FolderReader(_Whole):
    """A folder of one kind (`is_kind`), read in one piece by `reads` with the user's options."""

    name: str
    is_kind: Callable[[str], bool]
    reads: ReadWhole

    def matches(self, target: str, options: ReadOptions) -> bool:
        return os.path.isdir(target) and self.is_kind(target)

    def read(self, target: str, options: ReadOptions) -> Iterator[Sample | RowBatch]:
        yield from self.reads(target, options)


class DatasetInfoReader(_Whole):
    """--dataset NAME: the named entries of a LLaMA-Factory data folder's dataset_info.json."""

    name = "llamafactory"

    def matches(self, target: str, options: ReadOptions) -> bool:
        return options.dataset_name is not None

    def read(self, target: str, options: ReadOptions) -> Iterator[Sample | RowBatch]:
        from vlmlint.readers.llamafactory import read_dataset_info

        yield from read_dataset_info(target, options)


class DataFileReader(_Whole):
    """One JSON/JSONL manifest, parquet/arrow table or tar shard."""

    name = "file"
    read = staticmethod(read_file)

    def matches(self, target: str, options: ReadOptions) -> bool:
        return os.path.isfile(target)


class PatternReader:
    """A brace or glob pattern (`shards/train-{000..099}.tar`): each file it names, in order."""

    name = "pattern"

    def matches(self, target: str, options: ReadOptions) -> bool:
        return is_shard_pattern(target)

    def read(self, target: str, options: ReadOptions) -> Iterator[Sample | RowBatch]:
        for path in pattern_files(target):
            yield from read_file(path, options)

    def parts(self, target: str, options: ReadOptions) -> list[str]:
        return pattern_files(target)


# A `save_to_disk` folder (state.json or dataset_dict.json).
SAVED_DATASET = FolderReader("save_to_disk", is_saved_dataset, read_saved_dataset)
# An imagefolder: metadata.jsonl / metadata.csv beside the images.
IMAGE_FOLDER = FolderReader("imagefolder", has_metadata, read_imagefolder)


class DataFolderReader:
    """A folder of manifests and tables, else of tar shards: each file, in path order.

    A data file that is a symlink out of the folder is a VLM104 problem and is not read, unless
    `allow_outside_root`.
    """

    name = "data_folder"

    def _files(self, target: str) -> list[str]:
        return dataset_files(target) or shard_files(target)

    def matches(self, target: str, options: ReadOptions) -> bool:
        return os.path.isdir(target) and bool(self._files(target))

    def read(self, target: str, options: ReadOptions) -> Iterator[Sample | RowBatch]:
        for path in self._files(target):
            outside = None if options.allow_outside_root else outside_target(path, target)
            if outside is not None:
                yield outside_sample(path, outside, options.rel)
            else:
                yield from read_file(path, options)

    def parts(self, target: str, options: ReadOptions) -> list[str]:
        """Each file, when none is a symlink out of the folder (else whole: the reader's check applies)."""
        files = self._files(target)
        root = os.path.realpath(target)
        if files and all(os.path.realpath(path).startswith(root + os.sep) for path in files):
            return files
        return [target]


def _holds_images(folder: str) -> bool:
    return any(is_image_name(name) for _, _, names in walk(folder) for name in names)


# A folder of images with sidecar captions (foo.jpg + foo.txt / foo.json).
SIDECAR_FOLDER = FolderReader("sidecar_folder", _holds_images, read_sidecar_folder)


class HubReader(_Whole):
    """A Hugging Face hub dataset id (`org/name`) that names no local path."""

    name = "hub"
    read = staticmethod(read_hub_dataset)

    def matches(self, target: str, options: ReadOptions) -> bool:
        return (
            not os.path.exists(target)
            and target.count("/") == 1
            and not target.startswith((".", "/"))
            and not os.path.exists(os.path.dirname(target))
        )
