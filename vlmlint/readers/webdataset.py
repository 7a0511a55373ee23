"""WebDataset tar shards: each sample is the run of tar members that share a key, read as a stream.

A member's key is its path up to the first dot of its file name, the rest is its extension
(`dir/000042.seg.png`: key `dir/000042`, extension `seg.png`), as the webdataset library splits them;
consecutive members with one key make one sample. The shard is read front to back with tarfile's
stream mode (gzip, bz2 and xz shards too) and nothing is extracted to disk: images are read as bytes.

Each sample becomes the row a manifest would hold, then goes through the same layout parsing:
- `KEY.json` holding a conversation (llava, sharegpt, openai, alpaca or pretokenized fields): that
  row, its images being the sample's image members (added where the row names none, or put in place
  of the references that name a member: `"000042.jpg"`, `"jpg"`);
- otherwise a caption row: the sample's first image member and its caption, from `KEY.txt`, else the
  "caption" or "text" of `KEY.json`, else empty. Other members (`.cls`, ...) are ignored.

A sample without an image or a conversation, an unreadable or truncated shard (the samples before the
damage are kept), a member above MAX_MEMBER_BYTES: each is one VLM101 row, and the scan goes on with
the next shard. Samples are numbered from 0 in each shard; they have no line.
"""

from __future__ import annotations

import glob
import os
import re
import tarfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from vlmlint.readers.fingerprint import hash_bytes
from vlmlint.readers.folder import IMAGE_EXTENSIONS
from vlmlint.readers.layouts import ImageResolver, detect_layout, row_to_sample
from vlmlint.readers.manifest import _FileLayout
from vlmlint.sample import RowProblem, Sample

SHARD_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")
# A member is read into memory whole; a larger one (no real image or caption is) is reported instead.
MAX_MEMBER_BYTES = 256 * 2**20
# The row field that holds a conversation layout's images.
_IMAGE_FIELD = {"llava": "image", "sharegpt": "images", "openai": "images", "alpaca": "images"}
_BRACES = re.compile(r"\{([^{}]*)\}")
_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)$")


def is_shard_name(name: str) -> bool:
    return name.lower().endswith(SHARD_SUFFIXES)


def is_shard_pattern(target: str) -> bool:
    """A brace pattern (`shards/train-{000..099}.tar`) or a glob (`shards/*.tar`), not an existing path."""
    return not os.path.exists(target) and (bool(_BRACES.search(target)) or glob.has_magic(target))


def expand_braces(pattern: str) -> list[str]:
    """`a-{000..002}.tar` -> a-000.tar, a-001.tar, a-002.tar; `{x,y}` lists; several groups multiply.

    Numbers keep the width of the range's first bound when it is zero-padded (webdataset's braceexpand).
    """
    match = _BRACES.search(pattern)
    if match is None:
        return [pattern]
    head, tail, body = pattern[: match.start()], pattern[match.end() :], match.group(1)
    bounds = _RANGE.match(body)
    if bounds:
        first, last = bounds.group(1), bounds.group(2)
        width = len(first) if first.lstrip("-").startswith("0") and len(first.lstrip("-")) > 1 else 0
        start, stop = int(first), int(last)
        step = 1 if stop >= start else -1
        choices = [str(n).zfill(width) for n in range(start, stop + step, step)]
    else:
        choices = body.split(",")
    return [head + choice + rest for choice in choices for rest in expand_braces(tail)]


def shard_paths(pattern: str) -> list[str]:
    """The shards a pattern names: brace expansion in order, each part globbed (sorted) if it has magic."""
    found: list[str] = []
    for path in expand_braces(pattern):
        found.extend(sorted(glob.glob(path)) if glob.has_magic(path) else [path])
    return found


@dataclass
class _Group:
    key: str
    members: dict[str, tuple[str, bytes]] = field(default_factory=dict)  # extension -> (name, bytes)
    order: list[str] = field(default_factory=list)  # extensions in tar order
    problems: list[str] = field(default_factory=list)


def _split_name(name: str) -> tuple[str, str] | None:
    """(key, extension) as webdataset splits a member name; None for names it skips."""
    folder, _, base = name.rpartition("/")
    if not base or base.startswith(".") or "." not in base:
        return None  # no extension, hidden files, macOS ._ resource forks
    stem, _, extension = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), extension.lower()


def _groups(path: str) -> Iterator[_Group | str]:
    """The shard's samples in order; a string in their place says why the rest could not be read."""
    group: _Group | None = None
    try:
        handle = open(path, "rb")  # noqa: SIM115 (closed below)
    except OSError as exc:
        yield f"shard cannot be opened: {exc.strerror or exc}"
        return
    try:
        with handle, tarfile.open(fileobj=handle, mode="r|*") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                split = _split_name(member.name)
                if split is None:
                    continue
                key, extension = split
                if group is None or key != group.key:
                    if group is not None:
                        yield group
                    group = _Group(key)
                if member.size > MAX_MEMBER_BYTES:
                    group.problems.append(
                        f"member {member.name} is {member.size} bytes, above {MAX_MEMBER_BYTES}: not read"
                    )
                    continue
                extracted = tar.extractfile(member)
                data = extracted.read() if extracted is not None else b""
                if extension in group.members:
                    group.problems.append(f"member {member.name} appears twice in one sample")
                    continue
                group.members[extension] = (member.name, data)
                group.order.append(extension)
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        where = f"from sample {group.key!r} on" if group is not None else "from its start"
        yield f"shard cannot be read {where} (truncated or not a tar file?): {type(exc).__name__}: {exc}"
        return
    if group is not None:
        yield group


