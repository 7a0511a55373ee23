"""The Ray engine (`vlmlint scan --engine ray`, extra `vlmlint[ray]`): the same scan as a Ray Data job.

vlmlint schedules nothing itself. The dataset is cut into parts: each file of a pattern or of a folder
of dataset files (JSONL, JSON, parquet, arrow, webdataset tar shards), else the dataset whole. Two
Ray Data stages follow:

1. read (tasks): each part goes through the local readers (`read_dataset`), so every row reaches
   `row_to_sample` exactly as in a local scan; samples travel pickled, numbered (part, position);
2. check (`map_batches` with a callable class, an actor pool): each actor loads the model once and
   runs `Scanner.scan_samples` on its batches with the rules that look at one row at a time.

The driver reads the results in dataset order (Ray Data's preserve_order; the numbers are checked),
runs the rules that compare rows (VLM107 duplicate ids) and per-source-ignores itself, and hands on
the same RowOutcome stream a local scan yields: the report and exit code are the local engine's.

Paths must mean the same on every node (a shared file system): the driver sends absolute paths, and
names sources in reports relative to its own working folder. Rows keep their embedded image bytes on
the way back (for --verify and the HTML report's thumbnails). A local Ray instance started here (no
--ray-address and no RAY_ADDRESS) is shut down when the scanner closes, at the latest at exit.
"""

from __future__ import annotations

import atexit
import logging
import os
import pickle
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from vlmlint.checker import MergeStage
from vlmlint.readers import DatasetError, ReadOptions, check_options, dataset_parts, read_dataset

if TYPE_CHECKING:
    from vlmlint.engine import Scanner
    from vlmlint.records import RowOutcome

_PICKLE = pickle.HIGHEST_PROTOCOL
_READ_CPUS = 0.5
INSTALL_HINT = "the Ray engine needs Ray: pip install 'vlmlint[ray]'"


class RayUnavailable(DatasetError):
    """Ray is not installed (or not importable): the message says how to get it."""


@dataclass(frozen=True)
class _Relabel:
    """A path opened on a worker -> the name a local scan in the driver's folder gives it in reports."""

    opened: str  # the absolute path the worker opens
    given: str  # the same path as the driver named it
    cwd: str  # the driver's working folder

    def __call__(self, path: str) -> str:
        if path == self.opened or path.startswith(self.opened.rstrip(os.sep) + os.sep):
            path = self.given.rstrip(os.sep) + path[len(self.opened.rstrip(os.sep)) :]
        relative = os.path.relpath(os.path.normpath(os.path.join(self.cwd, path)), self.cwd)
        return path if relative.startswith("..") else relative


@dataclass(frozen=True)
class _Reading:
    """What a read task needs: the parts and the reader settings (plain data, pickled to the workers)."""

    parts: tuple[str, ...]  # as the driver names them
    cwd: str
    options: ReadOptions  # image_root made absolute: the driver's folder
    batch_size: int

    def opened(self, part: str) -> str:
        absolute = os.path.normpath(os.path.join(self.cwd, part))
        return absolute if os.path.exists(absolute) else part  # a hub id or a pattern's missing shard


def read_options(config: Any) -> ReadOptions:
    """The reader settings of the config, as Scanner.scan builds them, image_root in the driver's folder."""
    options = ReadOptions.from_config(config)
    if options.image_root:
        options = replace(options, image_root=os.path.abspath(options.image_root))
    return options


def _pickled_error(exc: BaseException) -> bytes:
    """An exception as it travels to the driver (one that does not pickle as a RuntimeError)."""
    try:
        blob = pickle.dumps(exc, protocol=_PICKLE)
        pickle.loads(blob)
        return blob
    except Exception:
        return pickle.dumps(RuntimeError(f"{type(exc).__name__}: {exc}"), protocol=_PICKLE)


