"""The self-check behind --verify N: rerun a fixed-seed sample of rows through the exact path, under budgets.

The scan offers every counted row; each row falls in a size stratum by the pixels of its stored images
(STRATA: text only, up to 0.1, 0.5, 1.5 and 6 megapixels, and beyond) and each stratum keeps a seeded
reservoir of N rows, so the same dataset gives the same choice. Afterwards the rows are taken in turn
from every stratum, smallest first (text-only rows last: they only prove the tokenizer), up to N, and
each is rerun with its images decoded and the model's real image processor; a row whose image tokens or
sequence length differ becomes a VLM901 finding. The comparison is the one `--exact` makes, row by row.

Two budgets bound what that costs, whatever the images (issue 23, target 1):
- pixels: a row whose images hold more than `row_pixels` in all is never decoded (the real image
  processors hold float copies of the whole image: about 70 bytes a pixel for Qwen2-VL's, so
  1.5 MP is ~110 MB at its peak); such rows are counted in their stratum as not checkable;
- time: the whole self-check stops at `seconds` (the session's default: 10% of the scan's own time, at
  least VERIFY_MIN_SECONDS): loading the real image processor counts (what the scan waits for it), the
  rows get the rest, and at least VERIFY_MIN_ROW_SECONDS; a row whose predicted cost (its pixels at the
  rate measured so far) would overrun is left out, and smaller ones after it may still fit. The first
  row is always checked.
For a small dataset (a pre-commit manifest, whose scan stays in one process) the real image processor is
loaded beside the scan in a forked process (Verifier.fork), on another core, which later rechecks the rows
there: its imports (transformers: ~1 s) then hide behind the scan. Otherwise it is loaded after the scan:
a thread beside a parallel scan slowed it by more than the load itself (the GIL it takes from the process
that feeds the workers), and the worker processes already fill the cores. The summary says how many rows
were checked and, when a budget left rows out, each stratum's rows and checked rows (Verifier.coverage).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from vlmlint.engine import Scanner
from vlmlint.records import Finding, ImageError, RowOutcome
from vlmlint.rules.internal import CountDisagreement

SEED = 20241130
# (name, most stored pixels of a row's images); rows are put in the first stratum that holds them.
STRATA: tuple[tuple[str, float], ...] = (
    ("text", 0),
    ("<=0.1MP", 100_000),
    ("<=0.5MP", 500_000),
    ("<=1.5MP", 1_500_000),
    ("<=6MP", 6_000_000),
    (">6MP", float("inf")),
)
# The session's defaults: a row above ROW_PIXELS is not decoded (at most ~150 MB extra peak memory);
# the time budget is VERIFY_FRACTION of the scan's time, never below VERIFY_MIN_SECONDS.
ROW_PIXELS = 1_500_000
VERIFY_FRACTION = 0.1
VERIFY_MIN_SECONDS = 0.5
# However long the load took, the rows get at least this (a small scan's budget is mostly the load's).
VERIFY_MIN_ROW_SECONDS = 0.1
# A dataset of at most this many bytes is rechecked in a forked process (Verifier.fork): its scan stays in
# one process (runner.scan_parallel), so another core is free to import transformers beside it.
FORK_DATASET_BYTES = 4_000_000
# Seconds a pixel costs before any row was measured (Qwen2-VL's processor: ~0.2-0.5 us a pixel on 2 cores).
_PRIOR_SECONDS_PER_PIXEL = 5e-7


def row_pixels(outcome: RowOutcome) -> int:
    """The stored pixels of a row's images (what decoding and the real image processor scale with)."""
    return sum((info.width or 0) * (info.height or 0) for info in outcome.result.images)


def stratum(pixels: int) -> int:
    return next(i for i, (_, most) in enumerate(STRATA) if pixels <= most)


@dataclass
class _Stratum:
    seen: int = 0  # counted rows in this stratum
    over: int = 0  # of those, rows above the pixel budget (never decoded)
    checked: int = 0
    chosen: list[RowOutcome] = field(default_factory=list)


