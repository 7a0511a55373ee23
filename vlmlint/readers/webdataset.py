"""WebDataset tar shards: each sample is the run of tar members that share a key, read as a stream.

A member's key is its path up to the first dot of its file name, the rest is its extension
(`dir/000042.seg.png`: key `dir/000042`, extension `seg.png`), as the webdataset library splits them;
consecutive members with one key make one sample. The shard is read front to back as a stream (gzip,
bz2 and xz shards too) and nothing is extracted to disk: images are read as bytes.

Each sample becomes the row a manifest would hold, then goes through the same layout parsing:
- `KEY.json` holding a conversation (llava, sharegpt, openai, alpaca or pretokenized fields): that
  row, its images being the sample's image members (added where the row names none, or put in place
  of the references that name a member: `"000042.jpg"`, `"jpg"`);
- otherwise a caption row: the sample's first image member and its caption, from `KEY.txt`, else the
  "caption" or "text" of `KEY.json`, else empty. Other members (`.cls`, ...) are ignored.

A sample without an image or a conversation, an unreadable or truncated shard (the samples before the
damage are kept), a member or header beyond the bounds below: each is one VLM101 row, and the scan goes
on with the next sample or shard. Samples are numbered from 0 in each shard; they have no line.

The tar is parsed here, 512-byte headers and all, not by tarfile: tarfile reads a GNU long name or a pax
header whole whatever size it declares, and keeps every member's TarInfo for the life of the archive.
Here a header body is refused by its declared size before it is read, only the members a sample uses
are read (images, .json, .txt; others are skipped), and a compressed shard stops where it has
decompressed to MAX_EXPANSION times its file size (a gzip bomb). A member whose header or name is bad
is a VLM101 on its sample, named as far as the header allows; a sample never vanishes without one.
Hidden files (`.x`, `._x`) and names without an extension are skipped, as webdataset skips them.
"""

from __future__ import annotations

import bz2
import glob
import gzip
import lzma
import os
import re
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import IO, Any

import orjson

from vlmlint.readers.fingerprint import hash_bytes
from vlmlint.readers.folder import IMAGE_EXTENSIONS
from vlmlint.readers.layouts import detect_layout
from vlmlint.readers.rowsource import FileLayout, RowSource
from vlmlint.records import RowProblem, Sample

SHARD_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")
# Bounds: beyond each, a VLM101 on the sample (or on the rest of the shard) instead of a read.
MAX_HEADER_BYTES = 64 * 2**10  # the body of a GNU long name / long link or a pax header
MAX_TEXT_MEMBER_BYTES = 16 * 2**20  # a .json or .txt member, read whole
# An image member travels with its sample as bytes (and stays with a flagged row in the report).
MAX_IMAGE_MEMBER_BYTES = 32 * 2**20
MAX_SAMPLE_BYTES = 64 * 2**20  # the members one sample keeps, together
MAX_SAMPLE_MEMBERS = 1024
MAX_SHARD_MEMBERS = 1_000_000  # headers of one shard (each costs time, even skipped)
# A compressed shard decompresses to at most this many times its file size (or _EXPANSION_FLOOR).
MAX_EXPANSION = 100
_EXPANSION_FLOOR = 256 * 2**20
_LISTED_PROBLEMS = 5  # a sample's message lists this many problems, then counts the others
_BLOCK = 512
_ZEROS = bytes(_BLOCK)
_SKIP_CHUNK = 2**20
_TEXT_EXTENSIONS = frozenset({"json", "txt"})
_REGULAR = frozenset({b"0", b"\0", b"7", b"S"})  # S: a GNU sparse file (reported, not read)
_NO_BODY = frozenset({b"1", b"2", b"3", b"4", b"5", b"6"})  # links, devices, folders, FIFOs: size ignored
_HEADERS = {b"L": "GNU long name", b"K": "GNU long link name", b"x": "pax", b"g": "pax global"}
_PAX_RECORD = re.compile(rb"(\d{1,20}) ([^=\n]+)=")
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


