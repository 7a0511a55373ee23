"""Running totals over a scan: counts by code and the distributions of lengths."""

from __future__ import annotations

import tempfile
from array import array
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO

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
    verified_rows: int | None = None  # rows rechecked by --verify (None: not run)
    verify_disagreements: int = 0
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
        if result.media:
            self.media_rows += 1
            videos = sum(info.kind == "video" for info in result.media)
            self.videos += videos
            self.audios += len(result.media) - videos
        if outcome.findings:
            self.samples_with_findings += 1
            if len(self.flagged) < self.keep_rows:
                self.flagged.append(outcome)
            else:
                self._spill_findings(outcome.findings)
            for finding in outcome.findings:
                self.by_code[finding.code] += 1
                self.by_severity[finding.severity.value] += 1

    def add_verification(self, checked: int, disagreements: list[tuple[RowOutcome, Finding]]) -> None:
        """Record the --verify self-check; each disagreement joins its row's findings."""
        self.verified_rows = checked
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
            "verify": {"rows": self.verified_rows, "disagreements": self.verify_disagreements},
            # Rows whose videos / audio clips are not counted: their seq_len is a lower bound (VLM109).
            "media_not_counted": {"rows": self.media_rows, "videos": self.videos, "audios": self.audios},
        }
