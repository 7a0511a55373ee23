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

For rows with videos (issue 20), the video sampling knobs as the scan's sampling mode names them
(video_knobs): under transformers' own video processor each family's (Family.video_knobs: Qwen-VL's
`fps` / `max_frames` / `max_pixels` or `size.longest_edge`, Gemma 4's `num_frames` or `fps` and
`max_soft_tokens`, GLM-4.1V's `fps` / `max_duration` / `size.longest_edge`, SmolVLM2's `video_sampling`
fps / max_frames, InternVL's and the LLaVA video families' `num_frames` or `fps`; a frame count written
with `do_sample_frames: true` where every frame is kept now); LLaMA-Factory 0.9.5's `video_fps` /
`video_maxlen` / `video_max_pixels`; ms-swift 4.6.0's (qwen-vl-utils 0.0.14) `FPS` / `FPS_MAX_FRAMES` /
`VIDEO_MAX_PIXELS`. One knob at a time, the others at their current values, each on a fixed grid of
values the sampler accepts, every grid value recounted exactly for every video row with vlmlint's own
video count (VideoCollector: no monotonicity is assumed). Shares are of the counted video rows; rows
with an uncounted video (VLM109) are counted apart, and rows the current setting refuses (a clip shorter
than Gemma 4's num_frames 32) are not searched.
"""

from __future__ import annotations

import copy
import math
from array import array
from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction
from functools import lru_cache
from typing import Any

from vlmlint.aggregate import (  # noqa: F401 (the records stats fills; tests import them here)
    PERCENTILES,
    DatasetStats,
    Distribution,
    KnobStats,
    Recommendation,
    VideoKnobStats,
    VideoRecommendation,
    VideoStats,
    nearest_rank,
)
from vlmlint.engine import Scanner
from vlmlint.models import CountError
from vlmlint.models.base import Knob, Run, VideoCount
from vlmlint.models.knobs import PATCHES_GRID, VideoKnob, grid_of, patches_words
from vlmlint.models.registry import knob_for
from vlmlint.pipelines import PipelineError
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
        # A trainer that sizes images itself (its own option, e.g. LLaMA-Factory's image_max_pixels): that
        # option is the knob, named as the trainer names it, searched on a grid (TrainerImageSearch).
        trainer = trainer_image_search(scanner, knob, self.limit) if isinstance(knob, Knob) else None
        self.trainer = trainer if isinstance(trainer, TrainerImageSearch) else None
        if trainer is not None:  # the trainer's option replaces the processor's knob, or says why not
            knob = None if self.trainer else trainer
        self.knob: Knob | None = knob if isinstance(knob, Knob) else None
        self.knob_note: str | None = knob if isinstance(knob, str) else None
        self.length_at = RowLength(scanner, self.knob) if self.knob else None
        self.video = VideoCollector(scanner, self.limit)

    def add(self, outcome: RowOutcome) -> None:
        self.rows += 1
        row = outcome.result
        if row.seq_len is None:
            return
        self.seq_lens.append(row.seq_len)
        self.lower_bound += row.lengths_lower_bound
        self.image_tokens.extend(t for t in row.image_tokens if t is not None)
        if self.knob is not None or row.media:  # the searches render the row's messages again
            row = outcome.complete().result
        if self.knob is not None:
            self._search(row)
        if self.trainer is not None:
            self.trainer.add(row)
        self.video.add(row)

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
        knob_stats = self.trainer.result() if self.trainer is not None else None
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
            video=self.video.result(),
        )


class GridTally:
    """How many rows fit at each value of an explicit grid, and those that fit at none: what both grid
    searches (the trainer's image option, the video knobs) keep, every value counted for every row."""

    def __init__(self, size: int) -> None:
        self.fitting = [0] * size
        self.fittable = self.at_current = self.unfittable = 0
        self.unfittable_rows: list[str] = []

    def tally(self, row: RowResult, fits: list[bool], limit: int) -> None:
        if not any(fits):
            self.unfittable += 1
            if len(self.unfittable_rows) < UNFITTABLE_LISTED:
                self.unfittable_rows.append(row.sample.location)
            return
        self.fittable += 1
        self.at_current += row.seq_len is not None and row.seq_len <= limit
        for position, fit in enumerate(fits):
            self.fitting[position] += fit

    def shares(self) -> Iterable[tuple[str, int, int | None]]:
        """Per share: (label, rows it needs, the position of the largest value keeping them, or None)."""
        for label, share in KEEP_SHARES:
            need = rows_to_keep(share, self.fittable)
            best = next(
                (
                    i
                    for i in reversed(range(len(self.fitting)))
                    if self.fitting[i] >= need and self.fitting[i]
                ),
                None,
            )
            yield label, need, best


class TrainerImageSearch(GridTally):
    """The trainer's own image-size option (Pipeline.image_size_option: LLaMA-Factory's image_max_pixels,
    swift's max_pixels, Qwen's fine-tune script's max_pixels), searched as `--pipeline-option KEY=value`
    would set it: a fresh pipeline per grid value, each image recounted by its count_image (the trainer's
    pre-resize, then the family's formula). Only for families whose image expansion holds no text that
    changes with the size (Knob.text_unchanged), so a row's length at a value is its scanned length plus
    the change in its image runs. Every grid value is counted for every row (no binary search: a
    pre-resize then smart_resize's rounding is not monotone everywhere), and a share's recommendation is
    the largest grid value where enough rows fit.
    """

    def __init__(
        self, scanner: Scanner, name: str, values: tuple[int, ...], current: int, grid: str, limit: int
    ):
        from vlmlint.pipelines import load_pipeline

        self.scanner, self.name, self.current, self.grid, self.limit = scanner, name, current, grid, limit
        options = dict(scanner.config.pipeline_options)
        self.pipelines: list[tuple[int, Any]] = []
        for value in values:
            try:
                fresh = load_pipeline(scanner.config.pipeline, {**options, name: value})
                fresh.bind(scanner.model)
            except (PipelineError, CountError):  # a value the trainer's own checks refuse
                continue
            self.pipelines.append((value, fresh))
        super().__init__(len(self.pipelines))
        family, settings = scanner.family, scanner.model.settings
        self._tokens = lru_cache(maxsize=65536)(
            lambda position, height, width, images: (
                self.pipelines[position][1].count_image(family, height, width, settings, images).tokens
            )
        )

    def length(self, row: RowResult, position: int) -> int | None:
        """The row's length with the option at the position's value; None where an image is refused."""
        assert row.seq_len is not None
        n, length = len(row.images), row.seq_len
        for info, tokens in zip(row.images, row.image_tokens, strict=True):
            if tokens is None:
                continue  # an unreadable image counts nothing at any value
            try:
                length += self._tokens(position, info.height, info.width, n) - tokens
            except CountError:
                return None
        return length

    def add(self, row: RowResult) -> None:
        fits = [
            (n := self.length(row, i)) is not None and n <= self.limit for i in range(len(self.pipelines))
        ]
        self.tally(row, fits, self.limit)

    def result(self) -> KnobStats:
        found = [
            Recommendation(label, need, None, 0)
            if best is None
            else Recommendation(label, need, self.pipelines[best][0], self.fitting[best])
            for label, need, best in self.shares()
        ]
        low = self.pipelines[0][0] if self.pipelines else self.current
        return KnobStats(
            name=self.name,
            current=self.current,
            step=0,  # an explicit grid, not multiples of a step
            low=low,
            grid=self.grid,
            limit=self.limit,
            rows_fittable=self.fittable,
            rows_at_current=self.at_current,
            unfittable=self.unfittable,
            unfittable_rows=tuple(self.unfittable_rows),
            recommendations=tuple(found),
        )


def trainer_image_search(scanner: Scanner, knob: Knob, limit: int | None) -> TrainerImageSearch | str | None:
    """The search of the trainer's image-size option when the scan's pipeline has one (None: it has not,
    the processor's knob is searched), or a sentence saying why it is not searched."""
    option = scanner.pipeline.image_size_option()
    if option is None or limit is None or scanner.model.tokenizer is None:
        return None
    name, current, low = option
    if not knob.text_unchanged:
        return (
            f"--pipeline {scanner.config.pipeline}'s {name} is not searched for {scanner.family.title} (its image "
            "expansion holds text that changes with the size); only the max length is recommended"
        )
    step = knob.step
    values = grid_of((n * step for n in PATCHES_GRID), current, max(low, 1))
    grid = f"{patches_words(int(math.isqrt(step)))}, and the current {current}, from {max(low, 1)}; each value set as --pipeline-option {name}=VALUE"
    return TrainerImageSearch(scanner, name, tuple(int(v) for v in values), current, grid, limit)


def collect(scanner: Scanner, outcomes: Iterable[RowOutcome], dataset: str) -> DatasetStats:
    """The stats of one scan (for Python callers and tests; the CLI feeds a collector with progress)."""
    collector = StatsCollector(scanner, dataset)
    for outcome in outcomes:
        collector.add(outcome)
    return collector.result()


# -- video sampling knobs (issue 20, part 4) ----------------------------------------------------------


def video_knobs(scanner: Scanner) -> tuple[list[VideoKnob], list[str]]:
    """The video knobs of the scan's family and sampling mode, and a sentence for each that is not searched.

    Each mode says its own: a trainer's pipeline its options (Pipeline.video_knobs: LLaMA-Factory's
    video_fps / video_maxlen / video_max_pixels, swift's FPS / FPS_MAX_FRAMES / VIDEO_MAX_PIXELS), each
    tried as `--pipeline-option KEY=value` would set it (a fresh pipeline, bound); transformers' own video
    processor the family's (Family.video_knobs, each a key of video_preprocessor_config.json)."""
    if scanner.video_refusal is not None:
        return [], [f"videos are not counted ({scanner.video_refusal}): no video knob is searched"]
    family, pipeline, model = scanner.family, scanner.pipeline, scanner.model
    name = scanner.config.pipeline
    not_yet = (
        "its video sampling knobs are not searched yet (under a trainer's own sampling only --pipeline "
        "llamafactory's and swift's Qwen-VL video paths are); only the max length is recommended for its video rows"
    )
    if pipeline.video_sampling != "transformers":  # a trainer's own sampling
        from vlmlint.pipelines import load_pipeline

        options = dict(scanner.config.pipeline_options)

        @lru_cache(maxsize=256)
        def bound(key: str, value: float | int) -> Any:
            fresh = load_pipeline(name, {**options, key: value})
            fresh.bind(model)
            return fresh

        def at(key: str) -> Callable[[float | int], tuple[Any, Any]]:
            return lambda value: (bound(key, value), model.video_settings)

        knobs = pipeline.video_knobs(model, at) if pipeline.video_sampling is not None else None
        if knobs is None:
            return [], [f"{family.title} under --pipeline {name}: {not_yet}"]
        return knobs, []
    if family.video_knobs is None:  # every family that counts videos under transformers has its hook
        return [], [
            f"{family.title} under transformers' video processor: its video sampling knobs are not searched "
            "yet; only the max length is recommended for its video rows"
        ]
    return family.video_knobs(model.video_settings, pipeline)


Shape = tuple[tuple[Any, ...], ...]  # a row's video expansions with the run lengths left out


class VideoRowLength:
    """A counted video row's sequence length with its videos sampled another way, counted as the scan counts
    it: each video through the pipeline's count_video, the family's check_videos / row_videos, the
    expansions composed into the rendered row with its images and tokenized.

    Tokenizing is skipped where it cannot change anything: the composed text writes each run of one
    special token once (counting.TextEncoder.compose), so two samplings whose expansions differ only in
    their runs' lengths give the same text, and their lengths differ by the runs' lengths alone. The text
    is composed and tokenized again only for a new shape (other timestamps, frame markers or intros).
    """

    def __init__(self, scanner: Scanner) -> None:
        self.scanner = scanner
        self._encoders: dict[int, Any] = {}

    def counts(self, row: RowResult, pipeline: Any, settings: Any) -> list[VideoCount]:
        """The row's video counts sampled by `pipeline` with `settings` (CountError: the sampler refuses)."""
        family = self.scanner.family
        counts = [
            pipeline.count_video(family, info.video, settings)
            for info in row.media
            if info.kind == "video" and info.video is not None
        ]
        if len(counts) > 1 and family.check_videos is not None:
            family.check_videos(counts, settings)
        if len(counts) > 1 and family.row_videos is not None:
            counts = family.row_videos(counts, settings)
        return counts

    def shape(self, counts: list[VideoCount], settings: Any) -> tuple[Shape, int]:
        """The expansions' text and run tokens (a run of 0 writes nothing: part of the shape), and their runs' total."""
        expand = self.scanner.family.expand_video
        assert expand is not None
        shape, runs = [], 0
        for count in counts:
            items = []
            for segment in expand(count, settings):
                if isinstance(segment, Run):
                    items.append((segment.token, segment.count == 0))
                    runs += segment.count
                else:
                    items.append(segment)
            shape.append(tuple(items))
        return tuple(shape), runs

    def composed(self, row: RowResult, counts: list[VideoCount], settings: Any) -> int:
        """The row's length with these video counts, composed and tokenized as the engine does."""
        scanner = self.scanner
        encoder = self._encoders.get(id(settings))
        if encoder is None or encoder.model.video_settings is not settings:
            model = copy.copy(scanner.model)
            model.video_settings = settings  # expand_video reads the model's video settings
            encoder = copy.copy(scanner.encoder)
            encoder.model = model
            self._encoders = {id(settings): encoder}
        rendered = encoder.render(row.sample.messages, videos=True)
        images = []
        if row.images:
            _, found = scanner._with_counts(row.sample, row.images)
            images = found or []
        text, saved = encoder.compose(rendered, images, videos=tuple(counts))
        return scanner._token_lengths([text])[0] + saved


class _RowLengths:
    """One row's lengths at many samplings: lengths by shape, from the scanned length and shape."""

    def __init__(self, measure: VideoRowLength, row: RowResult) -> None:
        self.measure, self.row = measure, row
        scanner = measure.scanner
        base = measure.counts(row, scanner.pipeline, scanner.model.video_settings)
        shape, runs = measure.shape(base, scanner.model.video_settings)
        assert row.seq_len is not None
        self.known: dict[Shape, tuple[int, int]] = {shape: (row.seq_len, runs)}

    def __call__(self, pipeline: Any, settings: Any) -> int | None:
        """The length with the row's videos sampled this way; None where the sampler refuses them."""
        try:
            counts = self.measure.counts(self.row, pipeline, settings)
        except CountError:
            return None
        shape, runs = self.measure.shape(counts, settings)
        known = self.known.get(shape)
        if known is None:
            known = self.known[shape] = (self.measure.composed(self.row, counts, settings), runs)
        length, at_runs = known
        return length + runs - at_runs


class _KnobSearch(GridTally):
    """One video knob: for every grid value, how many video rows are within the limit there."""

    def __init__(self, knob: VideoKnob) -> None:
        self.knob = knob
        self.samplers: list[tuple[float | int, Any, Any]] = []
        for value in knob.values:
            try:
                pipeline, settings = knob.at(value)
            except (PipelineError, CountError):  # a value the sampler's own checks refuse
                continue
            self.samplers.append((value, pipeline, settings))
        super().__init__(len(self.samplers))

    def add(self, lengths: _RowLengths, limit: int) -> None:
        fits = [
            (n := lengths(pipeline, settings)) is not None and n <= limit
            for _, pipeline, settings in self.samplers
        ]
        self.tally(lengths.row, fits, limit)

    def result(self, limit: int) -> VideoKnobStats:
        last = len(self.samplers) - 1
        found = [
            VideoRecommendation(label, need, None, 0)
            if best is None
            else VideoRecommendation(
                label, need, self.samplers[best][0], self.fitting[best], top=best == last
            )
            for label, need, best in self.shares()
        ]
        knob = self.knob
        return VideoKnobStats(
            name=knob.name,
            mode=knob.mode,
            current=knob.current,
            grid=knob.grid,
            limit=limit,
            rows_fittable=self.fittable,
            rows_at_current=self.at_current,
            unfittable=self.unfittable,
            unfittable_rows=tuple(self.unfittable_rows),
            recommendations=tuple(found),
        )


class VideoCollector:
    """The video part of `vlmlint stats`: each video knob searched over the counted rows with videos.

    One knob at a time, the others at their current values; every grid value is counted exactly for
    every row. No binary search: a row's length is NOT monotone in these knobs everywhere (LLaMA-Factory's
    pre-resize then smart_resize's rounding: a 1 s 448x252 clip under Qwen3-VL is 40 video tokens at
    video_max_pixels 24576 and 32 at 32768; tests/test_stats_video.py), and a sampler may refuse a clip
    at some values only (CountError: the row does not fit there). So a row keeps the set of grid values
    where it fits, and a share's recommendation is the largest value where enough rows fit.
    """

    def __init__(self, scanner: Scanner, limit: int | None) -> None:
        self.limit = limit
        self.rows = self.uncounted = 0
        knobs, notes = video_knobs(scanner)
        if knobs and limit is None:
            notes = ["the model states no context length: pass --max-length to get video recommendations"]
            knobs = []
        if knobs and scanner.model.tokenizer is None:
            notes, knobs = ["the model has no tokenizer: no sequence length to fit"], []
        self.notes = tuple(notes)
        self.searches = [_KnobSearch(knob) for knob in knobs]
        self.measure = VideoRowLength(scanner)

    def add(self, row: RowResult) -> None:
        videos = [info for info in row.media if info.kind == "video"]
        if not videos or row.seq_len is None:
            return
        if row.lengths_lower_bound or any(info.tokens is None or info.video is None for info in videos):
            self.uncounted += 1  # VLM109 (a video or an audio clip not counted): no exact length to search
            return
        self.rows += 1
        if self.searches:
            assert self.limit is not None
            lengths = _RowLengths(self.measure, row)
            for search in self.searches:
                search.add(lengths, self.limit)

    def result(self) -> VideoStats | None:
        if not self.rows and not self.uncounted:
            return None
        knobs = tuple(search.result(self.limit) for search in self.searches) if self.limit is not None else ()
        return VideoStats(rows=self.rows, rows_uncounted=self.uncounted, knobs=knobs, notes=self.notes)
