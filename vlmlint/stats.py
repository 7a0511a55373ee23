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

import dataclasses
import math
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

from vlmlint.engine import Scanner
from vlmlint.models import CountError
from vlmlint.records import RowOutcome, RowResult
from vlmlint.report.histogram import Bin, histogram

# (label, percent): nearest-rank percentiles shown for every distribution.
PERCENTILES: tuple[tuple[str, Fraction], ...] = (
    ("min", Fraction(0)),
    ("p50", Fraction(50)),
    ("p90", Fraction(90)),
    ("p99", Fraction(99)),
    ("p99.9", Fraction(999, 10)),
    ("max", Fraction(100)),
)
# (label, share of rows to keep within the limit)
KEEP_SHARES: tuple[tuple[str, Fraction], ...] = (
    ("100%", Fraction(1)),
    ("99.9%", Fraction(999, 1000)),
    ("99%", Fraction(99, 100)),
)
UNFITTABLE_LISTED = 20  # locations of unfittable rows kept for the report


def nearest_rank(ordered: Sequence[int], percent: Fraction | int) -> int:
    """The ceil(percent / 100 * n)-th smallest of `ordered` (sorted ascending), at least the first."""
    rank = max(1, math.ceil(Fraction(percent) * len(ordered) / 100))
    return ordered[rank - 1]


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


# -- distributions ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Distribution:
    count: int
    percentiles: dict[str, int | None]
    histogram: tuple[Bin, ...]

    @classmethod
    def of(cls, values: Sequence[int]) -> Distribution:
        ordered = sorted(values)
        return cls(
            count=len(ordered),
            percentiles={
                label: nearest_rank(ordered, percent) if ordered else None for label, percent in PERCENTILES
            },
            histogram=tuple(histogram(ordered)),  # the same bins as the HTML report's
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "percentiles": self.percentiles,
            "histogram": [{"low": b.low, "high": b.high, "count": b.count} for b in self.histogram],
        }


# -- image-size knobs -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Knob:
    """One family's image-size setting, searched on its processor's grid of values."""

    name: str  # as written in the processor's config, e.g. "max_pixels"
    current: int
    step: int  # candidate values are the multiples of step
    low: int  # the smallest candidate (a multiple of step)
    settings_at: Callable[[int], Any] = dataclasses.field(repr=False)
    # (height, width) -> (values at which this image's count may drop, the value from which it no
    # longer changes). Between drops the count never decreases as the value grows.
    shape: Callable[[int, int], tuple[tuple[int, ...], int]] = dataclasses.field(repr=False)
    # True: every value above the saturation gives the same counts (Qwen-VL), so "fits there" means
    # "fits at any larger value". False: the grid ends at the saturation (Idefics3's 4096 cap).
    open_ended: bool
    # True when only the image-token runs change with the knob (Qwen-VL): the text tokens stay.
    # False: the expansion holds text that changes too (Idefics3's row/col markers), so the row is
    # composed and tokenized again at each value tried.
    text_unchanged: bool
    grid: str  # the candidates, in words


