"""JSON and JSONL manifests, streamed one row at a time.

JSONL is read line by line (orjson); a JSON array is streamed item by item with ijson so that a
665k-row LLaVA mix never sits in memory whole. The layout is detected from the file's first object.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from hashlib import blake2b
from typing import Any, NamedTuple

import orjson

from vlmlint.fileio import FileTooLarge, NotRegularFile, read_regular
from vlmlint.readers.batches import RowBatch
from vlmlint.readers.files import DatasetError
from vlmlint.readers.fingerprint import hash_bytes
from vlmlint.readers.rowsource import Convert, FileLayout, RowSource, travels
from vlmlint.records import RowProblem, Sample

# A JSONL line longer than this is reported (VLM101) and skipped unparsed: memory stays bounded by it
# whatever the file holds (a 10 GB file without a newline). Real rows are kilobytes; stored
# pixel_values belong in parquet/arrow files, which are read in batches.
MAX_LINE_BYTES = 64 * 2**20
_WIDE_BOMS = (  # UTF-32 first: its little-endian mark starts with UTF-16's
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\xfe\xff", "UTF-16"),
    (b"\xff\xfe", "UTF-16"),
)


def _malformed(
    source: str, index: int, line: int | None, message: str, raw: bytes, fingerprint: str | None = None
) -> Sample:
    problems = (RowProblem("VLM101", message),)
    fingerprint = fingerprint or hash_bytes(raw)
    return Sample(source=source, index=index, line=line, problems=problems, fingerprint=fingerprint)


def _check_encoding(path: str) -> None:
    """JSON manifests are UTF-8 (RFC 8259; trainers' json.load too): a UTF-16/32 file is refused whole."""
    with open(path, "rb") as handle:
        start = handle.read(4)
    for mark, encoding in _WIDE_BOMS:
        if start.startswith(mark):
            raise DatasetError(
                f"{path}: {encoding} text (byte-order mark), but JSON manifests are read as UTF-8; "
                f"convert it, e.g. iconv -f {encoding} -t UTF-8"
            )


def _rest_of_line(handle, first: bytes) -> tuple[int, str]:
    """Read past an over-long line in bounded chunks: its length and content hash, nothing kept."""
    digest = blake2b(first, digest_size=16)
    length = len(first)
    while chunk := handle.readline(2**20):
        length += len(chunk)
        digest.update(chunk)
        if chunk.endswith(b"\n"):
            break
    return length, digest.hexdigest()


def _lines(handle) -> Iterator[tuple[bytes, bool]]:
    """The file's lines, each at most MAX_LINE_BYTES + 1 bytes; (line, whole) with whole False for a cut one."""
    while raw := handle.readline(MAX_LINE_BYTES + 1):
        yield raw, len(raw) <= MAX_LINE_BYTES or raw.endswith(b"\n")


@dataclass(frozen=True)
class LineBatch(RowBatch):
    """JSONL lines not parsed yet, each with its row index and line number (readers/batches.py)."""

    source: str
    base_dir: str
    image_root: str | None
    layout: str | None
    from_first_row: bool
    rows: tuple[tuple[int, int, bytes], ...]  # (row index, line number, the line's bytes)
    convert: Convert | None = None  # one that travels (a ColumnMap)

    def __len__(self) -> int:
        return len(self.rows)

    def samples(self) -> list[Sample]:
        origin = self._origin()
        return [self._parse(origin, *row) for row in self.rows]

    def sample(self, position: int) -> Sample:
        return self._parse(self._origin(), *self.rows[position])

    def split(self, count: int) -> tuple[LineBatch, LineBatch]:
        return replace(self, rows=self.rows[:count]), replace(self, rows=self.rows[count:])

    def _origin(self) -> RowSource:
        return RowSource(self.source, self.base_dir, self.image_root, convert=self.convert)

    def _parse(self, origin: RowSource, index: int, line: int, raw: bytes) -> Sample:
        return _parse_line(origin, raw, index, line, self.layout, self.from_first_row)


def _parse_line(
    origin: RowSource,
    raw: bytes,
    index: int,
    line: int,
    layout: str | FileLayout | None,
    from_first_row: bool,
) -> Sample:
    try:
        row = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return _malformed(origin.source, index, line, f"line is not valid JSON: {exc}", raw.strip())
    chosen = layout.for_row(row, origin) if isinstance(layout, FileLayout) else layout
    return origin.sample(row, index, chosen, line, from_first_row)


def read_jsonl(path: str, origin: RowSource, batch_rows: int = 0) -> Iterator[Sample | LineBatch]:
    """A JSONL manifest, line by line; `origin.convert` maps each decoded row first (LLaMA-Factory columns).

    `batch_rows` > 0: once the file's layout is known, rows come as LineBatch units of that many
    lines, parsed by whoever scans them (readers/batches.py); rows before that, and cut lines, as Samples.
    """
    _check_encoding(path)
    yield from _units(_jsonl_rows, path, origin, batch_rows)


def _units(
    rows_of: Callable[[_ManifestRead], Iterator[Sample | _Raw]], path: str, origin: RowSource, batch_rows: int
) -> Iterator[Sample | LineBatch]:
    """A manifest's rows (`rows_of`: _jsonl_rows or _array_rows), in LineBatch units when batching."""
    file_layout = FileLayout(origin.layout)
    batching = batch_rows > 0 and travels(origin.convert)  # a converter closure may not go to a worker
    rows = rows_of(_ManifestRead(path, origin, file_layout, batching))
    yield from _in_batches(rows, batch_rows, origin, file_layout) if batching else rows


_Raw = tuple[int, int, bytes]  # (row index, line number, the row's JSON): parsed where it is scanned


class _ManifestRead(NamedTuple):
    """What _jsonl_rows and _array_rows read: the file, its rows' origin, and how rows come."""

    path: str
    origin: RowSource
    file_layout: FileLayout
    batching: bool


def _jsonl_rows(read: _ManifestRead) -> Iterator[Sample | _Raw]:
    """read_jsonl's rows: Samples, or with `batching` raw lines once the layout is known."""
    path, origin, file_layout, batching = read
    index = 0
    with open(path, "rb") as handle:
        for line_number, (raw, whole) in enumerate(_lines(handle), start=1):
            if not whole:
                length, fingerprint = _rest_of_line(handle, raw)
                message = f"line is longer than {MAX_LINE_BYTES // 2**20} MiB ({length:,} bytes); not parsed"
                yield _malformed(origin.source, index, line_number, message, b"", fingerprint)
                index += 1
                continue
            if line_number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]  # UTF-8 byte-order mark
            if not raw or raw.isspace():
                continue  # blank lines carry no row
            if batching and file_layout.value is not None:
                yield index, line_number, raw
            else:
                yield _parse_line(origin, raw, index, line_number, file_layout, file_layout.detected)
            index += 1