def _read_parts(batch: dict[str, Any], reading: _Reading) -> Iterator[Any]:
    """Read task: the samples of the parts in `batch`, as tables of (part, pos, error, blob).

    A reader's exception (a corrupt parquet file is a DatasetError) is not raised here: it travels
    as the part's last row, and the driver raises it where a local scan would, after the rows
    before it. (Ray would re-raise it wrapped, its message lengthened.)
    """
    import pyarrow as pa

    def table(part: int, start: int, blobs: list[bytes], error: bool = False) -> Any:
        return pa.table(
            {
                "part": pa.array([part] * len(blobs), pa.int64()),
                "pos": pa.array(range(start, start + len(blobs)), pa.int64()),
                "error": pa.array([error] * len(blobs), pa.bool_()),
                "blob": pa.array(blobs, pa.large_binary()),
            }
        )

    for part in batch["part"].to_pylist():
        given = reading.parts[part]
        opened = reading.opened(given)
        samples = read_dataset(opened, replace(reading.options, rel=_Relabel(opened, given, reading.cwd)))
        pending: list[bytes] = []
        start = 0
        try:
            for sample in samples:
                pending.append(pickle.dumps(sample, protocol=_PICKLE))
                if len(pending) >= reading.batch_size:
                    yield table(part, start, pending)
                    start += len(pending)
                    pending = []
        except Exception as exc:
            if pending:
                yield table(part, start, pending)
                start += len(pending)
            yield table(part, start, [_pickled_error(exc)], error=True)
            return  # the driver stops at the error: later parts are not needed
        if pending:
            yield table(part, start, pending)


class CheckBatch:
    """Check stage: a callable class, so each actor loads the model once and keeps it."""

    def __init__(self, config: Any, rule_codes: tuple[str, ...]) -> None:
        from vlmlint.engine import Scanner
        from vlmlint.rules import RULES_BY_CODE

        self.scanner = Scanner(config, rules=[RULES_BY_CODE[code] for code in rule_codes])

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        errors = batch.column("error").to_pylist()
        blobs = batch.column("blob").to_pylist()
        samples = [pickle.loads(blob) for blob, error in zip(blobs, errors, strict=True) if not error]
        outcomes = iter(self.scanner.scan_samples(samples))
        checked = []
        for blob, error in zip(blobs, errors, strict=True):
            if error:
                checked.append(blob)  # a reader's exception, passed on
            else:
                outcome = next(outcomes)
                checked.append(pickle.dumps((outcome.result, outcome.findings), protocol=_PICKLE))
        return pa.table(
            {
                "part": batch.column("part"),
                "pos": batch.column("pos"),
                "error": batch.column("error"),
                "blob": pa.array(checked, pa.large_binary()),
            }
        )


def _import_ray() -> Any:
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as exc:
        raise RayUnavailable(f"{INSTALL_HINT} ({exc})") from None
    return ray


def _cause(exc: BaseException) -> BaseException:
    """The exception the user code raised (a reader's DatasetError, say), from inside Ray's wrappers.

    Ray re-raises a task's exception as RayTaskError (its `cause` is the original), sometimes under
    Ray Data's own exceptions; the innermost exception that is not Ray's is the one a local scan
    raises. Without one, `exc` itself.
    """
    from ray.exceptions import RayError

    found = exc
    seen = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if not isinstance(current, RayError) and not type(current).__module__.startswith("ray."):
            found = current
        inner = getattr(current, "cause", None)
        current = inner if isinstance(inner, BaseException) else current.__cause__
    return found


