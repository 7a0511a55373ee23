"""Image folders: images with sidecar captions, and the Hugging Face imagefolder layout."""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator

import orjson

from vlmlint.readers.files import is_regular_file, outside_target
from vlmlint.readers.layouts import ImageResolver, row_to_sample
from vlmlint.readers.manifest import read_jsonl
from vlmlint.sample import RowProblem, Sample

IMAGE_EXTENSIONS = frozenset(
    {".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp", ".tif", ".tiff", ".jfif", ".avif", ".heic", ".ico"}
)
METADATA_FILES = ("metadata.jsonl", "metadata.csv")


def is_image_name(name: str) -> bool:
    return os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


def has_metadata(folder: str) -> bool:
    return any(is_regular_file(os.path.join(folder, name)) for name in METADATA_FILES)


def read_imagefolder(
    folder: str, *, layout: str | None, image_root: str | None, rel, allow_outside_root: bool = False
) -> Iterator[Sample]:
    """Hugging Face imagefolder: every metadata.jsonl / metadata.csv below the folder, in path order."""
    for directory, subdirs, files in os.walk(folder):
        subdirs.sort()
        for name in METADATA_FILES:  # the first one present, as datasets reads one per folder
            path = os.path.join(directory, name)
            if name in files and is_regular_file(path):
                break
        else:
            continue
        outside = None if allow_outside_root else outside_target(path, folder)
        if outside is not None:
            message = f"data file {rel(path)} is a symlink to {outside}, outside the dataset folder: not read"
            yield Sample(source=rel(path), index=0, problems=(RowProblem("VLM104", message),))
        elif name == "metadata.jsonl":
            yield from read_jsonl(path, layout=layout or "captions", image_root=image_root, source=rel(path))
        else:
            yield from _read_metadata_csv(
                path, layout=layout or "captions", image_root=image_root, source=rel(path)
            )


def _read_metadata_csv(path: str, *, layout: str, image_root: str | None, source: str) -> Iterator[Sample]:
    resolve = ImageResolver(os.path.dirname(os.path.abspath(path)), image_root)
    with open(path, newline="", encoding="utf-8-sig", errors="replace") as handle:
        reader = csv.DictReader(handle)
        for index, row in enumerate(reader):
            # DictReader's line_num is the last physical line read: the row's own line for one-line rows.
            yield row_to_sample(
                row, layout=layout, resolve=resolve, source=source, index=index, line=reader.line_num
            )


class _OutsideCaption(Exception):
    """A sidecar caption that is a symlink out of the folder: not read."""


def _sidecar_caption(image_path: str, folder: str | None) -> str:
    """foo.txt, else foo.json, beside foo.jpg; with `folder`, one a symlink takes out of it is refused."""
    stem = os.path.splitext(image_path)[0]
    for path in (stem + ".txt", stem + ".json"):
        if not is_regular_file(path):
            continue  # absent, or a FIFO or device that would block the read
        outside = None if folder is None else outside_target(path, folder)
        if outside is not None:
            raise _OutsideCaption(f"caption file {os.path.basename(path)} is a symlink to {outside}")
        if path.endswith(".txt"):
            with open(path, encoding="utf-8", errors="replace") as handle:
                return handle.read().strip()
        try:
            with open(path, "rb") as handle:
                data = orjson.loads(handle.read())
        except (OSError, orjson.JSONDecodeError):
            return ""
        if isinstance(data, dict):
            for key in ("caption", "text"):
                if isinstance(data.get(key), str):
                    return data[key]
        return ""
    return ""


def read_sidecar_folder(
    folder: str, *, image_root: str | None, rel, allow_outside_root: bool = False
) -> Iterator[Sample]:
    """Every image below the folder, captioned by foo.txt or foo.json beside foo.jpg."""
    resolve = ImageResolver(folder, None)
    index = 0
    for directory, subdirs, files in os.walk(folder):
        subdirs.sort()
        for name in sorted(files):
            if not is_image_name(name):
                continue
            path = os.path.join(directory, name)
            try:
                caption = _sidecar_caption(path, None if allow_outside_root else folder)
            except _OutsideCaption as exc:
                problem = RowProblem("VLM104", f"{exc}, outside the dataset folder: not read")
                yield Sample(source=rel(path), index=index, problems=(problem,))
            else:
                row = {"file_name": os.path.relpath(path, folder), "text": caption}
                yield row_to_sample(row, layout="captions", resolve=resolve, source=rel(path), index=index)
            index += 1
