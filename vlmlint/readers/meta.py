"""A .json file that holds one JSON object and no rows: recognised, not read line by line as JSONL.

- An InternVL meta file (InternVL's internvl_chat/shell/data/*.json, read by
  internvl/train/internvl_chat_finetune.py build_datasets: `{"name": {"root", "annotation",
  "data_augment", "repeat_time", "length", ...}}`) is followed: each entry's annotation file (JSONL or
  JSON, InternVL's llava-like rows) is read with its images resolved against the entry's `root`. Paths
  are relative to the meta file's folder (InternVL's scripts give them relative to where training
  runs) and must stay inside it. `repeat_time` repeats rows and changes no row's count: ignored.
- A LLaMA-Factory dataset_info.json is followed as `--dataset` follows it, for every entry of local
  supervised data (hub, script, cloud, ranking and KTO entries are left out).
- Any other object (a config, a processor's preprocessor_config.json) is one VLM102 row naming its
  fields, not one VLM101 per line.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

from vlmlint.readers.base import ReadOptions, display_path
from vlmlint.readers.files import DatasetError, outside_target
from vlmlint.readers.manifest import (
    _check_encoding,
    _first_significant_byte,
    _one_object,
    read_json,
    read_jsonl,
)
from vlmlint.readers.rowsource import RowSource
from vlmlint.records import RowProblem, Sample


def read_json_file(path: str, origin: RowSource, batch_rows: int = 0) -> Iterator[Any]:
    """A .json file given to scan: one JSON object (dataset_info.json, an InternVL meta file, a config:
    not rows) is recognised here; anything else is a manifest (manifest.read_json)."""
    _check_encoding(path)
    if _first_significant_byte(path) == b"{":
        whole = _one_object(path)
        if whole is not None:
            yield from read_object_file(path, whole, origin, batch_rows)
            return
    yield from read_json(path, origin, batch_rows)


def is_internvl_meta(whole: Mapping[str, Any]) -> bool:
    return bool(whole) and all(
        isinstance(entry, Mapping) and isinstance(entry.get("annotation"), str) for entry in whole.values()
    )


def is_dataset_info(whole: Mapping[str, Any]) -> bool:
    return bool(whole) and all(
        isinstance(entry, Mapping)
        and any(
            key in entry
            for key in (
                "file_name",
                "hf_hub_url",
                "ms_hub_url",
                "om_hub_url",
                "script_url",
                "cloud_file_name",
            )
        )
        for entry in whole.values()
    )


def _local_sft_entries(whole: Mapping[str, Any]) -> list[str]:
    remote = ("hf_hub_url", "ms_hub_url", "om_hub_url", "script_url", "cloud_file_name")
    return [
        name
        for name, entry in whole.items()
        if isinstance(entry.get("file_name"), str)
        and not any(key in entry for key in remote)
        and not entry.get("ranking")
        and "kto_tag" not in (entry.get("columns") or {})
        and entry.get("formatting", "alpaca") in ("alpaca", "sharegpt", "openai")
    ]


def _inside(folder: str, relative: str, what: str, meta: str) -> str:
    path = os.path.normpath(os.path.join(folder, relative))
    if outside_target(path, folder) is not None or not (path + os.sep).startswith(
        os.path.abspath(folder) + os.sep
    ):
        raise DatasetError(f"{meta}: {what} {relative!r} leaves the meta file's folder: not read")
    return path


def read_object_file(
    path: str, whole: dict[str, Any], origin: RowSource, batch_rows: int = 0
) -> Iterator[Sample]:
    folder = os.path.dirname(os.path.abspath(path))
    if is_internvl_meta(whole):
        for name, entry in whole.items():
            annotation = _inside(folder, entry["annotation"], f"{name!r} annotation", path)
            root = entry.get("root")
            image_root = (
                _inside(folder, root, f"{name!r} root", path) if isinstance(root, str) and root else None
            )
            rows = RowSource.of_file(
                annotation,
                display_path(annotation),
                image_root=image_root,
                layout=origin.layout,
                convert=origin.convert,
            )
            reader = read_jsonl if annotation.endswith((".jsonl", ".ndjson")) else read_json
            if not os.path.isfile(annotation):
                raise DatasetError(f"{path}: {name!r} annotation {annotation} not found")
            yield from reader(annotation, rows, batch_rows)
        return
    if is_dataset_info(whole):
        names = _local_sft_entries(whole)
        if names and os.path.basename(path) == "dataset_info.json":
            from vlmlint.readers.llamafactory import read_dataset_info

            yield from read_dataset_info(
                folder, ReadOptions(image_root=origin.image_root, dataset_name=",".join(names))
            )
        return
    fields = sorted(str(key) for key in whole)[:20]
    message = (
        f"the file holds one JSON object (fields {fields}), not dataset rows: not an InternVL meta file "
        "nor a LLaMA-Factory dataset_info.json, so nothing in it is read"
    )
    yield Sample(
        source=origin.source, index=0, line=1, problems=(RowProblem("VLM102", message),), fields=tuple(fields)
    )
