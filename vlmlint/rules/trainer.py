"""Rules about what a trainer does to a row (--pipeline llamafactory|swift|trl; vlmlint/pipelines)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

from vlmlint.records import Finding, RowResult, Severity, TrainerFate
from vlmlint.rules.base import Rule, RuleContext


class _ReportsFate:
    """A rule that reports the row's trainer fate of one status, in the trainer's own words."""

    status: ClassVar[str]

    def wanted(self, fate: TrainerFate) -> bool:
        return True

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        fate = row.trainer
        if fate is not None and getattr(fate, "status", None) == self.status and self.wanted(fate):
            yield self.finding(row, f"{fate.trainer}: {fate.reason}", fate.fix)


class TrainerCrash(_ReportsFate, Rule):
    """The trainer's truncation cuts through an image's tokens: training crashes on this row.

    **Why**: a trainer that cuts a long row at its length limit (LLaMA-Factory's cutoff_len, ms-swift's
    max_length with truncation_strategy left/right, TRL's max_length) keeps part of an image's
    placeholder tokens. The model then gets fewer image tokens than the vision tower produces features:
    "Image features and image tokens do not match", hours into a run.

    **Example**: with `--pipeline llamafactory --pipeline-option cutoff_len=1024`, a row whose image
    spans tokens 900-1600 is cut at 1024.

    **Fix**: raise the trainer's length limit to the row's length, shrink the image (the preset's
    pixel limit), or drop the row.
    """

    code = "VLM601"
    name = "trainer-crash"
    severity = Severity.ERROR
    status = "crash"


class TrainerTruncatesAnswer(_ReportsFate, Rule):
    """The trainer's truncation cuts trained-on answer tokens from this row.

    **Why**: the row trains, but on part of its answer: the labels past the cut are lost silently, and
    a row cut before its answer trains on nothing.

    **Example**: `--pipeline swift --pipeline-option max_length=512 --pipeline-option
    truncation_strategy=right` on a 700-token row whose answer starts at token 450.

    **Fix**: raise the trainer's length limit, shorten the prompt, or split the conversation.
    """

    code = "VLM602"
    name = "trainer-truncates-answer"
    severity = Severity.WARNING
    status = "truncated"

    def wanted(self, fate: TrainerFate) -> bool:
        return bool(fate.answer_tokens_lost)


class TrainerDropsRow(_ReportsFate, Rule):
    """The trainer drops this row before training (too long for its limit or its packing).

    **Why**: the row never trains, and the dataset is smaller than it looks (ms-swift's
    truncation_strategy delete, LLaMA-Factory's packing).

    **Example**: `--pipeline swift --pipeline-option max_length=2048
    --pipeline-option truncation_strategy=delete` on a 3,000-token row.

    **Fix**: raise the trainer's length limit or shrink the row's images or text.
    """

    code = "VLM603"
    name = "trainer-drops-row"
    severity = Severity.WARNING
    status = "dropped"


class TrainerRaises(_ReportsFate, Rule):
    """The trainer raises an error on this row: the run stops.

    **Why**: some trainers refuse an over-long row instead of cutting it (ms-swift's
    truncation_strategy raise gives MaxLengthError), ending the run at that row.

    **Example**: `--pipeline swift --pipeline-option max_length=2048` (strategy raise) on a
    3,000-token row.

    **Fix**: raise max_length, choose another truncation strategy, or shrink the row.
    """

    code = "VLM604"
    name = "trainer-raises"
    severity = Severity.ERROR
    status = "raise"