def _in_batches(
    rows: Iterator[Sample | _Raw], size: int, origin: RowSource, file_layout: FileLayout
) -> Iterator[Sample | LineBatch]:
    """Runs of raw rows as LineBatch units of at most `size` rows; Samples pass through, in order.

    The file's layout is known before its first raw row and does not change after it.
    """
    pending: list[_Raw] = []
    for row in rows:
        if isinstance(row, Sample):
            if pending:
                yield _batch(origin, file_layout, pending)
                pending = []
            yield row
        else:
            pending.append(row)
            if len(pending) >= size:
                yield _batch(origin, file_layout, pending)
                pending = []
    if pending:
        yield _batch(origin, file_layout, pending)


def _batch(origin: RowSource, file_layout: FileLayout, rows: list[_Raw]) -> LineBatch:
    return LineBatch(
        origin.source,
        origin.base_dir,
        origin.image_root,
        file_layout.value,
        file_layout.detected,
        tuple(rows),
        origin.convert,
    )


# A JSON file of settings a dataset carries (dataset_info.json, state.json, dataset_dict.json) above
# this is refused unread: real ones are kilobytes. orjson refuses nesting past 1024 levels.
MAX_CONFIG_BYTES = 16 * 2**20


def read_config_json(path: str) -> Any:
    """A dataset's own settings file, parsed; DatasetError (one line naming it) when too big or not JSON."""
    try:
        data = read_regular(path, MAX_CONFIG_BYTES)
    except (NotRegularFile, FileNotFoundError, NotADirectoryError):
        raise DatasetError(f"{path}: not a regular file") from None
    except FileTooLarge:
        raise DatasetError(f"{path}: larger than {MAX_CONFIG_BYTES // 2**20} MiB; not read") from None
    try:
        return orjson.loads(data.removeprefix(b"\xef\xbb\xbf"))
    except orjson.JSONDecodeError as exc:
        raise DatasetError(f"{path}: not readable JSON: {exc}") from None


