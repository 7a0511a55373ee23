"""The local executors: one process, or several with the same outcomes in the same order.

An executor runs a scan: `scan(dataset, skip)` yields the outcome of every row of the dataset in
dataset order (Executor). `SequentialExecutor` reads and scans here; `PoolExecutor` shares the rows
out to a process pool; the Ray executor (vlmlint/ray_engine.py) runs them on a Ray cluster. All three
end in the same MergeStage (vlmlint/checker.py): the rules that compare rows, the resume skip.

`--jobs N` is N processes in all: this one and N - 1 workers. The reader cuts the dataset into chunks
of about `batch_size` rows: JSONL lines, JSON array elements and Arrow record batches unparsed
(RowBatch: the process that scans a chunk parses it, which costs less than sending parsed rows),
other sources as Samples. Workers scan chunks with their own Scanner (the model inherited from this
process where processes fork, loaded again where they spawn) while this process scans every N-th
chunk itself and hands results on in dataset order, at most a few chunks ahead, so memory stays flat
and the report is the same whatever N is.

Why this process scans too: on a small machine a parent that only dispatched would hold a core's
share of memory (a forked worker counts every page it shares with its parent) for little work.

A row without findings comes back from a worker with a headline Sample (what reports print); the
outcome's `reload` rebuilds the whole row from its line when a caller needs it (--verify). Rules
that compare rows (duplicate ids) cannot run where only some rows are seen: this process runs them,
in dataset order, and merges their findings in rule order.
"""

from __future__ import annotations

import os
import signal
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from functools import partial
from itertools import chain, islice
from typing import TYPE_CHECKING, Protocol

from vlmlint.checker import MergeStage
from vlmlint.readers import ReadOptions, RowBatch, read_dataset
from vlmlint.records import Finding, RowResult, Sample, evolve
from vlmlint.rules import Rule

if TYPE_CHECKING:
    from vlmlint.engine import Scanner
    from vlmlint.records import RowOutcome

Unit = Sample | RowBatch
Chunk = list[Unit]
_worker: Scanner | None = None  # this worker process's scanner
_inherited: Scanner | None = None  # the parent's scanner, inherited by forked workers


class Executor(Protocol):
    """What runs a scan: every row's outcome, in dataset order, whatever runs where."""

    def scan(self, dataset: str | None = None, skip: int = 0) -> Iterator[RowOutcome]:
        """Scan `dataset` (None: the config's). `skip`: rows already counted (--resume), shown only to
        the rules that compare rows; ResumeMismatch when the dataset has fewer."""
        ...


class ResumeMismatch(ValueError):
    """--resume: the checkpoint's position lies beyond the dataset's end (it was edited or is another's)."""


class SequentialExecutor:
    """One process: this one reads the rows and scans them (Scanner.scan_samples)."""

    batch_rows = False  # rows come parsed: nothing to share out

    def __init__(self, scanner: Scanner) -> None:
        self.scanner = scanner

    def scan(self, dataset: str | None = None, skip: int = 0) -> Iterator[RowOutcome]:
        config = self.scanner.config
        # Rows travel to worker processes unparsed (readers/batches.py): each parses its own.
        options = ReadOptions.from_config(config, batch_rows=config.batch_size if self.batch_rows else 0)
        units = read_dataset(config.dataset if dataset is None else dataset, options)
        stage = MergeStage(self.scanner.rules, self.scanner.context, self.scanner.keep)
        stage.reset()
        if skip:
            units = skipped(units, skip, stage)
        return self._run(units)

    def _run(self, units: Iterable[Unit]) -> Iterator[RowOutcome]:
        return self.scanner.scan_samples(units, reset=False)  # type: ignore[arg-type]  # Samples only


class PoolExecutor(SequentialExecutor):
    """`jobs` processes, this one included (scan_parallel): the same outcomes in the same order."""

    batch_rows = True

    def __init__(self, scanner: Scanner, jobs: int) -> None:
        super().__init__(scanner)
        self.jobs = jobs

    def _run(self, units: Iterable[Unit]) -> Iterator[RowOutcome]:
        return scan_parallel(self.scanner, units, self.jobs)


