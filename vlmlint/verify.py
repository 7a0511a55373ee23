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
  least VERIFY_MIN_SECONDS): loading the real image processor counts (the larger of the loading thread's
  CPU time, which the scan paid beside it, and the wait for it after the scan), the rows get the rest; a
  row whose predicted cost (its pixels at the rate measured so far) would overrun is left out, and
  smaller ones after it may still fit. The first row is always checked.
The real image processor is loaded in a thread beside the scan (Verifier.warm), so that its imports hide
behind the scan; the rows themselves are rechecked after it. The summary says how many rows were checked and, when a budget left rows out, each stratum's rows and
checked rows (Verifier.coverage).
"""

from __future__ import annotations

import random
import threading
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
    _load_cpu: float = 0.0  # the loading thread's CPU time
    # checked rows holding counted videos: the recheck runs the real image processor only, so their video
    # tokens come from the same formula both times (the real video processors need torch and torchvision)
    video_rows: int = 0
    _warming: threading.Thread | None = None
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

    def warm(self, scanner: Scanner) -> None:
        """Load the real image processor in a thread beside the scan, so that the recheck does not wait for
        transformers' imports (~1 s) after it. Call it once the worker processes are forked (a fork while a
        thread holds an import lock would leave the child stuck on that lock)."""
        if self.size <= 0 or self._warming is not None:
            return

        def load() -> None:
            began = time.thread_time()
            try:  # the image processor is loaded lazily where the formula path does not need it
                getattr(scanner.model, "image_processor", None)
            except Exception:  # noqa: BLE001 (run() loads it again and reports what fails)
                pass
            finally:
                self._load_cpu = time.thread_time() - began

        self._warming = threading.Thread(target=load, name="vlmlint-verify-warm", daemon=True)
        self._warming.start()

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
        if not chosen:
            return 0, []
        waited = time.monotonic()
        if self._warming is not None:
            self._warming.join()
        self.skipped = scanner.model.exact_unavailable  # (loads the image processor if no thread did)
        waited = time.monotonic() - waited
        if self.skipped is not None:
            return 0, []  # said on the summary, never a disagreement
        # Why count the load: on a busy machine the thread's imports slow the scan beside it by about their
        # CPU time, and whatever is left of them after the scan is waited for; either is the self-check's cost.
        self.load_seconds = max(self._load_cpu, waited)
        start = self.clock() - self.load_seconds
        exact = Scanner(replace(scanner.config, exact=True), model=scanner.model)
        rule = CountDisagreement()
        disagreements = []
        checked = 0
        measured_pixels, measured_seconds = 0, 0.0
        for position, fast in enumerate(chosen):
            pixels = row_pixels(fast)
            if self.seconds is not None:
                spent = self.clock() - start
                rate = measured_seconds / measured_pixels if measured_pixels else _PRIOR_SECONDS_PER_PIXEL
                if checked and spent >= self.seconds:  # one row is always checked: the self-check never idles
                    self.left_by_time += len(chosen) - position
                    break
                if checked and spent + rate * pixels > self.seconds:
                    self.left_by_time += 1  # would overrun: a smaller row after it may still fit
                    continue
            before = self.clock()
            precise = next(iter(exact.scan_samples([fast.result.sample])))
            if pixels:
                measured_pixels += pixels
                measured_seconds += self.clock() - before
            checked += 1
            self.strata[stratum(pixels)].checked += 1
            a, b = fast.result, precise.result
            if any(info.kind == "video" and info.tokens is not None for info in a.media):
                self.video_rows += 1
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
                    (fast, rule.finding(a, message, "rerun with --exact and report this model"))
                )
        self.spent = self.clock() - start
        disagreements.sort(key=lambda pair: _place(pair[0]))  # dataset order, as before the budgets
        return checked, disagreements

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


def _place(outcome: RowOutcome) -> tuple:
    return (outcome.result.sample.source, outcome.result.sample.index)
