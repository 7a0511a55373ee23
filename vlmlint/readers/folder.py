"""Image folders: images with sidecar captions, and the Hugging Face imagefolder layout."""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator

import orjson

from vlmlint.readers.layouts import ImageResolver, row_to_sample
from vlmlint.readers.manifest import read_jsonl
from vlmlint.sample import Sample

IMAGE_EXTENSIONS = frozenset(
    {".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp", ".tif", ".tiff", ".jfif", ".avif", ".heic", ".ico"}
)
METADATA_FILES = ("metadata.jsonl", "metadata.csv")


def is_image_name(name: str) -> bool:
    return os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


def has_metadata(folder: str) -> bool:
    return any(os.path.isfile(os.path.join(folder, name)) for name in METADATA_FILES)


def read_imagefolder(folder: str, *, layout: str | None, image_root: str | None, rel) -> Iterator[Sample]:
    """Hugging Face imagefolder: every metadata.jsonl / metadata.csv below the folder, in path order."""
    for directory, subdirs, files in os.walk(folder):
        subdirs.sort()
        if "metadata.jsonl" in files:
            path = os.path.join(directory, "metadata.jsonl")
            yield from read_jsonl(path, layout=layout or "captions", image_root=image_root, source=rel(path))
        elif "metadata.csv" in files:
            path = os.path.join(directory, "metadata.csv")
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


def _sidecar_caption(image_path: str) -> str:
    stem = os.path.splitext(image_path)[0]
    if os.path.isfile(stem + ".txt"):
        with open(stem + ".txt", encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    if os.path.isfile(stem + ".json"):
        try:
            with open(stem + ".json", "rb") as handle:
                data = orjson.loads(handle.read())
        except (OSError, orjson.JSONDecodeError):
            return ""
        if isinstance(data, dict):
            for key in ("caption", "text"):
                if isinstance(data.get(key), str):
                    return data[key]
    return ""


def read_sidecar_folder(folder: str, *, image_root: str | None, rel) -> Iterator[Sample]:
    """Every image below the folder, captioned by foo.txt or foo.json beside foo.jpg."""
    resolve = ImageResolver(folder, None)
    index = 0
    for directory, subdirs, files in os.walk(folder):
        subdirs.sort()
        for name in sorted(files):
            if not is_image_name(name):
                continue
            path = os.path.join(directory, name)
            row = {"file_name": os.path.relpath(path, folder), "text": _sidecar_caption(path)}
            yield row_to_sample(row, layout="captions", resolve=resolve, source=rel(path), index=index)
            index += 1