class LocalExecutor:
    """This machine: --jobs processes, chosen as each scan starts (jobs 0: default_jobs's choice)."""

    def __init__(self, scanner: Scanner) -> None:
        self.scanner = scanner

    def scan(self, dataset: str | None = None, skip: int = 0) -> Iterator[RowOutcome]:
        jobs = self.scanner.config.jobs or self.scanner.default_jobs()
        executor = PoolExecutor(self.scanner, jobs) if jobs > 1 else SequentialExecutor(self.scanner)
        return executor.scan(dataset, skip)


def skipped(units: Iterable[Unit], count: int, stage: MergeStage) -> Iterator[Unit]:
    """Drop the first `count` rows (--resume), showing them to the rules that compare rows."""
    iterator = iter(units)
    left = count
    for unit in iterator:
        if isinstance(unit, RowBatch):
            if len(unit) > left:  # the batch straddles the resume point: its tail is scanned
                unit, rest = unit.split(left)
                iterator = chain([rest], iterator)
            rows = unit.samples()
        else:
            rows = [unit]
        for sample in rows:
            stage.skip(RowResult(sample=sample))  # reported before the interruption
        left -= len(rows)
        if left <= 0:
            break
    if left > 0:  # a checkpoint that counts rows this dataset does not have: not its checkpoint
        raise ResumeMismatch(
            f"--resume: the checkpoint counts {count:,} rows done, but the dataset has {count - left:,}"
        )
    yield from iterator


def default_jobs(cheap_tokenizer: bool = False) -> int:
    """Processes that keep every core busy (--jobs 0, the CLI's default).

    With the tokenizers pipeline each process keeps two cores busy, its Python thread (reading,
    counting, rules) and its tokenizer thread (Rust, GIL released): one process per two cores (on 2
    cores one process beats two, which add the cost of sending rows). Where tokenizing is cheap
    (tiktoken for the built-in Qwen profiles) the Python work fills a core per process: every core.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return cores if cheap_tokenizer else max(1, cores // 2)


def is_stateful(rule: Rule) -> bool:
    """A rule that compares rows (Rule.compares_rows) must see every row, in order."""
    return rule.compares_rows


def expand(units: Iterable[Unit]) -> Iterator[Sample]:
    """Samples from reader units: a RowBatch is parsed here."""
    for unit in units:
        if isinstance(unit, RowBatch):
            yield from unit.samples()
        else:
            yield unit


# What reports print of a row: its place, id, layout and content hash.
_HEADLINE_FIELDS = ("source", "index", "line", "id", "layout", "fingerprint", "key")


def headline(sample: Sample) -> Sample:
    """The row's headline (_HEADLINE_FIELDS) without its content: what a worker sends back."""
    return Sample(**{name: getattr(sample, name) for name in _HEADLINE_FIELDS})


def _init_worker(scanner_class: type[Scanner], config, rule_codes: tuple[str, ...]) -> None:
    # Ctrl-C goes to the whole process group: the parent decides what happens, workers just stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    global _worker
    _worker = _stateless_scanner(scanner_class, _inherited, config, rule_codes)


def _stateless_scanner(
    scanner_class: type[Scanner], parent: Scanner | None, config, rule_codes: tuple[str, ...]
) -> Scanner:
    """A scanner of the stateless rules; the class is the parent's (a spawned worker gets it pickled)."""
    from vlmlint.rules import RULES_BY_CODE

    rules = [RULES_BY_CODE[code] for code in rule_codes]
    if parent is None:
        scanner = scanner_class(config, rules=rules)
    else:  # fork: no second model load, nor a second length counter (tiktoken loads its BPE file)
        scanner = scanner_class(
            config, model=parent.model, rules=rules, length_counter=parent.length_counter()
        )
    # Flagged rows travel whole; the parent drops embedded bytes beyond its budget, in dataset order
    # (the same rows keep their bytes whatever --jobs is).
    scanner.embedded_budget = None
    return scanner