class _Damage(Exception):
    """The rest of the shard cannot be read; the message says why, `member` the member it broke off in."""

    def __init__(self, message: str, member: str | None = None):
        super().__init__(message)
        self.member = member


def _open_stream(handle: IO[bytes]) -> IO[bytes] | None:
    """A decompressing reader for a gzip, bz2 or xz shard (by its magic bytes); None for a plain tar."""
    magic = handle.read(6)
    handle.seek(0)
    if magic.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=handle, mode="rb")
    if magic.startswith(b"BZh"):
        return bz2.BZ2File(handle)
    if magic.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(handle)
    return None


class _Stream:
    """A shard's tar bytes front to back: seeks over what a plain tar skips, counts what a compressed one
    decompresses (and stops at MAX_EXPANSION times the file's size)."""

    def __init__(self, handle: IO[bytes]):
        self.size = os.fstat(handle.fileno()).st_size
        decompressed = _open_stream(handle)
        self.raw = decompressed or handle
        self.plain = decompressed is None
        self.limit = None if self.plain else max(self.size * MAX_EXPANSION, _EXPANSION_FLOOR)
        self.offset = 0  # bytes of tar consumed

    def read(self, count: int) -> bytes:
        if self.limit is not None and self.offset + count > self.limit:
            raise _Damage(
                f"it decompresses to more than {MAX_EXPANSION} times its size ({self.limit:,} bytes):"
                " a decompression bomb? the rest is not read"
            )
        chunks = []
        while count > 0:
            data = self.raw.read(count)
            if not data:
                break
            chunks.append(data)
            count -= len(data)
        data = b"".join(chunks)
        self.offset += len(data)
        return data

    def skip(self, count: int) -> bool:
        """Pass `count` bytes; False when the shard ends first."""
        if self.plain:
            if self.offset + count > self.size:
                return False
            self.raw.seek(count, os.SEEK_CUR)
            self.offset += count
            return True
        while count > 0:
            data = self.read(min(count, _SKIP_CHUNK))
            if not data:
                return False
            count -= len(data)
        return True


@dataclass(frozen=True)
class _Entry:
    """A regular-file member: its name, body size and, when it cannot be used, why (its body is skipped)."""

    name: str
    size: int
    problem: str | None = None


