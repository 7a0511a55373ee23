"""LLaMA-Factory data folders: `vlmlint scan data/ --dataset mllm_demo` reads a dataset_info.json entry.

Reproduces LLaMA-Factory 0.9.5 (src/llamafactory/data/parser.py get_dataset_list; data/loader.py,
_load_single_dataset; the entry's DatasetAttr and converters are readers/dataset_attr.py's):

- `file_name` is joined to the data folder; a folder means every file in it (one type); json, jsonl,
  parquet and arrow files are read (LLaMA-Factory also reads csv and txt: refused here);
- `formatting` alpaca (default), sharegpt or openai, with `columns` and `tags` as DatasetAttr maps
  them (sharegpt defaults: conversations, from/value, human/gpt/observation/function_call/system);
- images, videos and audios (the `videos` / `audios` columns) are resolved against the media folder (`--image-root`, LLaMA-Factory's media_dir), which
  defaults to the data folder itself (data_args.py: media_dir = dataset_dir), not the file's folder.

Each row is converted to a conversation the layouts module parses (readers/dataset_attr.py). Hub,
script and cloud entries (hf_hub_url, ms_hub_url, om_hub_url, script_url, cloud_file_name), ranking (DPO) and
KTO entries are refused: vlmlint reads local supervised fine-tuning data.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

from vlmlint.readers.base import ReadOptions
from vlmlint.readers.dataset_attr import DATA_CONFIG, DatasetAttr, converter
from vlmlint.readers.files import DatasetError, is_regular_file, outside_target
from vlmlint.readers.hf import read_arrow, read_parquet
from vlmlint.readers.manifest import read_config_json, read_json, read_jsonl
from vlmlint.readers.rowsource import RowSource
from vlmlint.records import Sample

__all__ = ["DATA_CONFIG", "DatasetAttr", "converter", "read_dataset_info", "read_llamafactory"]

READERS = {"json": read_json, "jsonl": read_jsonl, "parquet": read_parquet, "arrow": read_arrow}


def load_dataset_info(folder: str, allow_outside_root: bool = False) -> dict[str, Any]:
    """dataset_info.json, bounded (MAX_CONFIG_BYTES, 1024 levels); one a symlink takes out is refused."""
    path = os.path.join(folder, DATA_CONFIG)
    if not is_regular_file(path):
        raise DatasetError(
            f"{folder}: no {DATA_CONFIG} in this folder (--dataset reads a LLaMA-Factory data folder)"
        )
    outside = None if allow_outside_root else outside_target(path, folder)
    if outside is not None:
        raise DatasetError(f"{path}: a symlink to {outside}, outside the data folder: not read")
    info = read_config_json(path)
    if not isinstance(info, dict):
        raise DatasetError(f"{path}: must be a JSON object of dataset entries")
    return info


def data_files(folder: str, attr: DatasetAttr, allow_outside_root: bool = False) -> list[str]:
    """_load_single_dataset's files: the file, or every file of the folder, of one allowed type.

    The root rule of images holds for data files too: a file_name that is absolute, climbs out of
    the data folder or is a symlink out of it is refused before anything there is opened or listed.
    """
    local = os.path.join(folder, attr.file_name)
    if "\0" in attr.file_name:
        raise DatasetError(f"{DATA_CONFIG}: file_name {attr.file_name!r} is not a path")
    outside = None if allow_outside_root else outside_target(local, folder)
    if outside is not None:
        raise DatasetError(
            f"{os.path.join(folder, DATA_CONFIG)}: file_name {attr.file_name!r} names {outside}, outside the "
            "data folder: not read (--allow-outside-root reads it)"
        )
    if os.path.isdir(local):
        files = [os.path.join(local, name) for name in sorted(os.listdir(local))]
    elif os.path.isfile(local):
        files = [local]
    else:
        raise DatasetError(f"{local}: not found (file_name {attr.file_name!r} of {DATA_CONFIG})")
    kinds = {os.path.splitext(path)[1][1:].lower() for path in files}
    if len(kinds) != 1:
        raise DatasetError(f"{local}: LLaMA-Factory needs files of one type, found {sorted(kinds)}")
    kind = kinds.pop()
    if kind not in READERS:
        raise DatasetError(f"{local}: .{kind} files are not read by vlmlint (json, jsonl, parquet, arrow)")
    for path in files:
        if not is_regular_file(path):
            raise DatasetError(f"{path}: not a regular file")
        outside = None if allow_outside_root else outside_target(path, folder)
        if outside is not None:
            raise DatasetError(
                f"{path}: a symlink to {outside}, outside the data folder: not read (file_name "
                f"{attr.file_name!r} of {DATA_CONFIG}; --allow-outside-root reads it)"
            )
    return files


def read_llamafactory(
    target: str,
    dataset_name: str,
    *,
    image_root: str | None = None,
    rel: Callable[[str], str] = os.path.relpath,
    allow_outside_root: bool = False,
) -> Iterator[Sample]:
    """read_dataset_info with the options it uses as arguments."""
    options = ReadOptions(
        image_root=image_root, rel=rel, allow_outside_root=allow_outside_root, dataset_name=dataset_name
    )
    yield from read_dataset_info(target, options)


def read_dataset_info(target: str, options: ReadOptions) -> Iterator[Sample]:
    """The rows of each entry `options.dataset_name` names (comma-separated, as LLaMA-Factory's
    --dataset) in order; media paths resolve against `options.image_root`, else the data folder."""
    allow_outside_root = options.allow_outside_root
    folder = os.path.dirname(target) if os.path.basename(target) == DATA_CONFIG else target
    if not os.path.isdir(folder):
        raise DatasetError(f"{target}: --dataset needs a LLaMA-Factory data folder holding {DATA_CONFIG}")
    info = load_dataset_info(folder, allow_outside_root)
    names = [name.strip() for name in (options.dataset_name or "").split(",") if name.strip()]
    attrs = []
    for name in names:
        if name not in info:
            defined = ", ".join(sorted(info)) or "none"
            raise DatasetError(
                f"Undefined dataset {name!r} in {os.path.join(folder, DATA_CONFIG)}; defined: {defined}"
            )
        attrs.append(DatasetAttr.from_entry(name, info[name]))
    media_dir = options.image_root or folder  # data_args.media_dir defaults to dataset_dir
    for attr in attrs:
        convert = converter(attr)
        for path in data_files(folder, attr, allow_outside_root):
            reader = READERS[os.path.splitext(path)[1][1:].lower()]
            origin = RowSource.of_file(
                path, options.rel(path), image_root=media_dir, layout="sharegpt", convert=convert
            )
            yield from reader(path, origin)