def _run_chunk(chunk: Chunk) -> list[tuple[RowResult, tuple[Finding, ...]]]:
    """Scan one chunk in a worker; a row without findings travels back with its headline only."""
    assert _worker is not None
    return [
        (o.result if o.findings else evolve(o.result, sample=headline(o.result.sample)), o.findings)
        for o in _worker.scan_samples(expand(chunk))
    ]


def scan_parallel(scanner: Scanner, units: Iterable[Unit], jobs: int) -> Iterator[RowOutcome]:
    """scanner.scan_samples(units) on `jobs` processes (this one included); small inputs stay here.

    The rules that compare rows are not reset here: the caller did, before showing them the rows a
    --resume skips.
    """
    from vlmlint.records import RowOutcome

    size = scanner.config.batch_size
    chunks = _chunks(iter(units), size)
    head = list(islice(chunks, 2))
    if jobs <= 1 or sum(map(_rows, chain(*head))) < 2 * size:  # a pool would cost more than it saves
        yield from scanner.scan_samples(expand(chain(*head, chain.from_iterable(chunks))), reset=False)
        return

    stage = MergeStage(scanner.rules, scanner.context, scanner.keep)
    stateless_codes = stage.stateless_codes

    import multiprocessing

    global _inherited
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    # A forked child must not use the tokenizer's thread pool that the parent may have started.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _inherited = scanner if method == "fork" else None
    local = _stateless_scanner(type(scanner), scanner, scanner.config, stateless_codes)  # before the fork
    workers = jobs - 1
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context(method),
        initializer=_init_worker,
        initargs=(type(scanner), scanner.config, stateless_codes),
    )
    chunks = chain(head, chunks)
    pending: deque[tuple[Chunk, Future | list]] = deque()

    def submit() -> None:
        chunk = next(chunks, None)
        if chunk is not None:
            pending.append((chunk, pool.submit(_run_chunk, chunk)))

    def merge(result: RowResult, findings: tuple[Finding, ...], reload) -> RowOutcome:
        findings = stage.merge(result, findings)
        if findings and reload is not None:  # a row with findings is kept whole (reports, thumbnails)
            result, reload = evolve(result, sample=reload()), None
        return RowOutcome(scanner.retained(result, findings), findings, reload)

    try:
        for _ in range(workers):
            submit()
        while pending:
            # Each round: this process scans one chunk while each worker scans one of its own (one
            # more waits in its queue), then everything up to this chunk is handed on in order.
            own, box = next(chunks, None), None
            if own is not None:
                box = []
                pending.append((own, box))
                for _ in range(workers):
                    submit()
                box.extend((o.result, o.findings) for o in local.scan_samples(expand(own), reset=False))
            while pending:
                chunk, done = pending.popleft()
                if done is box:  # scanned here: the results hold whole Samples
                    for result, findings in box:
                        yield merge(result, findings, None)
                    break
                for handle, (result, findings) in zip(_row_handles(chunk), done.result(), strict=True):
                    reload = None
                    if isinstance(handle, Sample):  # sent from here whole: attach it again
                        result = evolve(result, sample=handle)
                    elif not findings:  # a headline came back: its line rebuilds the row
                        reload = handle
                    yield merge(result, findings, reload)
    finally:
        _inherited = None
        pool.shutdown(wait=True, cancel_futures=True)


def _row_handles(chunk: Chunk) -> Iterator[Sample | partial]:
    """Per row of a chunk: its Sample, or a function rebuilding it from its line."""
    for unit in chunk:
        if isinstance(unit, RowBatch):
            for position in range(len(unit)):
                yield partial(unit.sample, position)
        else:
            yield unit


def _rows(unit: Unit) -> int:
    return len(unit) if isinstance(unit, RowBatch) else 1


def _chunks(units: Iterator[Unit], size: int) -> Iterator[Chunk]:
    """Units grouped into chunks of about `size` rows (a RowBatch is at most `size` rows)."""
    chunk: Chunk = []
    rows = 0
    for unit in units:
        chunk.append(unit)
        rows += _rows(unit)
        if rows >= size:
            yield chunk
            chunk, rows = [], 0
    if chunk:
        yield chunk
