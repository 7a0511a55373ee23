"""`vlmlint stats`: the distributions of a scan's counts, and the settings that make the rows fit.

Pure computation over the scan's RowOutcomes; nothing here prints (report/stats_text.py renders).

Two recommendations are computed from the counts, never guessed:

- the max length that keeps 100%, 99.9% and 99% of the counted rows within it: the nearest-rank
  percentiles of the rows' sequence lengths (the ceil(q * n)-th smallest length);
- the family's image-size knob (Qwen-VL `max_pixels`, Idefics3/SmolVLM `size.longest_edge`) that keeps
  those shares of rows within the length limit (`--max-length`, else the model's context), on the
  processor's grid of values. Each row's sequence length is recounted at candidate values with
  vlmlint's own family formula (text tokens unchanged for Qwen-VL; Idefics3 rows are composed and
  tokenized again, since their tile markers are text), and the recommendation for a share q is the
  largest value at which at least ceil(q * n) rows are within the limit.

  The counts are NOT monotone in the knob everywhere, so a plain binary search over the whole range
  would be wrong. Qwen-VL's smart_resize keeps at least one factor-sized row when it shrinks an
  elongated image, and that clamp can give MORE tokens just below an image's rounded area
  (max_pixels_saturation) than at it: a 183x15 image is 8 tokens at max_pixels 4704 and 7 at 5488.
  Between these drop points the count never decreases, and above the largest it is constant
  (tests/test_stats.py checks both with hypothesis). So each row's range is cut at its images'
  drop points, each piece is binary-searched, and a row keeps the SET of values where it fits (a
  few intervals); the recommendation sweeps over all rows' intervals. Idefics3's tile grid has no
  drop points (checked the same way).

  A row that fits at no value (its text alone, or with its images at the smallest setting, is above
  the limit) cannot be fixed by an image setting; such rows are counted apart, and the shares are of
  the other rows.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction
from functools import lru_cache

from vlmlint.aggregate import (  # noqa: F401 (the records stats fills; tests import them here)
    PERCENTILES,
    DatasetStats,
    Distribution,
    KnobStats,
    Recommendation,
    nearest_rank,
)
from vlmlint.engine import Scanner
from vlmlint.models import CountError
from vlmlint.models.base import Knob
from vlmlint.models.registry import knob_for
from vlmlint.records import RowOutcome, RowResult

# (label, share of rows to keep within the limit)
KEEP_SHARES: tuple[tuple[str, Fraction], ...] = (
    ("100%", Fraction(1)),
    ("99.9%", Fraction(999, 1000)),
    ("99%", Fraction(99, 100)),
)
UNFITTABLE_LISTED = 20  # locations of unfittable rows kept for the report


def rows_to_keep(share: Fraction, rows: int) -> int:
    """How many of `rows` a share keeps: ceil(share * rows)."""
    return math.ceil(share * rows)


def largest_fitting(fits: Callable[[int], bool], low: int, high: int) -> int | None:
    """The largest k in [low, high] with fits(k), for a `fits` that is true up to some k and false
    after (monotone); None when fits(low) is false."""
    if low > high or not fits(low):
        return None
    if fits(high):  # the common case: the row fits across the whole piece
        return high
    high -= 1
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


# -- image-size knobs -------------------------------------------------------------------------------


# Knob (models/base.py) and each family's size_knob hook (its module) say what is searched.


class RowLength:
    """A counted row's sequence length at another knob value, counted as the scan counts it."""

    def __init__(self, scanner: Scanner, knob: Knob) -> None:
        self.scanner = scanner
        self.knob = knob
        family = scanner.family
        self._settings = lru_cache(maxsize=1024)(knob.settings_at)
        self._count = lru_cache(maxsize=65536)(
            lambda height, width, images, value: family.count(
                height, width, self._settings(value), images_in_row=images
            )
        )

    def counts(self, row: RowResult, value: int) -> list:
        n = len(row.images)
        return [self._count(info.height, info.width, n, value) for info in row.images]

    def __call__(self, row: RowResult, value: int, rendered: str | None = None) -> int:
        counts = self.counts(row, value)
        if self.knob.text_unchanged:
            return (row.text_tokens or 0) + sum(count.tokens for count in counts)
        scanner = self.scanner
        if rendered is None:
            rendered = scanner.render(row.sample.messages)
        text, saved = scanner.compose(rendered, counts, self._settings(value))
        return scanner._token_lengths([text])[0] + saved


