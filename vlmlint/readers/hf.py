"""Hugging Face datasets: save_to_disk folders, local parquet / arrow files, and hub dataset ids.

Rows are read in Arrow batches and converted to Python one batch at a time. Image columns come out as
their stored {"bytes", "path"} structs: nothing is decoded, and nothing is cast (a cast would write
cache files next to the dataset).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from vlmlint.readers.base import ReadOptions
from vlmlint.readers.batches import RowBatch
from vlmlint.readers.files import DatasetError, is_regular_file, outside_target
from vlmlint.readers.manifest import read_config_json
from vlmlint.readers.rowsource import Convert, RowSource, travels
from vlmlint.records import RowProblem, Sample

BATCH_ROWS = 256


def is_saved_dataset(folder: str) -> bool:
    return any(os.path.isfile(os.path.join(folder, name)) for name in ("state.json", "dataset_dict.json"))


@dataclass(frozen=True)
class TableBatch(RowBatch):
    """An Arrow record batch (or table) of rows not converted yet (readers/batches.py)."""

    source: str
    base_dir: str
    image_root: str | None
    layout: str | None
    first_index: int
    table: Any  # pyarrow.RecordBatch or pyarrow.Table: sent to a worker as Arrow buffers
    convert: Convert | None = None  # one that travels (a ColumnMap)

    def __len__(self) -> int:
        return self.table.num_rows

    def samples(self) -> list[Sample]:
        return self._parse(python_rows(self.table), self.first_index)

    def sample(self, position: int) -> Sample:
        return self._parse(python_rows(self.table.slice(position, 1)), self.first_index + position)[0]

    def split(self, count: int) -> tuple[TableBatch, TableBatch]:
        head = replace(self, table=self.table.slice(0, count))
        return head, replace(self, table=self.table.slice(count), first_index=self.first_index + count)

    def _parse(self, rows: list[Any], first: int) -> list[Sample]:
        origin = RowSource(self.source, self.base_dir, self.image_root, convert=self.convert)
        return [_sample(origin, row, self.layout, first + k) for k, row in enumerate(rows)]


class _Unreadable(str):
    """A row Arrow cannot turn into Python values (e.g. a string column holding invalid UTF-8).

    A reader's batch stream may carry one in place of a row it did not read (beyond a bound).
    """


def python_rows(batch: Any) -> list[Any]:
    """A record batch's rows as dicts; a row that cannot be converted is an _Unreadable message.

    Why row by row on failure: one bad value must cost its own row (a VLM101 finding), not the file.
    """
    import pyarrow as pa

    try:
        return batch.to_pylist()
    except (pa.ArrowException, ValueError, OverflowError):  # OverflowError: a date64 past year 9999
        rows: list[Any] = []
        for position in range(batch.num_rows):
            try:
                rows.extend(batch.slice(position, 1).to_pylist())
            except (pa.ArrowException, ValueError, OverflowError) as exc:
                rows.append(_Unreadable(f"row cannot be read from the table: {type(exc).__name__}: {exc}"))
        return rows


def _sample(origin: RowSource, row: Any, layout: str | None, index: int) -> Sample:
    if isinstance(row, _Unreadable):
        return Sample(source=origin.source, index=index, problems=(RowProblem("VLM101", str(row)),))
    return origin.sample(row, index, layout)


def _rows_to_units(
    batches: Iterable[Any], origin: RowSource, batch_rows: int = 0
) -> Iterator[Sample | TableBatch]:
    """Arrow batches -> Samples, or TableBatch units once the layout is known (batch_rows > 0)."""
    index = 0
    chosen = origin.layout
    first = True  # no object row seen yet (a column map checks the first: RowSource.layout_of)
    for batch in batches:
        if isinstance(batch, _Unreadable):  # a row the reader did not read (beyond a bound)
            yield _sample(origin, batch, chosen, index)
            index += 1
            continue
        if batch_rows and travels(origin.convert) and chosen is not None:  # a converter closure stays
            yield TableBatch(
                origin.source, origin.base_dir, origin.image_root, chosen, index, batch, origin.convert
            )
            index += batch.num_rows
            continue
        for row in python_rows(batch):
            if chosen is None and isinstance(row, dict):
                chosen, first = origin.layout_of(row, first), False
            yield _sample(origin, row, chosen, index)
            index += 1


# ---- bounds: what a table's rows cost before they are turned into Python values ----------------------

# One string or binary value of a table above this is VLM101 on its row, never converted (JSON Lines
# has the same bound per line; an embedded image this large is beyond any bomb_pixels threshold).
MAX_VALUE_BYTES = 64 * 2**20
# A row whose values would take more than this as Python objects (estimated, ELEMENT_BYTES a value
# besides its bytes) is VLM101, not converted: a value Arrow stores once (dictionary, RLE, views)
# becomes one Python object per row, so a few KB of file can stand for gigabytes of rows.
MAX_ROW_BYTES = 256 * 2**20
# A record batch estimated above this is converted in smaller slices, a row at a time at worst.
MAX_BATCH_BYTES = 256 * 2**20
ELEMENT_BYTES = 32  # a Python object and its list slot, roughly: what any value costs besides its bytes


class _TooBig(Exception):
    """A batch, row or value beyond its bound (the message names the column and the bound)."""


class _Unsupported(Exception):
    """An Arrow type no Hugging Face dataset writes and whose cost is not estimated here."""


def _fixed_width(kind: Any) -> bool:
    try:
        return kind.bit_width > 0
    except ValueError:  # pyarrow raises it for variable-width types
        return False


def _view_lengths(array: Any):
    import numpy as np

    views = np.frombuffer(array.buffers()[1], dtype=np.int32).reshape(-1, 4)
    return views[array.offset : array.offset + len(array), 0].astype(np.int64)


def _value_lengths(array: Any):
    """Each value's byte length of a flat string/binary array (numpy), or None for other types."""
    import numpy as np
    import pyarrow as pa

    kind = array.type
    if pa.types.is_string_view(kind) or pa.types.is_binary_view(kind):
        return _view_lengths(array)
    wide = pa.types.is_large_string(kind) or pa.types.is_large_binary(kind)
    if wide or pa.types.is_string(kind) or pa.types.is_binary(kind):
        if not len(array):
            return np.zeros(0, dtype=np.int64)
        offsets = np.frombuffer(array.buffers()[1], dtype=np.int64 if wide else np.int32)
        return np.diff(offsets[array.offset : array.offset + len(array) + 1].astype(np.int64))
    return None


