"""Findings about vlmlint itself: produced by the --verify self-check, not by a row's content."""

from __future__ import annotations

from collections.abc import Iterator

from vlmlint.records import Finding, RowResult, Severity
from vlmlint.rules.base import Rule, RuleContext


class CountDisagreement(Rule):
    """The header-only count for a row differs from the real image processor's (vlmlint bug).

    **Why** Every scan rechecks a few rows (`--verify N`, default 32) by decoding their images and
    running the model's real image processor. A difference means vlmlint's formula for this model
    or configuration is wrong, so its other counts cannot be trusted either.

    **Example** `--verify 32` reports "header path: seq 1234 (img 1176); real processor: seq 1235
    (img 1177)".

    **Fix** Rerun with `--exact` to get the real processor's counts for every row, and report the
    model and image size to the vlmlint maintainers.
    """

    code = "VLM901"
    name = "count-disagreement"
    severity = Severity.ERROR

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        return iter(())  # raised by vlmlint.verify, never by a row's own facts