Interval = tuple[int, int | None]  # [first, last] grid steps where a row fits; None: no end


def add_intervals(events: dict[int, int], intervals: Iterable[Interval]) -> None:
    """Count one row's fitting intervals into `events` (grid step -> change in rows fitting)."""
    for first, last in intervals:
        events[first] = events.get(first, 0) + 1
        if last is not None:
            events[last + 1] = events.get(last + 1, 0) - 1


def knob_recommendations(events: dict[int, int], rows: int, step: int) -> tuple[Recommendation, ...]:
    """The rows' fitting intervals (add_intervals) -> per share of `rows`, the largest value keeping it.

    A sweep over the intervals' ends: the number of rows within the limit is constant between two
    consecutive ends, so the largest value keeping `need` rows is the last step of the highest such
    piece (or, for a piece without end, any value from its first step).
    """
    pieces: list[tuple[int, int | None, int]] = []  # (first step, last step or None, rows fitting)
    fitting = 0
    points = sorted(events)
    for position, point in enumerate(points):
        fitting += events[point]
        last = points[position + 1] - 1 if position + 1 < len(points) else None
        pieces.append((point, last, fitting))
    found = []
    for label, share in KEEP_SHARES:
        need = rows_to_keep(share, rows)
        best = next(((f, la, n) for f, la, n in reversed(pieces) if n >= need and n), None)
        if best is None:
            found.append(Recommendation(label, need, None, 0))
        elif best[1] is None:
            found.append(Recommendation(label, need, best[0] * step, best[2], unbounded=True))
        else:
            found.append(Recommendation(label, need, best[1] * step, best[2]))
    return tuple(found)


def length_recommendations(seq_lens: Sequence[int]) -> tuple[Recommendation, ...]:
    """The max length that keeps each share of rows: the nearest-rank percentile of the lengths."""
    ordered = sorted(seq_lens)
    found = []
    for label, share in KEEP_SHARES:
        if not ordered:
            found.append(Recommendation(label, 0, None, 0))
            continue
        value = nearest_rank(ordered, share * 100)
        kept = sum(1 for n in ordered if n <= value)
        found.append(Recommendation(label, rows_to_keep(share, len(ordered)), value, kept))
    return tuple(found)


# -- the whole dataset ------------------------------------------------------------------------------