def _estimate(array: Any, budget: int, column: str) -> int:
    """What `array` (sliced) costs as Python objects, about; _TooBig past `budget` or a huge value."""
    import numpy as np
    import pyarrow as pa

    count = len(array)
    cost = count * ELEMENT_BYTES
    if cost > budget:
        raise _TooBig(f"column {column!r} holds {count:,} values")
    kind = array.type
    if isinstance(kind, pa.ExtensionType):
        return _estimate(array.storage, budget, column)
    lengths = _value_lengths(array)
    if lengths is None and pa.types.is_dictionary(kind):
        dictionary = _value_lengths(array.dictionary)
        if dictionary is None:
            if pa.types.is_nested(array.dictionary.type):
                raise _Unsupported(f"column {column!r} is a dictionary of {array.dictionary.type}")
            return cost + count * (
                max(1, kind.value_type.bit_width // 8) if _fixed_width(kind.value_type) else 8
            )
        indices = array.indices.fill_null(0).to_numpy(zero_copy_only=False)
        lengths = dictionary[indices] if len(dictionary) else np.zeros(count, dtype=np.int64)
    if lengths is not None:
        if count and int(lengths.max()) > MAX_VALUE_BYTES:
            raise _TooBig(
                f"column {column!r} holds a value of {int(lengths.max()):,} bytes "
                f"(bound {MAX_VALUE_BYTES // 2**20} MiB a value)"
            )
        cost += int(lengths.sum())
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_map(kind):
        if count:
            offsets = array.offsets
            first, last = offsets[0].as_py(), offsets[len(offsets) - 1].as_py()
            cost += _estimate(array.values.slice(first, last - first), budget - cost, column)
    elif pa.types.is_fixed_size_list(kind):
        size = kind.list_size
        cost += _estimate(array.values.slice(array.offset * size, count * size), budget - cost, column)
    elif pa.types.is_struct(kind):
        cost += count * ELEMENT_BYTES * 2  # each row's dict
        for position in range(kind.num_fields):
            name = f"{column}.{kind.field(position).name}"
            cost += _estimate(array.field(position), budget - cost, name)
    elif pa.types.is_null(kind):
        pass
    elif _fixed_width(kind):
        cost += count * max(1, kind.bit_width // 8)
    else:  # list views, run-end encoded, unions: a Hugging Face dataset writes none
        raise _Unsupported(f"column {column!r} has Arrow type {kind}")
    if cost > budget:
        raise _TooBig(f"column {column!r} holds about {cost:,} bytes of values")
    return cost


def _batch_cost(batch: Any, budget: int) -> int:
    cost = 0
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        chunks = column.chunks if hasattr(column, "chunks") else [column]
        for chunk in chunks:
            cost += _estimate(chunk, budget - cost, name)
    return cost


def _bounded(batches: Iterable[Any], path: str, validate: bool) -> Iterator[Any]:
    """Record batches whose rows fit the bounds; a row beyond one comes as an _Unreadable instead.

    `validate`: check each batch fully first (Arrow IPC files: the IPC reader checks only buffer
    sizes, and offsets pointing past a buffer would be read as they are).
    """
    import pyarrow as pa

    for batch in batches:
        if isinstance(batch, _Unreadable):
            yield batch
            continue
        try:
            if validate:
                batch.validate(full=True)
            _batch_cost(batch, MAX_BATCH_BYTES)
        except (_TooBig, pa.ArrowInvalid):
            yield from _row_slices(batch, path, validate)
        except _Unsupported as exc:
            raise DatasetError(
                f"{path}: {exc}, which vlmlint does not read (no Hugging Face dataset writes it)"
            ) from None
        else:
            yield batch


def _row_slices(batch: Any, path: str, validate: bool) -> Iterator[Any]:
    """A batch beyond MAX_BATCH_BYTES (or not valid) in runs of rows within it, each row checked."""
    import pyarrow as pa

    start, run_cost = 0, 0
    for position in range(batch.num_rows):
        row = batch.slice(position, 1)
        try:
            if validate:
                row.validate(full=True)
            cost = _batch_cost(row, MAX_ROW_BYTES)
        except (_TooBig, pa.ArrowInvalid) as exc:
            if position > start:
                yield batch.slice(start, position - start)
            start, run_cost = position + 1, 0
            if isinstance(exc, pa.ArrowInvalid):
                yield _Unreadable(f"row cannot be read from the table: {type(exc).__name__}: {exc}")
            else:
                bound = (
                    "" if "bound" in str(exc) else f", beyond the {MAX_ROW_BYTES // 2**20} MiB bound a row"
                )
                yield _Unreadable(f"row not read: {exc}{bound}")
            continue
        except _Unsupported as exc:
            raise DatasetError(
                f"{path}: {exc}, which vlmlint does not read (no Hugging Face dataset writes it)"
            ) from None
        if run_cost + cost > MAX_BATCH_BYTES and position > start:
            yield batch.slice(start, position - start)
            start, run_cost = position, 0
        run_cost += cost
    if batch.num_rows > start:
        yield batch.slice(start, batch.num_rows - start)


# ---- parquet: row groups and pages checked from the file's metadata before anything is decoded ---------

# A parquet page (one value at least) decompresses whole, and pyarrow takes some 4 times its size to
# decode it: a page above this is never decoded, and the rows of its row group are VLM101 (a few KB
# of zstd can declare gigabytes). Pages are about 1 MB; one value makes a page of its own size.
MAX_PAGE_BYTES = 128 * 2**20
_MAX_PAGE_HEADER = 2**20  # a page header (Thrift) above this: the row group is not read


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _skip(data: bytes, pos: int, kind: int, depth: int, in_field: bool) -> int:
    """Past one Thrift compact value of type `kind` (a field's bool lives in its header)."""
    if depth > 16:
        raise ValueError("nested too deep")
    if kind in (1, 2):
        return pos if in_field else pos + 1
    if kind == 3:
        return pos + 1
    if kind in (4, 5, 6):
        return _varint(data, pos)[1]
    if kind == 7:
        return pos + 8
    if kind == 8:
        size, pos = _varint(data, pos)
        return pos + size
    if kind in (9, 10):
        head = data[pos]
        pos += 1
        size, element = head >> 4, head & 0x0F
        if size == 15:
            size, pos = _varint(data, pos)
        for _ in range(size):
            pos = _skip(data, pos, element, depth + 1, False)
        return pos
    if kind == 11:
        size, pos = _varint(data, pos)
        if size:
            types = data[pos]
            pos += 1
            for _ in range(size):
                pos = _skip(data, pos, types >> 4, depth + 1, False)
                pos = _skip(data, pos, types & 0x0F, depth + 1, False)
        return pos
    if kind == 12:
        return _struct(data, pos, depth + 1)[1]
    raise ValueError(f"unknown Thrift type {kind}")


def _struct(data: bytes, pos: int, depth: int, wanted: tuple[int, ...] = ()) -> tuple[dict[int, int], int]:
    """A Thrift compact struct: the i32 fields named in `wanted`, and where the struct ends."""
    found: dict[int, int] = {}
    last = 0
    while True:
        byte = data[pos]
        pos += 1
        if byte == 0:
            return found, pos
        delta, kind = byte >> 4, byte & 0x0F
        if delta:
            last += delta
        else:
            raw, pos = _varint(data, pos)
            last = (raw >> 1) ^ -(raw & 1)
        if last in wanted and kind == 5:
            raw, pos = _varint(data, pos)
            found[last] = (raw >> 1) ^ -(raw & 1)
        else:
            pos = _skip(data, pos, kind, depth, True)


def _largest_page(handle, start: int, end: int) -> int:
    """The largest uncompressed page size declared in a column chunk's page headers (start..end)."""
    largest = 0
    pos = start
    while pos < end:
        handle.seek(pos)
        data = b""
        for window in (2**16, _MAX_PAGE_HEADER):
            data += handle.read(window - len(data))
            try:
                sizes, length = _struct(data, 0, 0, (2, 3))
                break
            except IndexError:  # the header goes on past the window
                if len(data) < window:
                    return largest  # the file ends: pyarrow reports the cut
        else:
            return MAX_PAGE_BYTES + 1  # a header above 1 MiB: treated as beyond the bound
        uncompressed, compressed = sizes.get(2, 0), sizes.get(3, 0)
        largest = max(largest, uncompressed)
        if largest > MAX_PAGE_BYTES or compressed < 0:
            return largest
        pos += length + compressed
    return largest


def _row_group_refusal(handle, group: Any, number: int) -> str | None:
    """Why a row group's rows are not read (metadata and page headers only), or None."""
    rows = group.num_rows
    size = sum(group.column(c).total_uncompressed_size for c in range(group.num_columns))
    if rows and size / rows > MAX_ROW_BYTES:
        return (
            f"row not read: parquet row group {number} holds {size:,} bytes uncompressed for {rows:,} rows, "
            f"beyond the {MAX_ROW_BYTES // 2**20} MiB bound a row"
        )
    for c in range(group.num_columns):
        column = group.column(c)
        if column.total_uncompressed_size <= MAX_PAGE_BYTES:
            continue  # no page of it can be larger
        start = column.data_page_offset
        if column.has_dictionary_page and column.dictionary_page_offset:
            start = min(start, column.dictionary_page_offset)
        try:
            largest = _largest_page(handle, start, start + column.total_compressed_size)
        except (ValueError, OSError):
            continue  # not a header Thrift reads: pyarrow reports it
        if largest > MAX_PAGE_BYTES:
            return (
                f"row not read: parquet row group {number}, column {column.path_in_schema!r}: a page of "
                f"{largest:,} bytes uncompressed, beyond the {MAX_PAGE_BYTES // 2**20} MiB bound a page"
            )
    return None


def _parquet_batches(path: str) -> Iterator[Any]:
    """Each row group's record batches, sized from its uncompressed size; refused groups as _Unreadable."""
    import pyarrow.parquet as pq

    metadata = pq.ParquetFile(path).metadata
    # Columns stored with a dictionary come as DictionaryArrays: a value stored once stays once in
    # memory however many rows name it, and the bounds see what each row would cost.
    stored = {
        group.column(c).path_in_schema
        for group in (metadata.row_group(n) for n in range(metadata.num_row_groups))
        for c in range(group.num_columns)
        if group.column(c).has_dictionary_page and group.column(c).physical_type == "BYTE_ARRAY"
    }
    parquet = pq.ParquetFile(path, read_dictionary=sorted(stored) or None)
    with open(path, "rb") as handle:  # page headers only
        for number in range(metadata.num_row_groups):
            group = metadata.row_group(number)
            refusal = _row_group_refusal(handle, group, number)
            if refusal is not None:
                for _ in range(group.num_rows):
                    yield _Unreadable(refusal)
                continue
            size = max(1, group.total_byte_size)
            rows = min(BATCH_ROWS, max(1, MAX_BATCH_BYTES * group.num_rows // size // 4))
            yield from parquet.iter_batches(batch_size=rows, row_groups=[number])


def _arrow_batches(dataset) -> Iterator[Any]:
    yield from dataset.with_format("arrow").iter(batch_size=BATCH_ROWS)


def _pick_split(dataset_or_dict, split: str | None):
    from datasets import DatasetDict, IterableDatasetDict

    if isinstance(dataset_or_dict, (DatasetDict, IterableDatasetDict)):
        if split is None:
            split = "train" if "train" in dataset_or_dict else next(iter(dataset_or_dict))
        if split not in dataset_or_dict:
            raise ValueError(f"split {split!r} not found; available: {sorted(dataset_or_dict)}")
        return dataset_or_dict[split], split
    return dataset_or_dict, split


def _inside(path: str, folder: str, what: str, allow_outside_root: bool) -> str:
    """`path` when it stays inside the dataset folder (symlinks followed), else a DatasetError."""
    outside = None if allow_outside_root else outside_target(path, folder)
    if outside is not None:
        raise DatasetError(f"{what} names {outside}, outside the dataset folder {folder}: not read")
    if not is_regular_file(path) and not os.path.isdir(path):
        raise DatasetError(f"{what}: {path} is not a regular file or folder")
    return path


def _saved_json(folder: str, path: str) -> Any:
    try:
        return read_config_json(path)
    except DatasetError as exc:
        raise DatasetError(f"{folder}: not a readable save_to_disk dataset: {exc}") from None


def _saved_split(folder: str, split: str | None, allow_outside_root: bool) -> tuple[str, str | None]:
    """A DatasetDict's split folder (dataset_dict.json "splits"), or the folder itself for a Dataset."""
    path = os.path.join(folder, "dataset_dict.json")
    if os.path.isfile(os.path.join(folder, "state.json")) or not os.path.isfile(path):
        return folder, split
    info = _saved_json(folder, path)
    splits = info.get("splits") if isinstance(info, dict) else None
    if not isinstance(splits, list) or not splits or not all(isinstance(name, str) for name in splits):
        raise DatasetError(
            f'{folder}: not a readable save_to_disk dataset: {path} has no "splits" list of names'
        )
    if split is None:
        split = "train" if "train" in splits else splits[0]
    if split not in splits:
        raise DatasetError(f"{folder}: split {split!r} not found; available: {sorted(splits)}")
    where = _inside(os.path.join(folder, split), folder, f"{path}: split {split!r}", allow_outside_root)
    return where, split


def saved_data_files(folder: str, allow_outside_root: bool = False) -> list[str]:
    """The arrow files a save_to_disk folder's state.json names ("_data_files"), each checked inside it."""
    path = os.path.join(folder, "state.json")
    state = _saved_json(folder, path)
    files = state.get("_data_files") if isinstance(state, dict) else None
    if not isinstance(files, list) or not all(
        isinstance(f, dict) and isinstance(f.get("filename"), str) for f in files
    ):
        raise DatasetError(f"{folder}: not a readable save_to_disk dataset: {path} has no _data_files list")
    found = []
    for entry in files:
        name = entry["filename"]
        what = f"{path}: _data_files entry {name!r}"
        if "\0" in name:
            raise DatasetError(f"{what}: not a file name")
        found.append(_inside(os.path.join(folder, name), folder, what, allow_outside_root))
    return found


def read_saved_dataset(folder: str, options: ReadOptions) -> Iterator[Sample | TableBatch]:
    """A save_to_disk folder, read as datasets' load_from_disk reads it (state.json's arrow files in
    order), but by vlmlint: every file it names is checked to stay inside the folder, and each
    arrow file's batches meet the table bounds. Image paths resolve against the folder itself."""
    split_folder, split = _saved_split(folder, options.split, options.allow_outside_root)
    paths = saved_data_files(split_folder, options.allow_outside_root)
    source = options.rel(folder) + (f"[{split}]" if split else "")

    def batches() -> Iterator[Any]:
        for path in paths:
            yield from _bounded(_ipc_batches(path), path, validate=True)

    origin = RowSource(source, folder, options.image_root, options.layout, options.columns)
    yield from _table_file(folder, "save_to_disk dataset", batches, origin, options.batch_rows)


def _table_file(
    path: str, kind: str, batches: Callable[[], Iterator[Any]], origin: RowSource, batch_rows: int
) -> Iterator[Sample | TableBatch]:
    """The rows of a parquet/arrow file; a corrupt file (at its start or further in) is a DatasetError."""
    import pyarrow as pa

    def checked() -> Iterator[Any]:
        try:
            yield from batches()
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise DatasetError(f"{path}: not a readable {kind} file: {exc}") from None

    yield from _rows_to_units(checked(), origin, batch_rows)


def _table_reader(
    kind: str, open_batches: Callable[[str], Iterable[Any]], validate: bool
) -> Callable[[str, RowSource, int], Iterator[Sample | TableBatch]]:
    """A reader of one kind of table file: its record batches, bounded (_bounded), as rows."""

    def read(path: str, origin: RowSource, batch_rows: int = 0) -> Iterator[Sample | TableBatch]:
        def batches() -> Iterator[Any]:
            yield from _bounded(open_batches(path), path, validate=validate)

        yield from _table_file(path, kind, batches, origin, batch_rows)

    read.__name__ = read.__qualname__ = f"read_{kind.lower()}"  # read_parquet, read_arrow: as imported
    return read


def _fb_table(buf: bytes, pos: int) -> Callable[[int], int | None]:
    """A flatbuffer table at `pos`: field number -> where its value is (None when absent)."""
    vtable = pos - struct.unpack_from("<i", buf, pos)[0]
    size = struct.unpack_from("<H", buf, vtable)[0]

    def field(number: int) -> int | None:
        at = 4 + 2 * number
        offset = struct.unpack_from("<H", buf, vtable + at)[0] if at < size else 0
        return pos + offset if offset else None

    return field


def _fb_ref(buf: bytes, at: int) -> int:
    return at + struct.unpack_from("<I", buf, at)[0]


def _compressed_buffers(metadata: bytes) -> list[tuple[int, int]] | None:
    """The body buffers (offset, length) of a compressed record or dictionary batch message, else None.

    Arrow's Message flatbuffer (format/Message.fbs): header_type 3 RecordBatch, 2 DictionaryBatch
    (its RecordBatch in field 1); RecordBatch field 2 buffers, field 3 compression.
    """
    message = _fb_table(metadata, _fb_ref(metadata, 0))
    kind_at, header_at = message(1), message(2)
    if kind_at is None or header_at is None or metadata[kind_at] not in (2, 3):
        return None
    header = _fb_ref(metadata, header_at)
    if metadata[kind_at] == 2:
        data_at = _fb_table(metadata, header)(1)
        if data_at is None:
            return None
        header = _fb_ref(metadata, data_at)
    batch = _fb_table(metadata, header)
    buffers_at = batch(2)
    if batch(3) is None or buffers_at is None:
        return None  # not compressed: memory-mapped in place
    vector = _fb_ref(metadata, buffers_at)
    count = struct.unpack_from("<I", metadata, vector)[0]
    return [struct.unpack_from("<qq", metadata, vector + 4 + 16 * k) for k in range(count)]


def _check_compressed(path: str, source_file: Any) -> None:
    """Refuse an IPC file a compressed batch of which declares more than MAX_BATCH_BYTES decompressed.

    pyarrow decompresses a batch whole when it reads it: the sizes (each buffer's first 8 bytes) are
    read from the messages first, nothing decompressed.
    """
    import pyarrow as pa

    position = source_file.tell()
    try:
        for number, message in enumerate(pa.ipc.MessageReader.open_stream(source_file)):
            buffers = _compressed_buffers(message.metadata.to_pybytes())
            if buffers is None:
                continue
            body = message.body
            declared = 0
            for offset, length in buffers:
                if length >= 8:
                    size = int.from_bytes(body[offset : offset + 8].to_pybytes(), "little", signed=True)
                    declared += length - 8 if size == -1 else max(size, 0)
            if declared > MAX_BATCH_BYTES:
                raise DatasetError(
                    f"{path}: Arrow message {number} declares {declared:,} bytes once decompressed, beyond "
                    f"the {MAX_BATCH_BYTES // 2**20} MiB bound a batch; not read"
                )
    except (struct.error, IndexError) as exc:
        raise DatasetError(
            f"{path}: not a readable Arrow file: a message header cannot be read ({exc})"
        ) from None
    except pa.ArrowInvalid:
        pass  # not a stream from here: the reader below says what it is
    finally:
        source_file.seek(position)


def _ipc_batches(path: str) -> Iterator[Any]:
    """An Arrow IPC file's record batches (stream format, as datasets writes, or file format).

    Memory-mapped: an uncompressed batch is read in place; a compressed one's declared size is
    checked before pyarrow decompresses it (_check_compressed).
    """
    import pyarrow as pa

    with pa.memory_map(path, "r") as source_file:
        if source_file.read(8) != b"ARROW1\x00\x00":
            source_file.seek(0)
        _check_compressed(path, source_file)
        source_file.seek(0)
        try:
            reader = pa.ipc.open_stream(source_file)  # what datasets writes
        except pa.ArrowInvalid:
            source_file.seek(0)
            reader = pa.ipc.open_file(source_file)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)
        else:
            yield from reader


def read_hub_dataset(name: str, options: ReadOptions) -> Iterator[Sample]:
    """A hub dataset's split (options.split, else train or the first), as Samples; paths resolve
    against the working folder."""
    from datasets import load_dataset

    loaded = load_dataset(name, split=options.split, streaming=options.streaming)
    dataset, split = _pick_split(loaded, options.split)
    source = name + (f"[{split}]" if split else "")
    yield from _rows_to_units(
        _arrow_batches(dataset),
        RowSource(source, os.getcwd(), options.image_root, options.layout, options.columns),
    )


read_parquet = _table_reader("parquet", lambda path: _parquet_batches(path), validate=False)
read_arrow = _table_reader("Arrow", lambda path: _ipc_batches(path), validate=True)
