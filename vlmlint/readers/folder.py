"""Image folders: images with sidecar captions, and the Hugging Face imagefolder layout."""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator
from dataclasses import replace

import orjson

from vlmlint.fileio import FileTooLarge, NotRegularFile, read_regular
from vlmlint.readers.base import ReadOptions
from vlmlint.readers.files import DatasetError, SkippedFolder, is_regular_file, outside_target, walk
from vlmlint.readers.layouts import ImageResolver, row_to_sample
from vlmlint.readers.manifest import read_jsonl
from vlmlint.readers.rowsource import RowSource
from vlmlint.records import RowProblem, Sample

IMAGE_EXTENSIONS = frozenset(
    {".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp", ".tif", ".tiff", ".jfif", ".avif", ".heic", ".ico"}
)
METADATA_FILES = ("metadata.jsonl", "metadata.csv")
# A sidecar caption (foo.txt / foo.json beside foo.jpg) is read whole up to this size; a larger one is not.
MAX_SIDECAR_BYTES = 16 * 2**20
# A metadata.csv line is read up to this many characters; a longer one stops the file (VLM101).
MAX_CSV_LINE_CHARS = 16 * 2**20


def is_image_name(name: str) -> bool:
    return os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


def has_metadata(folder: str) -> bool:
    return any(is_regular_file(os.path.join(folder, name)) for name in METADATA_FILES)


def read_imagefolder(folder: str, options: ReadOptions) -> Iterator[Sample]:
    """Hugging Face imagefolder: every metadata.jsonl / metadata.csv below the folder, in path order.

    Rows are captions unless `options.layout` says otherwise; image paths resolve against each
    metadata file's folder.
    """
    _no_columns(folder, options, "an imagefolder's metadata rows are file_name and a caption")
    rel = options.rel
    skipped: list[SkippedFolder] = []
    for directory, subdirs, files in walk(folder, skipped):
        subdirs.sort()
        yield from _skipped_samples(skipped, rel)
        for name in METADATA_FILES:  # the first one present, as datasets reads one per folder
            path = os.path.join(directory, name)
            if name in files and is_regular_file(path):
                break
        else:
            continue
        outside = None if options.allow_outside_root else outside_target(path, folder)
        if outside is not None:
            message = f"data file {rel(path)} is a symlink to {outside}, outside the dataset folder: not read"
            yield Sample(source=rel(path), index=0, problems=(RowProblem("VLM104", message),))
            continue
        layout = options.layout or "captions"
        origin = RowSource.of_file(path, rel(path), image_root=options.image_root, layout=layout)
        yield from (read_jsonl if name == "metadata.jsonl" else _read_metadata_csv)(path, origin)
    yield from _skipped_samples(skipped, rel)


def _no_columns(folder: str, options: ReadOptions, why: str) -> None:
    if options.columns is not None:
        raise DatasetError(f"{folder}: --columns maps the fields of manifests and tables; {why}")


def _skipped_samples(skipped: list[SkippedFolder], rel) -> Iterator[Sample]:
    """A VLM101 row for each folder the walk left out (too deep, too many entries); the list is emptied."""
    for folder in skipped:
        message = f"folder {rel(folder.path)}: {folder.reason}"
        yield Sample(source=rel(folder.path), index=0, problems=(RowProblem("VLM101", message),))
    skipped.clear()


class _LineTooLong(Exception):
    pass


def _bounded_lines(handle) -> Iterator[str]:
    """The file's lines for the csv module, each read with a bound (a file without newlines is not read whole)."""
    while True:
        line = handle.readline(MAX_CSV_LINE_CHARS + 1)
        if not line:
            return
        if len(line) > MAX_CSV_LINE_CHARS:
            raise _LineTooLong(f"a line is longer than {MAX_CSV_LINE_CHARS:,} characters")
        yield line


