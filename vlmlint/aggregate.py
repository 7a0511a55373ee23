"""Aggregates over a scan: the running Summary behind every report, nearest-rank percentiles, histograms
and the records `vlmlint stats` fills (its distributions and recommendations).

Pure numbers and records: report/ renders them, the engine's callers and stats.py fill them. Imports
only the leaves (records, report.safe), so nothing that renders a report loads the engine.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from array import array
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import IO, Any

import orjson

from vlmlint.records import Finding, RowOutcome, Severity
from vlmlint.report.safe import dumps_safe

KEEP_FLAGGED_ROWS = 5_000  # rows with findings kept in memory (text table, HTML); later rows spill to disk


def percentiles(values: array) -> dict[str, int | None]:
    """min, p50, p90, p99, max by the nearest-rank method (None when there are no values)."""
    if not values:
        return {"min": None, "p50": None, "p90": None, "p99": None, "max": None}
    ordered = sorted(values)
    n = len(ordered)

    def rank(q: int) -> int:
        return ordered[max(1, -(-q * n // 100)) - 1]  # the ceil(q/100 * n)-th smallest value

    return {"min": ordered[0], "p50": rank(50), "p90": rank(90), "p99": rank(99), "max": ordered[-1]}


@dataclass
class Summary:
    samples: int = 0
    samples_with_findings: int = 0
    by_code: Counter = field(default_factory=Counter)
    by_severity: Counter = field(default_factory=Counter)
    seq_lens: array = field(default_factory=lambda: array("q"))
    image_tokens: array = field(default_factory=lambda: array("q"))
    # Rows with findings, in dataset order: the first `keep_rows` in memory (the text table and the HTML
    # report show them); the findings of later rows go to a spill file, so memory stays flat.
    flagged: list[RowOutcome] = field(default_factory=list)
    # Rows naming videos or audio clips, which vlmlint does not count yet (their lengths are lower bounds).
    media_rows: int = 0
    videos: int = 0
    audios: int = 0
    # Videos counted (per video: its placeholder tokens), and how each was sampled ("qwen-vl: fps 2 ...").
    video_tokens: array = field(default_factory=lambda: array("q"))
    video_modes: Counter = field(default_factory=Counter)
    verified_rows: int | None = None  # rows rechecked by --verify (None: not run)
    verify_disagreements: int = 0
    verify_skipped: str | None = None  # why --verify could not recheck any row
    verify_coverage: dict | None = None  # strata and budgets, when a --verify budget left rows out
    verify_video_rows: int = 0  # rechecked rows whose videos' counts were not rechecked (formula both times)
    keep_rows: int = KEEP_FLAGGED_ROWS
    spilled_rows: int = 0
    _spill: IO[bytes] | None = field(default=None, repr=False)
    _late: list[RowOutcome] = field(default_factory=list, repr=False)  # --verify rows after a spill
    # --resume: the findings of the rows scanned before the interruption (checkpoint.Checkpoint), first.
    restored: Callable[[], Iterator[Finding]] | None = field(default=None, repr=False)

    def add(self, outcome: RowOutcome) -> None:
        self.samples += 1
        result = outcome.result
        if result.seq_len is not None:
            self.seq_lens.append(result.seq_len)
        self.image_tokens.extend(t for t in result.image_tokens if t is not None)
        for info in result.media:
            if info.tokens is not None:
                self.video_tokens.append(info.tokens)
                self.video_modes[info.counted_by] += 1
        uncounted = [info for info in result.media if info.tokens is None]
        if uncounted:  # the media vlmlint could not count (VLM109)
            self.media_rows += 1
            videos = sum(info.kind == "video" for info in uncounted)
            self.videos += videos
            self.audios += len(uncounted) - videos
        if outcome.findings:
            self.samples_with_findings += 1
            if len(self.flagged) < self.keep_rows:
                self.flagged.append(outcome)
            else:
                self._spill_findings(outcome.findings)
            for finding in outcome.findings:
                self.by_code[finding.code] += 1
                self.by_severity[finding.severity.value] += 1

    def add_verification(
        self,
        checked: int,
        disagreements: list[tuple[RowOutcome, Finding]],
        skipped: str | None = None,
        coverage: dict | None = None,
        video_rows: int = 0,
    ) -> None:
        """Record the --verify self-check; each disagreement joins its row's findings."""
        self.verified_rows = checked
        self.verify_video_rows = video_rows
        self.verify_coverage = coverage
        self.verify_skipped = skipped
        self.verify_disagreements = len(disagreements)
        for outcome, finding in disagreements:
            position = next((i for i, o in enumerate(self.flagged) if o.result is outcome.result), None)
            if position is None:
                if not any(o.result is outcome.result for o in self._late):
                    self.samples_with_findings += 1
                # After a spill, a row's place is lost: its recheck finding comes after every row.
                (self._late if self._spill is not None else self.flagged).append(
                    RowOutcome(outcome.result, (finding,))
                )
            else:
                existing = self.flagged[position]
                self.flagged[position] = RowOutcome(existing.result, existing.findings + (finding,))
            self.by_code[finding.code] += 1
            self.by_severity[finding.severity.value] += 1

    def _spill_findings(self, findings: tuple[Finding, ...]) -> None:
        if self._spill is None:
            self._spill = tempfile.TemporaryFile(prefix="vlmlint-findings-")  # gone when closed
        self.spilled_rows += 1
        for finding in findings:
            self._spill.write(dumps_safe(finding.to_dict()) + b"\n")  # names may hold non-UTF-8 bytes

    def iter_findings(self) -> Iterator[Finding]:
        """Every finding in dataset order (memory, then the spill file, then late rechecks); re-iterable."""
        if self.restored is not None:
            yield from self.restored()
        for outcome in self.flagged:
            yield from outcome.findings
        if self._spill is not None:
            self._spill.flush()
            self._spill.seek(0)
            for line in self._spill:
                yield Finding.from_dict(orjson.loads(line))
            self._spill.seek(0, 2)  # back to the end for later writes
        for outcome in self._late:
            yield from outcome.findings

    @property
    def findings(self) -> list[Finding]:
        return list(self.iter_findings())

    def close(self) -> None:
        if self._spill is not None:
            self._spill.close()
            self._spill = None

    def failing(self, fail_on: Severity) -> int:
        """How many findings are at or above the fail level."""
        return sum(n for level, n in self.by_severity.items() if Severity(level).rank >= fail_on.rank)

    def to_dict(self) -> dict:
        return {
            "samples": self.samples,
            "samples_with_findings": self.samples_with_findings,
            "by_code": dict(sorted(self.by_code.items())),
            "by_severity": dict(sorted(self.by_severity.items())),
            "seq_len": percentiles(self.seq_lens),
            "image_tokens_per_image": percentiles(self.image_tokens),
            "verify": {"rows": self.verified_rows, "disagreements": self.verify_disagreements}
            | ({"not_run": self.verify_skipped} if self.verify_skipped else {})
            | ({"video_rows_formula_only": self.verify_video_rows} if self.verify_video_rows else {})
            | (self.verify_coverage or {}),
            # Rows whose videos / audio clips are not counted: their seq_len is a lower bound (VLM109).
            "media_not_counted": {"rows": self.media_rows, "videos": self.videos, "audios": self.audios},
            # Videos counted from their headers: tokens per video, and each sampling mode's count.
            "videos_counted": {
                "videos": len(self.video_tokens),
                "tokens_per_video": percentiles(self.video_tokens),
                "modes": dict(sorted(self.video_modes.items())),
            },
        }


