"""Running totals over a scan: counts by code and the distributions of lengths."""

from __future__ import annotations

from array import array
from collections import Counter
from dataclasses import dataclass, field

from vlmlint.engine import RowOutcome
from vlmlint.rules import Finding, Severity


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
    flagged: list[RowOutcome] = field(default_factory=list)  # only rows with findings are kept
    verified_rows: int | None = None  # rows rechecked by --verify (None: not run)
    verify_disagreements: int = 0

    def add(self, outcome: RowOutcome) -> None:
        self.samples += 1
        result = outcome.result
        if result.seq_len is not None:
            self.seq_lens.append(result.seq_len)
        self.image_tokens.extend(t for t in result.image_tokens if t is not None)
        if outcome.findings:
            self.samples_with_findings += 1
            self.flagged.append(outcome)
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
                self.samples_with_findings += 1
                self.flagged.append(RowOutcome(outcome.result, (finding,)))
            else:
                existing = self.flagged[position]
                self.flagged[position] = RowOutcome(existing.result, existing.findings + (finding,))
            self.by_code[finding.code] += 1
            self.by_severity[finding.severity.value] += 1

    @property
    def findings(self) -> list[Finding]:
        return [finding for outcome in self.flagged for finding in outcome.findings]

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
        }