def _padded(size: int) -> int:
    return -(-size // _BLOCK) * _BLOCK


def _number(field_: bytes) -> int:
    """A header's numeric field: octal text, or GNU base-256 (first byte 0x80 / 0xff) for large values."""
    if field_[:1] in (b"\x80", b"\xff"):
        value = int.from_bytes(field_[1:], "big")
        return value - 256 ** (len(field_) - 1) if field_[0] == 0xFF else value
    text = field_.split(b"\0", 1)[0].strip()
    return int(text or b"0", 8)  # ValueError on anything else


def _text(data: bytes) -> str:
    # Invalid UTF-8 stays visible and distinct, and a report can still encode it.
    return data.split(b"\0", 1)[0].decode("utf-8", errors="backslashreplace")


def _checksum_ok(block: bytes) -> bool:
    stored = _number(block[148:156])
    unsigned = 256 + sum(block[:148]) + sum(block[156:])
    if stored == unsigned:
        return True
    signed = sum(b - 256 if b > 127 else b for b in block[:148] + block[156:])  # old tars summed signed
    return stored == 256 + signed


def _pax_records(body: bytes) -> dict[bytes, bytes]:
    """`LENGTH KEY=VALUE\n` records; ValueError when one is malformed."""
    records, position = {}, 0
    while position < len(body) and body[position:].strip(b"\0"):
        match = _PAX_RECORD.match(body, position)
        if match is None:
            raise ValueError("a record is not LENGTH KEY=VALUE")
        end = match.start(1) + int(match.group(1))
        if end <= match.end() or end > len(body) or body[end - 1 : end] != b"\n":
            raise ValueError("a record's length is wrong")
        records[match.group(2)] = body[match.end() : end - 1]
        position = end
    return records


@dataclass
class _Meta:
    """What long-name and pax headers said about the next member, and why it cannot be used."""

    long_name: str | None = None
    pax: dict[bytes, bytes] = field(default_factory=dict)
    problem: str | None = None


def _header_size(block: bytes, at: int) -> int:
    """A header block's size field, checked with its checksum (_Damage when it is not a tar header)."""
    try:
        if not _checksum_ok(block):
            raise ValueError
        size = _number(block[124:136])
    except ValueError:
        where = "it is not a tar file" if at == 0 else f"byte {at:,} is not a valid tar header"
        raise _Damage(f"{where} (truncated or not a tar file?)") from None
    if size < 0:
        raise _Damage(f"the header at byte {at:,} declares a negative size")
    return size


class _Tar:
    """A tar read header by header (ustar, GNU and pax), without tarfile: see the module docstring."""

    def __init__(self, stream: _Stream):
        self.stream = stream
        self.pending = 0  # body bytes of the last header, still to pass
        self.pending_what = ""
        self.pending_member: str | None = None  # the member those bytes belong to

    def _pass_pending(self) -> None:
        try:
            passed = not self.pending or self.stream.skip(self.pending)
        except _Damage as exc:  # a bomb inside a member: that member's sample is broken too
            raise _Damage(str(exc), self.pending_member) from None
        if not passed:
            raise _Damage(f"the shard is truncated: it ends inside {self.pending_what}", self.pending_member)
        self.pending, self.pending_member = 0, None

    def body(self, entry: _Entry) -> bytes:
        """The body of the entry just yielded, read whole (the caller checked its size)."""
        try:
            data = self.stream.read(entry.size)
        except _Damage as exc:
            raise _Damage(str(exc), entry.name) from None
        if len(data) < entry.size:
            raise _Damage(f"the shard is truncated: it ends inside member {entry.name}", entry.name)
        self.pending = _padded(entry.size) - entry.size
        return data

    def _header_body(self, size: int, what: str) -> bytes:
        data = self.stream.read(size)
        if len(data) < size:
            raise _Damage(f"the shard is truncated: it ends inside {what}")
        self.pending, self.pending_what = _padded(size) - size, what
        return data

    def _next_block(self, headers: int) -> tuple[int, bytes] | None:
        """The next header block and its offset; None at the end of the archive."""
        self._pass_pending()
        at = self.stream.offset
        block = self.stream.read(_BLOCK)
        if not block:
            if at == 0:
                raise _Damage("the file is empty")
            return None  # ends without the two zero blocks: tarfile accepts that too
        if len(block) < _BLOCK:
            raise _Damage(f"the shard is truncated: it ends inside the header at byte {at:,}")
        if block == _ZEROS:
            return None  # the end-of-archive marker
        if headers + 1 > MAX_SHARD_MEMBERS:
            raise _Damage(f"it has more than {MAX_SHARD_MEMBERS:,} members; the rest is not read")
        return at, block

    def _meta_header(self, kind: bytes, size: int, meta: _Meta) -> None:
        """A long-name, pax or global header: what it says goes into `meta` for the next member."""
        what = f"a {_HEADERS[kind]} header of {size:,} bytes"
        self.pending, self.pending_what = _padded(size), what
        if kind == b"g":
            return  # global settings: nothing vlmlint uses
        if size > MAX_HEADER_BYTES:
            meta.problem = (
                f"its {_HEADERS[kind]} header is {size:,} bytes, above {MAX_HEADER_BYTES:,}: not read"
            )
            return
        self.pending = 0
        data = self._header_body(size, what)
        if kind == b"L":
            meta.long_name = _text(data)
        elif kind == b"x":
            try:
                meta.pax = _pax_records(data)
                if b"size" in meta.pax and not meta.pax[b"size"].isdigit():
                    raise ValueError("its size is not a number")
            except ValueError as exc:
                meta.pax, meta.problem = {}, f"its pax header is malformed ({exc}): not read"

    def _skip_sparse_map(self, at: int) -> None:
        """More of a GNU sparse map follows in extension blocks: pass them."""
        while True:
            extension = self.stream.read(_BLOCK)
            if len(extension) < _BLOCK:
                raise _Damage(f"the shard is truncated: it ends inside the header at byte {at:,}")
            if not extension[504]:
                return

    def _regular(self, block: bytes, at: int, name: str, size: int, meta: _Meta) -> _Entry:
        kind, pax = block[156:157], meta.pax
        sparse = kind == b"S" or bool(pax) and any(key.startswith(b"GNU.sparse.") for key in pax)
        if kind == b"S" and block[482]:
            self._skip_sparse_map(at)
        if b"path" in pax:
            name = pax[b"path"].decode("utf-8", errors="backslashreplace")
        elif b"GNU.sparse.name" in pax:
            name = pax[b"GNU.sparse.name"].decode("utf-8", errors="backslashreplace")
        elif meta.long_name is not None:
            name = meta.long_name
        if b"size" in pax:
            size = int(pax[b"size"])
        problem = meta.problem
        if sparse and problem is None:
            problem = "it is a sparse file (tar --sparse), which vlmlint does not read"
        self.pending, self.pending_what = _padded(size), f"member {name}"
        self.pending_member = name
        return _Entry(name, size, problem)

    def entries(self) -> Iterator[_Entry]:
        meta = _Meta()
        headers = 0
        while (found := self._next_block(headers)) is not None:
            at, block = found
            headers += 1
            size = _header_size(block, at)
            kind = block[156:157]
            name = _text(block[:100])
            prefix = _text(block[345:500]) if block[257:263] == b"ustar\0" else ""
            if prefix and kind not in (b"L", b"K", b"S"):
                name = f"{prefix}/{name}"
            if kind in _HEADERS:
                self._meta_header(kind, size, meta)
                continue
            if kind in _REGULAR:
                yield self._regular(block, at, name, size, meta)
            elif kind not in _NO_BODY:
                self.pending, self.pending_what = _padded(size), f"the member at byte {at:,}"
            meta = _Meta()


@dataclass
class _Group:
    key: str
    members: dict[str, tuple[str, bytes | None]] = field(default_factory=dict)  # extension -> (name, bytes)
    order: list[str] = field(default_factory=list)  # extensions in tar order
    problems: list[str] = field(default_factory=list)
    more_problems: int = 0  # beyond the listed ones
    count: int = 0  # members seen
    kept: int = 0  # bytes held

    def problem(self, message: str, *, listed: bool = False) -> None:
        """`listed`: named even past _LISTED_PROBLEMS; a message already named is counted, not repeated."""
        if listed or (len(self.problems) < _LISTED_PROBLEMS and message not in self.problems):
            self.problems.append(message)
        else:
            self.more_problems += 1
        if self.kept:  # the sample is a VLM101 now: what it held is not needed
            self.members = {extension: (name, None) for extension, (name, _) in self.members.items()}
            self.kept = 0

    def add(self, entry: _Entry, extension: str, tar: _Tar) -> None:
        self.count += 1
        if self.count > MAX_SAMPLE_MEMBERS:
            if self.count == MAX_SAMPLE_MEMBERS + 1:
                self.problem(
                    f"it has more than {MAX_SAMPLE_MEMBERS:,} members; the others are not read", listed=True
                )
            return
        if entry.problem is not None:
            self.problem(f"member {entry.name}: {entry.problem}")
            return
        if extension in self.members:
            self.problem(f"member {entry.name} appears twice in one sample")
            return
        image = _is_image(extension)
        data = None
        if image or extension in _TEXT_EXTENSIONS:  # other members (.cls, ...) are not used: not read
            limit = MAX_IMAGE_MEMBER_BYTES if image else MAX_TEXT_MEMBER_BYTES
            if entry.size > limit:
                what = "an image member" if image else "a .json or .txt member"
                self.problem(
                    f"member {entry.name} is {entry.size:,} bytes, above {limit:,}, the most {what} may hold: not read"
                )
                return
            if self.kept + entry.size > MAX_SAMPLE_BYTES:
                self.problem(
                    f"member {entry.name}: the sample's members add up to more than {MAX_SAMPLE_BYTES:,} bytes: not read"
                )
                return
            if not self.problems:
                data = tar.body(entry)
                self.kept += len(data)
        self.members[extension] = (entry.name, data)
        self.order.append(extension)

    def message(self) -> str:
        more = f"; and {self.more_problems:,} more" if self.more_problems else ""
        return f"sample {self.key!r}: " + "; ".join(self.problems) + more


def _split_name(name: str) -> tuple[str, str] | None:
    """(key, extension) as webdataset splits a member name; None for names it skips."""
    folder, _, base = name.rpartition("/")
    if not base or base.startswith(".") or "." not in base:
        return None  # no extension, hidden files, macOS ._ resource forks
    stem, _, extension = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), extension.lower()