class RayExecutor:
    """The executor (runner.Executor) that runs a Scanner's scan() as a Ray Data job: the same
    outcomes in the same order. The model, rules and context stay the local Scanner's (`local`).

    Use as a context manager, or call close(): a local Ray instance it started is shut down then.
    """

    def __init__(self, scanner: Scanner, address: str | None = None, *, num_cpus: int | None = None) -> None:
        _import_ray()  # RayUnavailable now, not after the first dataset
        self.local = scanner
        self.address = address
        self.num_cpus = num_cpus
        self._started = False

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Connect to the cluster at `address` (or RAY_ADDRESS), else start a local instance."""
        ray = _import_ray()
        if ray.is_initialized():
            return  # the caller's Ray session: used as it is, and left running
        quiet = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING}
        # Workers start with the driver's environment (VLMLINT_CACHE, HF_HUB_OFFLINE...) on a local
        # instance; a cluster's nodes need it set up by whoever runs the cluster.
        if self.address or os.environ.get("RAY_ADDRESS"):
            ray.init(address=self.address, **quiet)
        else:
            # One CPU per checking actor (--jobs of them) and one more for the read tasks.
            ray.init(
                address="local",
                num_cpus=(self.num_cpus or self.local.config.jobs or self.local.default_jobs()) + 1,
                **quiet,
            )
        self._started = True
        atexit.register(self.close)

    def close(self) -> None:
        if self._started:
            self._started = False
            import ray

            ray.shutdown()

    def scan(self, dataset: str | None = None, skip: int = 0) -> Iterator[RowOutcome]:
        """The outcomes of a local `Scanner.scan(dataset, skip)`, in the same order, computed on Ray.

        `skip` (--resume): the first rows are only shown to the rules that compare rows (they are
        still read and checked on the cluster: which rows they are is known only in order).
        """
        config = self.local.config
        target = config.dataset if dataset is None else dataset
        options = read_options(config)
        check_options(options)
        parts = dataset_parts(target, options)  # a missing pattern file fails here, before Ray starts
        _import_ray()
        return self._scan(parts, options, skip)

    def _scan(self, parts: list[str], options: ReadOptions, skip: int) -> Iterator[RowOutcome]:
        from vlmlint.records import RowOutcome

        ray = _import_ray()
        self.start()
        scanner, config = self.local, self.local.config
        stage = MergeStage(scanner.rules, scanner.context, scanner.keep)
        stateless = stage.stateless_codes
        stage.reset()
        cwd = os.getcwd()
        reading = _Reading(tuple(parts), cwd, options, config.batch_size)
        model = os.path.abspath(config.model) if os.path.isdir(config.model) else config.model
        # per-source-ignores match report paths against the working folder: the driver applies them.
        worker_config = replace(config, model=model, per_source_ignores={}, jobs=1)

        from ray.data import ActorPoolStrategy, DataContext

        context = DataContext.get_current()
        saved = (context.execution_options.preserve_order, context.enable_progress_bars)
        context.execution_options.preserve_order = True  # results in dataset order, whatever finishes first
        context.enable_progress_bars = False  # stderr is vlmlint's
        data_logger = logging.getLogger("ray.data")
        level = data_logger.level
        # No per-execution INFO lines, nor the traceback of a task's error: it is re-raised below as
        # the reader raised it, and the CLI says it in one line, as for a local scan.
        data_logger.setLevel(logging.CRITICAL)
        try:
            # Leave room for a read task beside the actors, or the actor pool takes every CPU and the
            # reads never run (a deadlock); on a one-CPU cluster the actor takes half of it.
            cpus = float(ray.cluster_resources().get("CPU", 1))
            actors = max(1, int(cpus - _READ_CPUS))
            actor_cpus = min(1.0, max(cpus - _READ_CPUS, 0.1))
            units = ray.data.from_items(
                [{"part": i} for i in range(len(parts))], override_num_blocks=len(parts)
            )
            # Half a CPU per read task: reading is mostly I/O, and unlike resources keep Ray Data from
            # fusing the stages, which would check each part's rows on the one actor that read them.
            samples = units.map_batches(
                _read_parts,
                fn_kwargs={"reading": reading},
                batch_size=1,
                batch_format="pyarrow",
                num_cpus=_READ_CPUS,
            )
            checked = samples.map_batches(
                CheckBatch,
                fn_constructor_args=(worker_config, stateless),
                batch_size=config.batch_size,
                batch_format="pyarrow",
                compute=ActorPoolStrategy(min_size=1, max_size=actors),
                num_cpus=actor_cpus,
            )
            last = (-1, -1)
            for batch in checked.iter_batches(batch_size=None, batch_format="pyarrow"):
                columns = batch.to_pydict()
                rows = zip(columns["part"], columns["pos"], columns["error"], columns["blob"], strict=True)
                for part, pos, error, blob in rows:
                    # Each part's rows, from 0 without a gap, parts in order (an empty one has none).
                    if not (pos == last[1] + 1 if part == last[0] else part > last[0] and pos == 0):
                        raise RuntimeError(f"Ray returned rows out of order: {(part, pos)} after {last}")
                    last = (part, pos)
                    if error:  # the reader's exception, raised as a local scan raises it
                        raise pickle.loads(blob)
                    result, findings = pickle.loads(blob)
                    if skip:  # counted before an interruption: only the rules that compare rows see it
                        skip -= 1
                        stage.skip(result)
                        continue
                    if config.per_source_ignores:  # the workers' findings, filtered here (see above)
                        findings = tuple(f for f in findings if scanner.keep(f))
                    yield RowOutcome(result, stage.merge(result, findings))
        except Exception as exc:
            cause = _cause(exc)
            if cause is not exc:
                raise cause from None
            raise
        finally:
            context.execution_options.preserve_order, context.enable_progress_bars = saved
            data_logger.setLevel(level)


RayScanner = RayExecutor  # its earlier name (tests/test_ray_engine.py, scripts that import it)
