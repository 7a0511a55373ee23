"""The rule catalogue: one explicit, ordered registry of rule classes."""

from __future__ import annotations

from vlmlint.records import Finding, Severity
from vlmlint.rules.base import Rule, RuleContext
from vlmlint.rules.content import NothingToTrain
from vlmlint.rules.images import (
    AnimatedImage,
    DecompressionBomb,
    ExifRotated,
    ExtremeAspectRatio,
    HeavyResize,
    TinyImage,
    UnreadableImage,
    UnusualMode,
)
from vlmlint.rules.internal import CountDisagreement
from vlmlint.rules.lengths import (
    ExceedsModelContext,
    ImageTokenBudget,
    NearLimit,
    OversizedText,
    SequenceTooLong,
    TruncationCutsImage,
    VisionPositionOverflow,
)
from vlmlint.rules.media import MediaNotCounted
from vlmlint.rules.placeholders import (
    ForeignPlaceholder,
    PlaceholderCountMismatch,
    PlaceholderInAnswer,
    PreExpandedTokens,
    SpecialTokenInText,
)
from vlmlint.rules.pretokenized import (
    GridPixelMismatch,
    ImageTokenFeatureMismatch,
    LengthMismatch,
    PositionIdsShape,
)
from vlmlint.rules.rows import (
    DuplicateId,
    ImageFieldNotList,
    ImageOutsideRoot,
    MalformedRow,
    MissingImage,
    ProcessorRejectsRow,
    RemoteImage,
    UnknownLayout,
)
from vlmlint.rules.trainer import TrainerCrash, TrainerDropsRow, TrainerRaises, TrainerTruncatesAnswer
from vlmlint.rules.video import RotatedVideo, VideoFramesCapped, VideoFramesUnknown, VideoTokenBudget

ALL_RULES: tuple[type[Rule], ...] = (
    MalformedRow,
    UnknownLayout,
    MissingImage,
    ImageOutsideRoot,
    RemoteImage,
    ImageFieldNotList,
    DuplicateId,
    ProcessorRejectsRow,
    MediaNotCounted,
    UnreadableImage,
    DecompressionBomb,
    ExtremeAspectRatio,
    TinyImage,
    ExifRotated,
    UnusualMode,
    AnimatedImage,
    HeavyResize,
    VideoFramesUnknown,
    RotatedVideo,
    VideoFramesCapped,
    PlaceholderCountMismatch,
    PreExpandedTokens,
    PlaceholderInAnswer,
    SpecialTokenInText,
    ForeignPlaceholder,
    SequenceTooLong,
    TruncationCutsImage,
    VisionPositionOverflow,
    ExceedsModelContext,
    NearLimit,
    ImageTokenBudget,
    NothingToTrain,
    OversizedText,
    VideoTokenBudget,
    ImageTokenFeatureMismatch,
    PositionIdsShape,
    LengthMismatch,
    GridPixelMismatch,
    TrainerCrash,
    TrainerTruncatesAnswer,
    TrainerDropsRow,
    TrainerRaises,
    CountDisagreement,
)

RULES_BY_CODE: dict[str, type[Rule]] = {rule.code: rule for rule in ALL_RULES}

__all__ = ["ALL_RULES", "RULES_BY_CODE", "Finding", "Rule", "RuleContext", "Severity"]