class StatsCollector:
    """Feed it a scan's outcomes one by one (streaming: only numbers are kept), then call result()."""

    def __init__(self, scanner: Scanner, dataset: str) -> None:
        self.scanner = scanner
        self.dataset = dataset
        self.limit = scanner.context.max_length
        self.rows = 0
        self.seq_lens = array("q")
        self.image_tokens = array("q")
        self.events: dict[int, int] = {}  # the fitting rows' intervals, swept by knob_recommendations
        self.fittable = 0
        self.at_current = 0
        self.unfittable = 0
        self.unfittable_rows: list[str] = []
        self.lower_bound = 0  # counted rows whose videos / audio are not counted
        knob = knob_for(scanner.family, scanner.model.settings)
        if isinstance(knob, Knob) and self.limit is None:
            knob = "the model states no context length: pass --max-length to get an image-size recommendation"
        if isinstance(knob, Knob) and scanner.model.tokenizer is None:
            knob = "the model has no tokenizer: no sequence length to fit"
        self.knob: Knob | None = knob if isinstance(knob, Knob) else None
        self.knob_note: str | None = None if isinstance(knob, Knob) else knob
        self.length_at = RowLength(scanner, self.knob) if self.knob else None

    def add(self, outcome: RowOutcome) -> None:
        self.rows += 1
        row = outcome.result
        if row.seq_len is None:
            return
        self.seq_lens.append(row.seq_len)
        self.lower_bound += row.lengths_lower_bound
        self.image_tokens.extend(t for t in row.image_tokens if t is not None)
        if self.knob is not None:
            self._search(outcome.complete().result)  # the search renders the row's messages again

    def _search(self, row: RowResult) -> None:
        intervals = self.fitting_intervals(row)
        if not intervals:
            self.unfittable += 1
            if len(self.unfittable_rows) < UNFITTABLE_LISTED:
                self.unfittable_rows.append(row.sample.location)
            return
        self.fittable += 1
        if row.seq_len <= self.limit:
            self.at_current += 1
        add_intervals(self.events, intervals)

    def fitting_intervals(self, row: RowResult) -> list[Interval]:
        """The grid steps (value // step) at which the row is within the limit, as a few intervals.

        The range is cut where an image's count may drop; on each piece the count never decreases,
        so fitting holds up to some step and not after it: a binary search finds that step.
        """
        knob, limit, length_at = self.knob, self.limit, self.length_at
        low = knob.low // knob.step
        shapes = [knob.shape(info.height, info.width) for info in row.images]
        high = max([low, *(-(-saturation // knob.step) for _, saturation in shapes)])
        end = None if knob.open_ended else high  # what "fits at the saturation" extends to
        if not row.images:  # a text-only row: no image setting changes it
            return [(low, end)] if row.seq_len <= limit else []
        steps = {-(-drop // knob.step) for drops, _ in shapes for drop in drops}
        cuts = sorted(k for k in steps if low < k < high)
        rendered = None if knob.text_unchanged else self.scanner.render(row.sample.messages)

        def fits(k: int) -> bool:
            return length_at(row, k * knob.step, rendered) <= limit

        intervals: list[Interval] = []
        try:
            bounds = [low, *cuts, high]
            for first, following in zip(bounds, bounds[1:], strict=False):
                last = largest_fitting(fits, first, following - 1)
                if last is not None:
                    intervals.append((first, last))
            if fits(high):  # from the saturation on, the counts no longer change
                intervals.append((high, end))
        except CountError:  # the processor refuses an image at some value: no value is trusted
            return []
        merged: list[Interval] = []
        for first, last in intervals:
            if merged and merged[-1][1] is not None and merged[-1][1] + 1 == first:
                merged[-1] = (merged[-1][0], last)
            else:
                merged.append((first, last))
        return merged

    def result(self) -> DatasetStats:
        scanner = self.scanner
        knob_stats = None
        if self.knob is not None:
            knob = self.knob
            knob_stats = KnobStats(
                name=knob.name,
                current=knob.current,
                step=knob.step,
                low=knob.low,
                grid=knob.grid,
                limit=self.limit,
                rows_fittable=self.fittable,
                rows_at_current=self.at_current,
                unfittable=self.unfittable,
                unfittable_rows=tuple(self.unfittable_rows),
                recommendations=knob_recommendations(self.events, self.fittable, knob.step),
            )
        config = scanner.config
        limit_source = None
        if self.limit is not None:
            limit_source = "--max-length" if config.max_length else "max_position_embeddings"
        return DatasetStats(
            dataset=self.dataset,
            model=scanner.model.describe(),
            rows=self.rows,
            rows_counted=len(self.seq_lens),
            limit=self.limit,
            limit_source=limit_source,
            model_context=scanner.model.max_position_embeddings,
            rows_within_limit=sum(1 for n in self.seq_lens if self.limit is None or n <= self.limit),
            seq_len=Distribution.of(self.seq_lens),
            image_tokens=Distribution.of(self.image_tokens),
            max_length=length_recommendations(self.seq_lens),
            knob=knob_stats,
            knob_note=self.knob_note,
            rows_lower_bound=self.lower_bound,
        )


def collect(scanner: Scanner, outcomes: Iterable[RowOutcome], dataset: str) -> DatasetStats:
    """The stats of one scan (for Python callers and tests; the CLI feeds a collector with progress)."""
    collector = StatsCollector(scanner, dataset)
    for outcome in outcomes:
        collector.add(outcome)
    return collector.result()