def _first_significant_byte(path: str) -> bytes:
    with open(path, "rb") as handle:
        chunk = handle.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    return chunk[:1]


def read_json(path: str, origin: RowSource, batch_rows: int = 0) -> Iterator[Sample | LineBatch]:
    """A .json manifest: a top-level array streamed with ijson, or JSONL content under a .json name."""
    _check_encoding(path)
    first = _first_significant_byte(path)
    if first != b"[":
        # JSON Lines saved as .json (or one row): the JSONL reader handles both.
        yield from read_jsonl(path, origin, batch_rows)
        return
    yield from _units(_array_rows, path, origin, batch_rows)


def _one_object(path: str) -> dict[str, Any] | None:
    """The file's content when it is one JSON object written over several lines and no dataset row.

    A one-line object is a JSONL file of one row; an object a layout reads is that row.
    """
    from vlmlint.readers.layouts import detect_layout

    try:
        data = read_regular(path, MAX_CONFIG_BYTES)
    except (NotRegularFile, FileNotFoundError, NotADirectoryError, FileTooLarge):
        return None
    data = data.removeprefix(b"\xef\xbb\xbf").strip()
    if b"\n" not in data:
        return None
    try:
        whole = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(whole, dict) or detect_layout(whole) is not None:
        return None
    return whole


def _array_rows(read: _ManifestRead) -> Iterator[Sample | _Raw]:
    """A JSON array's elements, streamed with ijson: Samples, or with `batching` compact JSON."""
    path, origin, file_layout, batching = read
    import ijson  # streaming parser with a C backend

    from vlmlint.readers.array_lines import ArrayElementLines, ElementLimit

    index = 0
    # yajl's C backend refuses integers outside 64 bits with use_float ("integer overflow", even -2**63):
    # valid JSON, so the file is read again from the start by ijson's pure-Python backend, the rows
    # already given skipped, and goes on from there.
    for backend in (ijson, ijson.get_backend("python")):
        given, index = index, 0
        with open(path, "rb") as raw:
            handle = ArrayElementLines(raw)  # notes the line each element starts on as ijson reads
            try:
                for row in backend.items(handle, "item", use_float=True):
                    line = handle.take()
                    if index < given:
                        index += 1
                        continue
                    # A worker parses the element again from compact JSON: only where that gives back
                    # this very row (not for ints beyond 64 bits, infinities, lone surrogates).
                    element = _reencoded(row) if batching and file_layout.value is not None else None
                    if element is not None and line is not None:
                        yield index, line, element
                    else:
                        yield file_layout.sample(origin, row, index, line)
                    index += 1
                return
            except (ijson.JSONError, ElementLimit) as exc:
                if backend is ijson and "integer overflow" in _first_line(exc):
                    continue
                message = (
                    f"JSON array is malformed after item {index}: {_first_line(exc)}; the rest is not read"
                )
                # No raw bytes to hash: the message stands for them.
                yield _malformed(origin.source, index, handle.take(), message, message.encode())
                return


def _reencoded(row: Any) -> bytes | None:
    """The row as compact JSON if parsing that gives back an equal row, else None."""
    try:
        element = orjson.dumps(row)
    except orjson.JSONEncodeError:
        return None
    return element if orjson.loads(element) == row else None


def _first_line(exc: Exception) -> str:
    """ijson's message without the excerpt of the file it quotes on the next lines (bytes at times)."""
    text = exc.args[0] if exc.args else str(exc)
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return (str(text).strip().splitlines() or [type(exc).__name__])[0].strip().rstrip(".")