@dataclass
class Verifier:
    """`size` rows at most; `seconds` and `row_pixels` None: no budget (the Python API's default)."""

    size: int
    seconds: float | None = None
    row_pixels: int | None = None
    clock: Callable[[], float] = time.monotonic
    seen: int = 0
    strata: list[_Stratum] = field(default_factory=lambda: [_Stratum() for _ in STRATA])
    skipped: str | None = None  # why the recheck could not run (the exact path needs torchvision here)
    left_by_time: int = 0  # rows that were to be checked when the time budget ran out
    spent: float = 0.0  # seconds the recheck took
    load_seconds: float = 0.0  # what loading the real image processor cost the scan (counted in `seconds`)
    # checked rows holding counted videos: the recheck runs the real image processor only, so their video
    # tokens come from the same formula both times (the real video processors need torch and torchvision)
    video_rows: int = 0
    _process: _RecheckProcess | None = None
    _randoms: list[random.Random] = field(
        default_factory=lambda: [random.Random(SEED + i) for i in range(len(STRATA))]
    )

    @property
    def chosen(self) -> list[RowOutcome]:
        """The rows that will be rechecked, in the order they are (every stratum in turn)."""
        return self._order()

    def offer(self, outcome: RowOutcome) -> None:
        """Reservoir sampling, per size stratum, over the rows that got counts."""
        if self.size <= 0 or outcome.result.seq_len is None:
            return
        self.seen += 1
        pixels = row_pixels(outcome)
        index = stratum(pixels)
        group = self.strata[index]
        group.seen += 1
        if self.row_pixels is not None and pixels > self.row_pixels:
            group.over += 1  # never decoded: not kept either
            return
        eligible = group.seen - group.over
        if len(group.chosen) < self.size:
            group.chosen.append(outcome.complete())  # a parallel scan may have left a headline Sample
        else:
            slot = self._randoms[index].randrange(eligible)
            if slot < self.size:
                group.chosen[slot] = outcome.complete()

    def fork(self, scanner: Scanner) -> bool:
        """Load the real image processor in a forked process, which rechecks the rows there after the scan.
        Call it before the scan starts (no thread of this process runs yet); False where fork is not
        available (the image processor is then loaded after the scan)."""
        if self.size <= 0 or self._process is not None:
            return False
        if "fork" not in multiprocessing.get_all_start_methods():
            return False
        self._process = _RecheckProcess(scanner)
        return True

    def close(self) -> None:
        """End the recheck process, if one was forked and is still waiting (an interrupted scan)."""
        if self._process is not None:
            self._process.close()
            self._process = None

    def _order(self) -> list[RowOutcome]:
        """Up to `size` rows: one from each image stratum in turn (smallest first), then text-only rows."""
        queues = [sorted(g.chosen, key=_place) for g in self.strata[1:]]
        order: list[RowOutcome] = []
        depth = 0
        while len(order) < self.size and any(depth < len(q) for q in queues):
            order.extend(q[depth] for q in queues if depth < len(q))
            depth += 1
        order = order[: self.size]
        order.extend(sorted(self.strata[0].chosen, key=_place)[: self.size - len(order)])
        return order

    def run(self, scanner: Scanner) -> tuple[int, list[tuple[RowOutcome, Finding]]]:
        """Recount the chosen rows exactly; returns (rows checked, disagreements as findings)."""
        chosen = self._order()
        process, self._process = self._process, None
        if not chosen:
            if process is not None:
                process.close()
            return 0, []
        done = process.recheck(chosen, self.seconds) if process is not None else None
        if done is None:  # no process, or it failed: here, as without one
            waited = time.monotonic()
            _load_image_processor(scanner)  # (the self-check's cost too: it counts in the budget)
            done = recheck(scanner, chosen, self.seconds, time.monotonic() - waited, self.clock)
        self.skipped, self.load_seconds, self.spent = done.skipped, done.load_seconds, done.spent
        self.left_by_time += done.left_by_time
        self.video_rows += done.video_rows
        for index, checked in enumerate(done.checked_by_stratum):
            self.strata[index].checked += checked
        disagreements = [(chosen[position], finding) for position, finding in done.disagreements]
        disagreements.sort(key=lambda pair: _place(pair[0]))  # dataset order, as before the budgets
        return sum(done.checked_by_stratum), disagreements

    @property
    def limited(self) -> bool:
        """A budget left rows out (rows above the pixel budget, or chosen rows the time ran out for)."""
        if self.skipped is not None:
            return False  # nothing was rechecked: the summary says why (not_run)
        return self.left_by_time > 0 or any(g.over for g in self.strata)

    def coverage(self) -> dict:
        """What the summary says when a budget left rows out: each stratum's rows and rows checked."""
        return {
            "strata": {
                name: {"rows": g.seen, "checked": g.checked}
                | ({"above_pixel_budget": g.over} if g.over else {})
                for (name, _), g in zip(STRATA, self.strata, strict=True)
                if g.seen
            },
            "budget": {
                "seconds": None if self.seconds is None else round(self.seconds, 2),
                "row_pixels": self.row_pixels,
                "processor_load_seconds": round(self.load_seconds, 2),  # spent of `seconds` before the rows
            },
            "left_by_time_budget": self.left_by_time,
        }