def _key(name: str) -> str:
    split = _split_name(name)
    return split[0] if split is not None else (name or "(no name)")


def _groups(path: str) -> Iterator[_Group | str]:
    """The shard's samples in order; a string in their place says why the rest could not be read."""
    group: _Group | None = None
    try:
        handle = open(path, "rb")  # noqa: SIM115 (closed below)
    except OSError as exc:
        yield f"shard cannot be opened: {exc.strerror or exc}"
        return
    try:
        with handle:
            tar = _Tar(_Stream(handle))
            for entry in tar.entries():
                split = _split_name(entry.name)
                if split is None:
                    if entry.problem is None:
                        continue
                    split = (_key(entry.name), "")  # a bad member is never skipped unsaid
                key, extension = split
                if group is None or key != group.key:
                    if group is not None:
                        yield group
                    group = _Group(key)
                group.add(entry, extension, tar)
    except _Damage as exc:
        broken = exc.member is not None and group is not None and _key(exc.member) == group.key
        if group is not None and not broken:  # the damage lies after it: the sample is whole
            yield group
            where = f"after sample {group.key!r}"
        else:
            where = f"from sample {group.key!r} on" if group is not None else "from its start"
        yield f"shard cannot be read {where}: {exc}"
        return
    except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError) as exc:  # a damaged compressed stream
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