# -- histograms and distributions (`vlmlint stats`, the HTML report) ---------------------------


@dataclass(frozen=True)
class Bin:
    low: int  # inclusive
    high: int  # exclusive, except for the last bin, which includes the maximum
    count: int


def histogram(values: Sequence[int], bins: int = 20) -> list[Bin]:
    """Split [min, max] into at most `bins` equal integer-width bins; [] for no values."""
    if not values:
        return []
    low, high = min(values), max(values)
    width = max(1, -(-(high - low + 1) // bins))  # ceil, so the bins cover every value
    count = -(-(high - low + 1) // width)
    counts = [0] * count
    for value in values:
        counts[(value - low) // width] += 1
    return [Bin(low + i * width, low + (i + 1) * width, n) for i, n in enumerate(counts)]


# (label, percent): nearest-rank percentiles shown for every distribution.
PERCENTILES: tuple[tuple[str, Fraction], ...] = (
    ("min", Fraction(0)),
    ("p50", Fraction(50)),
    ("p90", Fraction(90)),
    ("p99", Fraction(99)),
    ("p99.9", Fraction(999, 10)),
    ("max", Fraction(100)),
)


def nearest_rank(ordered: Sequence[int], percent: Fraction | int) -> int:
    """The ceil(percent / 100 * n)-th smallest of `ordered` (sorted ascending), at least the first."""
    rank = max(1, math.ceil(Fraction(percent) * len(ordered) / 100))
    return ordered[rank - 1]


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


# -- what `vlmlint stats` recommends ------------------------------------------------------------


@dataclass(frozen=True)
class Recommendation:
    keep: str  # "100%", "99.9%", "99%"
    rows_required: int  # ceil(share * rows)
    value: int | None  # None: no single value keeps the share (or no rows)
    rows_kept: int  # rows within the limit at `value`
    unbounded: bool = False  # every value >= `value` keeps the same rows (no image is shrunk further)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


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


@dataclass(frozen=True)
class VideoRecommendation:
    """One share of a video knob: the largest grid value keeping it (None: no grid value does)."""

    keep: str  # "100%", "99.9%", "99%"
    rows_required: int  # ceil(share * rows)
    value: float | int | None
    rows_kept: int  # video rows within the limit at `value`
    top: bool = False  # `value` is the grid's largest: larger values were not tried

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class VideoKnobStats:
    """One video sampling knob searched on its grid, the other knobs at their current values."""

    name: str  # as the sampling mode names it: video_fps, FPS, size.longest_edge, ...
    mode: str  # who reads it: "transformers (Qwen2VLVideoProcessor)", "--pipeline llamafactory", ...
    current: float | int | None  # None: not in effect now (every frame is kept)
    grid: str  # the values tried, in words
    limit: int
    rows_fittable: int  # video rows that some grid value makes fit (the shares are of these)
    rows_at_current: int  # of those, the rows within the limit at the current value
    unfittable: int  # video rows within the limit at no grid value
    unfittable_rows: tuple[str, ...]  # the first locations
    recommendations: tuple[VideoRecommendation, ...]

    def to_dict(self) -> dict[str, Any]:
        record = dataclasses.asdict(self)
        record["unfittable_rows"] = list(self.unfittable_rows)
        record["recommendations"] = [r.to_dict() for r in self.recommendations]
        return record


@dataclass(frozen=True)
class VideoStats:
    """The video rows of a stats run and the video knobs that fit them (stats.VideoCollector)."""

    rows: int  # counted rows whose videos are all counted (the rows the knobs are searched for)
    rows_uncounted: int  # counted rows with a video vlmlint does not count (VLM109): not searched
    knobs: tuple[VideoKnobStats, ...]
    notes: tuple[str, ...]  # why a knob is not searched in this mode (as knob_note for images)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "rows_uncounted": self.rows_uncounted,
            "knobs": [k.to_dict() for k in self.knobs],
            "notes": list(self.notes),
        }


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
    video: VideoStats | None = None  # None: no counted row holds a video

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
            "video": self.video.to_dict() if self.video else None,
        }
