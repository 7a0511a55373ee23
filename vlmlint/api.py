"""The Python API: lint rows already in memory, from `datasets.map`, Spark `mapInPandas` and the like.

    findings = vlmlint.check_batch(rows, {"model": "qwen2-vl", "image_root": "/data"})

`rows` are raw rows in any layout the readers know (vlmlint.readers.layouts.LAYOUTS: llava, sharegpt,
openai, alpaca, captions, pretokenized, prompt-completion, cauldron, query-response, pairs,
data-juicer; images as paths, URLs, data URIs or Hugging Face {"bytes", "path"} structs), or rows
of other field names read through a `columns` map as a file is (readers/columns.py), given as a
list of dicts, a dict of columns (what `datasets.map(batched=True)` passes), a pandas DataFrame (what
Spark's `mapInPandas` passes) or a pyarrow Table. Every call is checked exactly as `vlmlint scan`
checks a file holding the same rows, with two differences that follow from a batch having no file:

- findings name `source` ("<batch>" unless given) and each row's `index` (its position in the call,
  or the `indices` given, e.g. those of `datasets.map(with_indices=True)`); `line` is None;
- rules that compare rows (VLM107 duplicate ids) see one call's rows only; the layout, when not set,
  is detected from the call's first row (a file's is detected from the file's first row), and a
  `columns` map that names no field of that row raises the DatasetError a scan stops with.

Relative image paths resolve against `image_root`, else the working folder, which is also the folder
images must stay inside unless `allow_outside_root` is set: on a cluster, give absolute paths and
`image_root`. The model is loaded once per process and setting (cached), so the batches of one
worker pay for it once.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from vlmlint.config import ConfigError, ScanConfig, build_config
from vlmlint.records import Finding, Severity
from vlmlint.settings import SETTINGS_BY_NAME

if TYPE_CHECKING:
    from vlmlint.engine import Scanner
    from vlmlint.records import RowOutcome

__all__ = ["BATCH_SOURCE", "check_batch", "check_rows", "row_columns", "scan_config"]

BATCH_SOURCE = "<batch>"
_CACHED_SCANNERS = 4  # distinct settings kept loaded per process
_cache: list[tuple[ScanConfig, Scanner]] = []  # most recently used last
_cache_lock = threading.Lock()


def scan_config(config: ScanConfig | Mapping[str, Any] | None = None) -> ScanConfig:
    """A ScanConfig as is, or one built from a dict of settings (the config file's names, - or _).

    No config file is read: a batch job's settings are the ones it passes.
    """
    if isinstance(config, ScanConfig):
        return config
    settings = {str(key).replace("-", "_"): value for key, value in dict(config or {}).items()}
    known = set(SETTINGS_BY_NAME)  # every ScanConfig setting (vlmlint/settings.py), not just a file's
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ConfigError(f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    settings.setdefault("jobs", 1)
    return build_config(BATCH_SOURCE, settings, {})


def _scanner(config: ScanConfig) -> Scanner:
    """This process's Scanner for these settings: the model loads on the first call only."""
    from vlmlint.engine import Scanner

    with _cache_lock:
        for position, (cached_config, scanner) in enumerate(_cache):
            if cached_config == config:
                _cache.append(_cache.pop(position))
                return scanner
        scanner = Scanner(config)
        _cache.append((config, scanner))
        if len(_cache) > _CACHED_SCANNERS:
            _cache.pop(0)
        return scanner


def _plain(value: Any) -> Any:
    """numpy arrays and scalars (pandas, Arrow) as the lists and numbers a JSON reader gives."""
    if isinstance(value, (str, bytes, bool, int, float, type(None))):
        return value
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    module = type(value).__module__
    if module == "numpy":
        return _plain(value.tolist())  # an ndarray (nested lists) or a numpy scalar
    if module.startswith("PIL."):
        raise TypeError(
            "a decoded PIL image in the rows: vlmlint reads image files and bytes, not pixels; "
            'cast the column first, e.g. ds.cast_column("image", datasets.Image(decode=False))'
        )
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value


def _missing(value: Any) -> bool:
    """A pandas cell for an absent value (NaN, NaT, NA): read as null, as a JSON reader would."""
    if isinstance(value, float):
        return math.isnan(value)
    return type(value).__name__ in ("NAType", "NaTType")


def as_rows(rows: Any) -> list[Any]:
    """Rows as plain Python dicts, from a list of dicts, a dict of columns, a DataFrame or an Arrow table."""
    module = type(rows).__module__
    if module.startswith("pandas"):
        columns = [str(name) for name in rows.columns]
        return [
            {name: None if _missing(cell) else _plain(cell) for name, cell in zip(columns, row, strict=True)}
            for row in rows.itertuples(index=False, name=None)
        ]
    if module.startswith("pyarrow"):
        return rows.to_pylist()
    if isinstance(rows, Mapping):
        columns = {str(name): column for name, column in rows.items()}
        lengths = {len(column) for column in columns.values() if hasattr(column, "__len__")}
        if len(lengths) > 1 or any(
            isinstance(column, (str, bytes, Mapping)) or not hasattr(column, "__len__")
            for column in columns.values()
        ):
            raise TypeError(
                "a dict of rows is read as columns (name -> list of values, all of one length); "
                "to check one row, pass [row]"
            )
        count = lengths.pop() if lengths else 0
        values = {name: list(column) for name, column in columns.items()}
        return [{name: _plain(values[name][i]) for name in values} for i in range(count)]
    if isinstance(rows, (str, bytes)) or not isinstance(rows, Iterable):
        raise TypeError(f"rows must be a list of dicts, a dict of columns or a DataFrame, not {type(rows)}")
    return [_plain(row) for row in rows]


def _samples(rows: list[Any], config: ScanConfig, source: str, indices: Sequence[int] | None):
    from vlmlint.readers import ReadOptions, check_options
    from vlmlint.readers.rowsource import RowSource

    if indices is not None and len(indices) != len(rows):
        raise ValueError(f"{len(indices)} indices for {len(rows)} rows")
    options = ReadOptions.from_config(config)
    check_options(options)
    # A resolver of its own, from the working folder; rows converted by the column map, if any.
    origin = RowSource(source, os.getcwd(), config.image_root, convert=options.columns, own_resolver=True)
    layout = config.layout
    first = True
    for position, row in enumerate(rows):
        if layout is None and isinstance(row, Mapping):
            # as a file: from the first row that fits a layout
            layout, first = origin.layout_of(row, first), False
        index = position if indices is None else int(indices[position])
        yield origin.sample(row, index, layout, from_first_row=config.layout is None)


def check_rows(
    rows: Any,
    config: ScanConfig | Mapping[str, Any] | None = None,
    *,
    source: str = BATCH_SOURCE,
    indices: Sequence[int] | None = None,
) -> list[RowOutcome]:
    """Each row's outcome, in order: its counts (`.result`: seq_len, image_tokens...) and findings."""
    config = scan_config(config)
    scanner = _scanner(config)
    return list(scanner.scan_samples(_samples(as_rows(rows), config, source, indices)))


def check_batch(
    rows: Any,
    config: ScanConfig | Mapping[str, Any] | None = None,
    *,
    source: str = BATCH_SOURCE,
    indices: Sequence[int] | None = None,
) -> list[Finding]:
    """The findings of a batch of rows, row by row in order (`Finding.to_dict()` for plain data)."""
    return [
        finding
        for outcome in check_rows(rows, config, source=source, indices=indices)
        for finding in outcome.findings
    ]


def row_columns(
    rows: Any,
    config: ScanConfig | Mapping[str, Any] | None = None,
    *,
    source: str = BATCH_SOURCE,
    indices: Sequence[int] | None = None,
    prefix: str = "vlmlint_",
) -> dict[str, list[Any]]:
    """Per-row columns to add to the batch (return them from `datasets.map(batched=True)`):

    seq_len and text_tokens (None where the row could not be counted), image_tokens (one per image),
    codes (the rule codes found), ok (no finding at or above the config's fail_on severity).
    """
    config = scan_config(config)
    outcomes = check_rows(rows, config, source=source, indices=indices)
    return {
        f"{prefix}seq_len": [o.result.seq_len for o in outcomes],
        f"{prefix}text_tokens": [o.result.text_tokens for o in outcomes],
        f"{prefix}image_tokens": [list(o.result.image_tokens) for o in outcomes],
        f"{prefix}codes": [[f.code for f in o.findings] for o in outcomes],
        f"{prefix}ok": [not _fails(o.findings, config.fail_on) for o in outcomes],
    }


def _fails(findings: Iterable[Finding], fail_on: Severity) -> bool:
    return any(finding.severity.rank >= fail_on.rank for finding in findings)