@dataclass(frozen=True)
class Rechecked:
    """What one recheck found (it may run in another process: positions into the rows it was given)."""

    checked_by_stratum: tuple[int, ...]
    disagreements: tuple[tuple[int, Finding], ...]  # (position among the chosen rows, VLM901 finding)
    left_by_time: int = 0
    video_rows: int = 0  # checked rows holding counted videos (their videos' tokens are not rechecked)
    skipped: str | None = None  # why nothing could be rechecked
    load_seconds: float = 0.0
    spent: float = 0.0


def recheck(
    scanner: Scanner,
    chosen: list[RowOutcome],
    seconds: float | None,
    load_seconds: float = 0.0,
    clock: Callable[[], float] = time.monotonic,
) -> Rechecked:
    """Recount `chosen` in turn through the exact path until `seconds` (of which `load_seconds` went on
    loading the real image processor) are spent; the first row is always checked."""
    checked = [0] * len(STRATA)
    skipped = scanner.model.exact_unavailable
    if skipped is not None:
        return Rechecked(tuple(checked), (), skipped=skipped)  # said on the summary, never a disagreement
    counted_load = (
        load_seconds if seconds is None else min(load_seconds, max(0.0, seconds - VERIFY_MIN_ROW_SECONDS))
    )
    start = clock() - counted_load
    exact = Scanner(replace(scanner.config, exact=True), model=scanner.model)
    rule = CountDisagreement()
    disagreements = []
    left_by_time = video_rows = 0
    measured_pixels, measured_seconds = 0, 0.0
    for position, fast in enumerate(chosen):
        pixels = row_pixels(fast)
        if seconds is not None:
            spent = clock() - start
            rate = measured_seconds / measured_pixels if measured_pixels else _PRIOR_SECONDS_PER_PIXEL
            if sum(checked) and spent >= seconds:  # one row is always checked: the self-check never idles
                left_by_time += len(chosen) - position
                break
            if sum(checked) and spent + rate * pixels > seconds:
                left_by_time += 1  # would overrun: a smaller row after it may still fit
                continue
        before = clock()
        precise = next(iter(exact.scan_samples([fast.result.sample])))
        if pixels:
            measured_pixels += pixels
            measured_seconds += clock() - before
        checked[stratum(pixels)] += 1
        a, b = fast.result, precise.result
        if any(info.kind == "video" and info.tokens is not None for info in a.media):
            video_rows += 1
        if any(ref.dropped for ref in a.sample.images):
            continue  # its embedded bytes were not kept (engine.KEEP_EMBEDDED_BYTES): nothing to recount
        if any(info.error_code == ImageError.BOMB for info in b.images):
            continue  # the exact path never decodes it (above bomb_pixels): VLM202's, not a disagreement
        if (a.seq_len, a.image_tokens) != (b.seq_len, b.image_tokens):
            message = (
                f"header path: seq {a.seq_len} (img {a.image_tokens}); "
                f"real image processor: seq {b.seq_len} (img {b.image_tokens})"
            )
            disagreements.append(
                (position, rule.finding(a, message, "rerun with --exact and report this model"))
            )
    return Rechecked(
        tuple(checked), tuple(disagreements), left_by_time, video_rows, None, load_seconds, clock() - start
    )