def _sample(group: _Group, index: int, origin: RowSource, file_layout: FileLayout) -> Sample:
    source = origin.source
    if group.problems:
        return _problem(source, index, group.key, group.message())
    empty = [name for extension, (name, data) in group.members.items() if _is_image(extension) and not data]
    if empty:  # as {"bytes": b"", "path": name} the layout would look for a file of that name on disk
        return _problem(source, index, group.key, f"sample {group.key!r}: image member {empty[0]} is empty")
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
    chosen = origin.layout or (detect_layout(meta) if isinstance(meta, dict) else None)
    if isinstance(meta, dict) and chosen not in (None, "captions"):
        row = meta
        _with_images(row, chosen, by_name, ordered)
    elif ordered:
        row = {"image": ordered[0], "text": _caption(group, meta)}
    else:
        members = ", ".join(name for name, _ in group.members.values())
        return _problem(source, index, group.key, f"sample {group.key!r} has no image member ({members})")
    return replace(file_layout.sample(origin, row, index), key=group.key)


def read_shard(path: str, origin: RowSource, batch_rows: int = 0) -> Iterator[Sample]:
    """The samples of one tar shard, in tar order (see the module docstring); never batched.

    The shard's image paths resolve with a resolver of its own, not the process's shared one.
    """
    origin = replace(origin, own_resolver=True)
    file_layout = FileLayout(origin.layout)
    index = 0
    for group in _groups(path):
        if isinstance(group, str):
            yield _problem(origin.source, index, None, group)
            return
        yield _sample(group, index, origin, file_layout)
        index += 1


def read_webdataset(
    path: str, *, layout: str | None, image_root: str | None, source: str
) -> Iterator[Sample]:
    """read_shard with the file's layout, image root and name in reports as keywords."""
    yield from read_shard(path, RowSource.of_file(path, source, image_root=image_root, layout=layout))