def _is_image(extension: str) -> bool:
    return "." + extension.rsplit(".", 1)[-1] in IMAGE_EXTENSIONS


def _caption(group: _Group, meta: Any) -> str:
    if "txt" in group.members:
        return group.members["txt"][1].decode("utf-8", errors="replace").strip()
    if isinstance(meta, Mapping):
        for key in ("caption", "text"):
            if isinstance(meta.get(key), str):
                return meta[key]
    return ""


def _with_images(row: dict[str, Any], layout: str, images: dict[str, dict[str, Any]], ordered: list) -> None:
    """Give a conversation row the sample's image members: where it names none, or by name."""

    def member(value: Any) -> Any:
        return images.get(value, value) if isinstance(value, str) else value

    name = _IMAGE_FIELD.get(layout)
    if name is None:
        return
    value = row.get(name)
    if value is None:
        if ordered and not (layout == "openai" and _inline_images(row)):
            row[name] = ordered[0] if layout == "llava" and len(ordered) == 1 else ordered
    elif isinstance(value, list):
        row[name] = [member(item) for item in value]
    else:
        row[name] = member(value)
    if layout == "openai":
        for turn in row.get("messages", row.get("conversations")) or ():
            for part in (turn.get("content") if isinstance(turn, Mapping) else None) or ():
                if isinstance(part, dict) and part.get("type") in ("image", "image_url"):
                    for key in ("image", "url", "path", "image_url"):
                        if isinstance(part.get(key), str):
                            part[key] = member(part[key])


def _inline_images(row: Mapping[str, Any]) -> bool:
    """An openai row whose image parts carry their own reference."""
    for turn in row.get("messages", row.get("conversations")) or ():
        for part in (turn.get("content") if isinstance(turn, Mapping) else None) or ():
            if isinstance(part, Mapping) and part.get("type") in ("image", "image_url"):
                if any(part.get(key) is not None for key in ("image", "url", "path", "image_url")):
                    return True
    return False


def _problem(source: str, index: int, key: str | None, message: str) -> Sample:
    return Sample(
        source=source,
        index=index,
        key=key,
        problems=(RowProblem("VLM101", message),),
        fingerprint=hash_bytes(f"{key}:{message}".encode()),
    )


def _sample(
    group: _Group,
    *,
    index: int,
    source: str,
    forced: str | None,
    file_layout: _FileLayout,
    resolve: ImageResolver,
) -> Sample:
    if group.problems:
        return _problem(source, index, group.key, f"sample {group.key!r}: " + "; ".join(group.problems))
    images = {
        extension: {"bytes": data, "path": name}
        for extension, (name, data) in group.members.items()
        if _is_image(extension)
    }
    ordered = [images[extension] for extension in group.order if extension in images]
    by_name = {
        alias: struct
        for extension, struct in images.items()
        for alias in (extension, struct["path"], struct["path"].rpartition("/")[2])
    }
    meta: Any = None
    if "json" in group.members:
        try:
            meta = orjson.loads(group.members["json"][1])
        except orjson.JSONDecodeError as exc:
            return _problem(source, index, group.key, f"{group.members['json'][0]} is not valid JSON: {exc}")
    # Which row the sample makes is its own content's call; the shard's layout then judges the row.
    chosen = forced or (detect_layout(meta) if isinstance(meta, dict) else None)
    if isinstance(meta, dict) and chosen not in (None, "captions"):
        row = meta
        _with_images(row, chosen, by_name, ordered)
    elif ordered:
        row = {"image": ordered[0], "text": _caption(group, meta)}
    else:
        members = ", ".join(name for name, _ in group.members.values())
        return _problem(source, index, group.key, f"sample {group.key!r} has no image member ({members})")
    sample = row_to_sample(
        row,
        layout=file_layout.for_row(row),
        resolve=resolve,
        source=source,
        index=index,
        from_first_row=file_layout.detected,
    )
    return replace(sample, key=group.key)


def read_webdataset(
    path: str, *, layout: str | None, image_root: str | None, source: str
) -> Iterator[Sample]:
    """The samples of one tar shard, in tar order (see the module docstring)."""
    resolve = ImageResolver(os.path.dirname(os.path.abspath(path)), image_root)
    file_layout = _FileLayout(layout)
    index = 0
    for group in _groups(path):
        if isinstance(group, str):
            yield _problem(source, index, None, group)
            return
        yield _sample(
            group, index=index, source=source, forced=layout, file_layout=file_layout, resolve=resolve
        )
        index += 1