class _RecheckProcess:
    """A forked process that loads the real image processor while the scan runs here, then rechecks the
    rows it is sent. Forked before the scan: this process runs no other thread yet, and the child has the
    loaded model as it is here, without pickling it."""

    def __init__(self, scanner: Scanner) -> None:
        context = multiprocessing.get_context("fork")
        # A forked child must not use the tokenizer's thread pool that this process may have started (and
        # then says so on stderr): as runner.scan_parallel does before its fork.
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        self._connection, theirs = context.Pipe()
        self._child = context.Process(
            target=_recheck_child,
            args=(theirs, self._connection, scanner),
            name="vlmlint-verify",
            daemon=True,
        )
        self._child.start()
        theirs.close()

    def recheck(self, chosen: list[RowOutcome], seconds: float | None) -> Rechecked | None:
        """The child's recheck of `chosen`; None where it failed (the caller rechecks here instead). Only
        the wait for its load counts in `seconds`: it loaded on another core while the scan ran."""
        try:
            waited = time.monotonic()
            self._connection.recv()  # "ready": its image processor is loaded
            waited = time.monotonic() - waited
            self._connection.send((chosen, seconds, waited))
            kind, value = self._connection.recv()
        except (EOFError, OSError):
            kind, value = "failed", None
        finally:
            self.close()
        return value if kind == "done" else None

    def close(self) -> None:
        try:
            self._connection.close()
        finally:
            self._child.join(timeout=5)
            if self._child.is_alive():
                self._child.kill()
                self._child.join()


def _recheck_child(connection, parents, scanner: Scanner) -> None:
    """The forked process: load the image processor, say so, recheck the rows it is sent, answer."""
    parents.close()  # (its copy of the parent's end: the parent's close must reach this one as EOF)
    try:
        _load_image_processor(scanner)
        _first_call(scanner)
        connection.send("ready")
        chosen, seconds, load_seconds = connection.recv()
        connection.send(("done", recheck(scanner, chosen, seconds, load_seconds)))
    except (EOFError, OSError, KeyboardInterrupt):
        pass  # the scan ended without a recheck (interrupted): nothing to answer
    except Exception as exc:  # noqa: BLE001 (the parent rechecks the rows itself)
        try:
            connection.send(("failed", f"{type(exc).__name__}: {exc}"))
        except (OSError, ValueError):
            pass
    finally:
        connection.close()
        os._exit(0)  # no atexit handlers or buffered output of the parent's, twice


def small_datasets(datasets: list[str]) -> bool:
    """Local files of FORK_DATASET_BYTES in all at most (a folder or a hub dataset: not known small)."""
    total = 0
    for dataset in datasets:
        if not os.path.isfile(dataset):
            return False
        total += os.path.getsize(dataset)
    return total <= FORK_DATASET_BYTES


def _load_image_processor(scanner: Scanner) -> None:
    try:  # the image processor is loaded lazily where the formula path does not need it
        getattr(scanner.model, "image_processor", None)
    except Exception:  # noqa: BLE001 (the recheck's first row loads it again and reports what fails)
        pass


def _first_call(scanner: Scanner) -> None:
    """Run the real image processor once on a small blank image while the scan still runs: its first call
    pays for imports and caches (~35 ms for Qwen2-VL's) that would otherwise come out of the rows' budget."""
    try:
        from PIL import Image

        model = scanner.model
        scanner.pipeline.count_exact(
            scanner.family, model.image_processor, [Image.new("RGB", (64, 64))], model.settings
        )
    except Exception:  # noqa: BLE001 (only a warm-up: the rows' own calls report what fails)
        pass


def _place(outcome: RowOutcome) -> tuple:
    return (outcome.result.sample.source, outcome.result.sample.index)