def _qwen_knob(settings: Any) -> Knob | str:
    from vlmlint.models.qwen_vl import max_pixels_saturation

    factor = settings.factor
    if not settings.do_resize:
        return (
            "do_resize is false: max_pixels has no effect and every image keeps its size "
            f"(sides must be multiples of {factor}); only the max length is recommended"
        )
    step = factor * factor

    def shape(height: int, width: int) -> tuple[tuple[int, ...], int]:
        # Below its rounded area an image is shrunk, and its sides never shrink as max_pixels grows;
        # at the rounded area the shrinking (and its one-row clamp) stops: the count may drop there.
        saturation = max_pixels_saturation(height, width, factor)
        return (saturation,), saturation

    return Knob(
        name="max_pixels",
        current=settings.max_pixels,
        step=step,
        low=-(-settings.min_pixels // step) * step,
        settings_at=lambda value: dataclasses.replace(settings, max_pixels=value),
        shape=shape,
        open_ended=True,
        text_unchanged=True,
        grid=f"multiples of (patch_size*merge_size)^2 = {step}, from min_pixels {settings.min_pixels}",
    )


def _idefics3_knob(settings: Any) -> Knob | str:
    from vlmlint.models.idefics3 import MAX_IMAGE_SIZE

    tile = settings.max_image_size
    fixed = f"every image is one {tile}x{tile} image of {settings.image_seq_len} tokens"
    if not settings.do_resize or not settings.longest_edge:
        return (
            "do_resize is off or size is a fixed height x width (not longest_edge): no image-size knob; "
            "only the max length is recommended"
        )
    if not settings.do_image_splitting:
        return f"do_image_splitting is off: {fixed}, so image tokens per image are fixed; only the max length is recommended"
    # The resize caps the long side at 4096 pixels: the grid ends at the first multiple of the tile above.
    high = -(-MAX_IMAGE_SIZE // tile) * tile
    return Knob(
        name="size.longest_edge",
        current=settings.longest_edge,
        step=tile,
        low=tile,
        settings_at=lambda value: dataclasses.replace(settings, longest_edge=value),
        shape=lambda height, width: ((), high),  # tiles never decrease as longest_edge grows
        open_ended=False,
        text_unchanged=False,
        grid=f"multiples of max_image_size.longest_edge = {tile}, up to {high} (the {MAX_IMAGE_SIZE}-pixel cap)",
    )


_FIXED = "image tokens per image are fixed by the processor's size, so there is no image-size knob; only the max length is recommended"
_NO_KNOB: dict[str, str] = {
    "llava": f"LLaVA-1.5 resizes and crops every image to one size: {_FIXED}",
    "paligemma": f"PaliGemma resizes every image to one size: {_FIXED}",
    "vision-encoder": "a plain vision encoder: the image goes to its own fixed-size input, not into the text "
    "sequence; only the max length (of the text) is recommended",
    "llava-next": "no image-size knob: image tokens per image are fixed by the grid pinpoints "
    "(image_grid_pinpoints); only the max length is recommended",
    "llava-onevision": "no image-size knob: image tokens per image are fixed by the grid pinpoints "
    "(image_grid_pinpoints); only the max length is recommended",
    "mllama": "every image is one <|image|> token in the text (its tiles go to cross-attention): no image "
    "setting changes the sequence length; only the max length is recommended",
    "internvl": "max_patches bounds the tiles per image, but vlmlint stats does not search it yet; only the "
    "max length is recommended",
    "pixtral": "size.longest_edge bounds the image size, but vlmlint stats does not search it yet; only the "
    "max length is recommended",
    "fallback": "no header formula for this processor: no image-size knob is searched; only the max length "
    "is recommended",
}


def knob_for(family_name: str, settings: Any) -> Knob | str:
    """The family's image-size knob, or a sentence saying why there is none to recommend."""
    if family_name == "qwen-vl":
        return _qwen_knob(settings)
    if family_name == "idefics3":
        return _idefics3_knob(settings)
    if family_name == "gemma3":
        if getattr(settings, "do_pan_and_scan", False):
            return (
                "pan-and-scan is on: pan_and_scan_max_num_crops bounds the crops per image, but vlmlint stats "
                "does not search it yet; only the max length is recommended"
            )
        return f"Gemma 3 without pan-and-scan resizes every image to one size: {_FIXED}"
    return _NO_KNOB.get(
        family_name, "no image-size knob known for this family; only the max length is recommended"
    )


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


@dataclass(frozen=True)
class Recommendation:
    keep: str  # "100%", "99.9%", "99%"
    rows_required: int  # ceil(share * rows)
    value: int | None  # None: no single value keeps the share (or no rows)
    rows_kept: int  # rows within the limit at `value`
    unbounded: bool = False  # every value >= `value` keeps the same rows (no image is shrunk further)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


Interval = tuple[int, int | None]  # [first, last] grid steps where a row fits; None: no end


@dataclass(frozen=True)
class KnobStats:
    name: str
    current: int
    step: int
    low: int
    grid: str
    limit: int
    rows_fittable: int  # rows that some value of the knob makes fit (the shares are of these)
    rows_at_current: int  # of those, the rows within the limit at the current value
    unfittable: int
    unfittable_rows: tuple[str, ...]  # the first locations
    recommendations: tuple[Recommendation, ...]

    def to_dict(self) -> dict[str, Any]:
        record = dataclasses.asdict(self)
        record["unfittable_rows"] = list(self.unfittable_rows)
        record["recommendations"] = [r.to_dict() for r in self.recommendations]
        return record


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


@dataclass(frozen=True)
class DatasetStats:
    dataset: str
    model: dict[str, Any]
    rows: int
    rows_counted: int  # rows with a sequence length (the others are unusable: see vlmlint scan)
    limit: int | None  # the length limit the knob is searched against
    limit_source: str | None  # "--max-length" or "max_position_embeddings"
    model_context: int | None
    rows_within_limit: int
    seq_len: Distribution
    image_tokens: Distribution  # per image
    max_length: tuple[Recommendation, ...]
    knob: KnobStats | None
    knob_note: str | None  # why there is no knob (or why it was not searched)
    # Counted rows holding videos or audio clips, which are not counted (VLM109): lower-bound lengths.
    rows_lower_bound: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "model": self.model,
            "rows": self.rows,
            "rows_counted": self.rows_counted,
            "limit": self.limit,
            "limit_source": self.limit_source,
            "model_context": self.model_context,
            "rows_within_limit": self.rows_within_limit,
            "seq_len": self.seq_len.to_dict(),
            "image_tokens_per_image": self.image_tokens.to_dict(),
            "max_length": [r.to_dict() for r in self.max_length],
            "knob": self.knob.to_dict() if self.knob else None,
            "knob_note": self.knob_note,
            "rows_lower_bound": self.rows_lower_bound,
        }


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
        knob = knob_for(scanner.family.name, scanner.model.settings)
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
        self.lower_bound += bool(row.media)
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
