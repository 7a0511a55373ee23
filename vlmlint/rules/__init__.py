"""The rule catalogue: one explicit, ordered registry of rule classes."""

from __future__ import annotations

from vlmlint.rules.base import Finding, Rule, RuleContext, Severity
from vlmlint.rules.images import ExtremeAspectRatio, UnreadableImage
from vlmlint.rules.internal import CountDisagreement
from vlmlint.rules.lengths import SequenceTooLong, VisionPositionOverflow
from vlmlint.rules.placeholders import PlaceholderCountMismatch
from vlmlint.rules.rows import MalformedRow, MissingImage, ProcessorRejectsRow, RemoteImage

ALL_RULES: tuple[type[Rule], ...] = (
    MalformedRow,
    MissingImage,
    RemoteImage,
    ProcessorRejectsRow,
    UnreadableImage,
    ExtremeAspectRatio,
    PlaceholderCountMismatch,
    SequenceTooLong,
    VisionPositionOverflow,
    CountDisagreement,
)

RULES_BY_CODE: dict[str, type[Rule]] = {rule.code: rule for rule in ALL_RULES}

__all__ = ["ALL_RULES", "RULES_BY_CODE", "Finding", "Rule", "RuleContext", "Severity"]
