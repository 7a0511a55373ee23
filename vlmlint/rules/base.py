"""Rule machinery: severities, findings, and the base class every rule derives from."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from hashlib import blake2b
from typing import ClassVar

from vlmlint.records import Finding, RowResult, Sample, Severity

_CODE = re.compile(r"^VLM\d{3}$")
_NAME = re.compile(r"^[a-z]+(-[a-z]+)*$")
_SECTIONS = ("**Why**", "**Example**", "**Fix**")

# Bounds on what one finding may say, so that a hostile row (a 10 MB id, a reference or a list of
# 100,000 turns) cannot make a report of gigabytes: messages and fixes are cut, values are shown in
# part and lists by their first items.
MAX_MESSAGE_CHARS = 2_000  # one finding's message, and its fix
MAX_SHOWN_CHARS = 200  # one value quoted in a message (an id, a reference)
MAX_LISTED = 20  # items a message lists ("turns 1, 2, 3 ... and 97 more")


def clamp(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`text` cut to `limit` characters, saying how many more there were."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit:,} more characters)"


def shown(value: str, limit: int = MAX_SHOWN_CHARS) -> str:
    """repr(value), of its first `limit` characters only when it is longer (then with its length)."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value):,} characters)"


def listed(items: Sequence[str], limit: int = MAX_LISTED, sep: str = ", ") -> str:
    """The items joined, the first `limit` of them and "and K more" beyond."""
    if len(items) <= limit:
        return sep.join(items)
    return f"{sep.join(items[:limit])} and {len(items) - limit:,} more"


@dataclass(frozen=True)
class RuleContext:
    """What rules may know beyond the row: limits, thresholds and the model's vocabulary."""

    max_length: int | None  # the training length limit (--max-length, else the model's context)
    image_placeholder: str  # what the model's template expands, e.g. <|image_pad|>; "" for plain encoders
    # Plain vision encoders (ViT/CLIP/SigLIP): the position table of the vision model and its input side.
    vision_max_positions: int | None = None
    vision_image_size: int | None = None
    max_position_embeddings: int | None = None  # the text model's context (config.json)
    truncation_side: str = "right"
    thresholds: Mapping[str, float] = field(default_factory=dict)
    special_tokens: frozenset[str] = frozenset()  # the tokenizer's special tokens, as text
    foreign_placeholders: frozenset[str] = frozenset()  # other families' image tokens, not special here
    family: str = ""
    # The family's image settings record (e.g. QwenSettings: factor, min_pixels, max_pixels, do_resize),
    # for fix hints that name a concrete setting; None when the model has none.
    image_settings: object | None = None
    # Pre-tokenized rows: the id of image_placeholder in the tokenizer, and (Qwen-VL) the patches merged
    # per side into one image token (features = t*h*w / merge_size^2).
    image_token_id: int | None = None
    merge_size: int | None = None
    # Why the model's videos are not counted (its family has no video formula, or the pipeline's video
    # sampling is not reproduced); None when they are.
    video_refusal: str | None = None


class Rule:
    """Base class. A rule has a stable code, a kebab-case name, a default severity and a docstring.

    The docstring's first line says what the rule finds; then **Why**, **Example** and **Fix**
    sections. The docs are generated from it, so a rule without them is refused at import.
    """

    code: ClassVar[str]
    name: ClassVar[str]
    severity: ClassVar[Severity]
    # A rule that compares rows (duplicate ids) must see every row, in dataset order: the executors
    # run it in one merge stage, never in a worker that sees only some rows. It resets per scan.
    compares_rows: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        doc = inspect.getdoc(cls) or ""
        if not _CODE.match(getattr(cls, "code", "")) or not _NAME.match(getattr(cls, "name", "")):
            raise TypeError(f"{cls.__name__}: rule code must look like VLM123 and name like kebab-case")
        missing = [s for s in _SECTIONS if s not in doc]
        if missing:
            raise TypeError(f"{cls.__name__}: docstring lacks {', '.join(missing)}")
        if cls.reset is not Rule.reset and not cls.compares_rows:
            raise TypeError(f"{cls.__name__}: a rule that keeps state between rows sets compares_rows = True")

    @classmethod
    def summary(cls) -> str:
        return (inspect.getdoc(cls) or "").splitlines()[0]

    @classmethod
    def documentation(cls) -> str:
        return inspect.getdoc(cls) or ""

    def check(self, row: RowResult, context: RuleContext) -> Iterator[Finding]:
        raise NotImplementedError

    def reset(self) -> None:
        """Forget what was seen in earlier rows (rules that compare rows, e.g. duplicate ids)."""

    def finding(self, row: RowResult, message: str, fix: str) -> Finding:
        sample = row.sample
        return Finding(
            code=self.code,
            name=self.name,
            severity=self.severity,
            message=clamp(message),
            fix=clamp(fix),
            source=sample.source,
            line=sample.line,
            index=sample.index,
            id=sample.id,
            fingerprint=finding_fingerprint(self.code, sample),
        )


def finding_fingerprint(code: str, sample: Sample) -> str:
    """blake2b of the code and the row's content hash (its position when a caller built the Sample)."""
    row = sample.fingerprint or f"{sample.source}[{sample.index}]"
    return blake2b(f"{code}:{row}".encode(), digest_size=16).hexdigest()