def _read_metadata_csv(path: str, origin: RowSource) -> Iterator[Sample]:
    """metadata.csv's rows, each parsed as `origin.layout`; paths resolve with a resolver of its own."""
    origin = replace(origin, own_resolver=True)
    with open(path, newline="", encoding="utf-8-sig", errors="replace") as handle:
        reader = csv.DictReader(_bounded_lines(handle))
        index = 0
        while True:
            try:
                row = next(reader, None)
            except (csv.Error, _LineTooLong) as exc:
                # An unclosed quote, a field over csv's limit (131,072 characters): csv cannot find the next
                # row's start with any certainty, so the rest of the file is not read.
                message = f"metadata.csv is malformed after row {index}: {exc}; the rest is not read"
                line = reader.line_num or None
                problems = (RowProblem("VLM101", message),)
                yield Sample(source=origin.source, index=index, line=line, problems=problems)
                return
            if row is None:
                return
            if None in row:  # more fields than the header names: DictReader files them under None
                extra = row.pop(None)
                row["__extra_fields__"] = extra
            # DictReader's line_num is the last physical line read: the row's own line for one-line rows.
            yield origin.sample(row, index, origin.layout, reader.line_num)
            index += 1


class _OutsideCaption(Exception):
    """A sidecar caption that is a symlink out of the folder: not read."""


class _CaptionTooLarge(Exception):
    """A sidecar caption above MAX_SIDECAR_BYTES: not read."""


def _sidecar_caption(image_path: str, folder: str | None) -> str:
    """foo.txt, else foo.json, beside foo.jpg; with `folder`, one a symlink takes out of it is refused."""
    stem = os.path.splitext(image_path)[0]
    for path in (stem + ".txt", stem + ".json"):
        if not is_regular_file(path):
            continue  # absent, or a FIFO or device that would block the read
        outside = None if folder is None else outside_target(path, folder)
        if outside is not None:
            raise _OutsideCaption(f"caption file {os.path.basename(path)} is a symlink to {outside}")
        try:
            raw = read_regular(path, MAX_SIDECAR_BYTES)  # no FIFO swapped in after the check blocks it
        except FileTooLarge as exc:
            name = os.path.basename(path)
            if exc.size is None:  # grew after fstat (or a sparse file's size lied)
                raise _CaptionTooLarge(
                    f"caption file {name} is larger than {MAX_SIDECAR_BYTES:,} bytes: not read"
                ) from None
            raise _CaptionTooLarge(
                f"caption file {name} is {exc.size:,} bytes, above {MAX_SIDECAR_BYTES:,}: not read"
            ) from None
        except (OSError, NotRegularFile):
            return ""
        if path.endswith(".txt"):
            return raw.decode("utf-8", errors="replace").strip()
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return ""
        if isinstance(data, dict):
            for key in ("caption", "text"):
                if isinstance(data.get(key), str):
                    return data[key]
        return ""
    return ""


def read_sidecar_folder(folder: str, options: ReadOptions) -> Iterator[Sample]:
    """Every image below the folder, captioned by foo.txt or foo.json beside foo.jpg.

    Each image is its own caption row, named by its path; `options.image_root` does not apply.
    """
    _no_columns(folder, options, "a folder of images is read with their sidecar captions")
    rel, allow_outside_root = options.rel, options.allow_outside_root
    resolve = ImageResolver(folder, None)
    index = 0
    skipped: list[SkippedFolder] = []
    for directory, subdirs, files in walk(folder, skipped):
        subdirs.sort()
        yield from _skipped_samples(skipped, rel)
        for name in sorted(files):
            if not is_image_name(name):
                continue
            path = os.path.join(directory, name)
            try:
                caption = _sidecar_caption(path, None if allow_outside_root else folder)
            except _OutsideCaption as exc:
                problem = RowProblem("VLM104", f"{exc}, outside the dataset folder: not read")
                yield Sample(source=rel(path), index=index, problems=(problem,))
            except _CaptionTooLarge as exc:
                yield Sample(source=rel(path), index=index, problems=(RowProblem("VLM101", str(exc)),))
            else:
                row = {"file_name": os.path.relpath(path, folder), "text": caption}
                yield row_to_sample(row, layout="captions", resolve=resolve, source=rel(path), index=index)
            index += 1
    yield from _skipped_samples(skipped, rel)
