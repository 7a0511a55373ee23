"""`--pipeline trl`: TRL's SFTTrainer on a vision dataset (its max_length truncation).

Reproduces TRL 1.16.0 (`pip install trl==1.16.0`), trl/trainer/sft_trainer.py:

- `SFTConfig.max_length` defaults to 1024 (trl/trainer/sft_config.py); None turns truncation off.
- A dataset whose first row has an `image` or `images` column is a vision dataset: the dataset is not
  tokenized up front (`_skip_prepare_dataset`); `DataCollatorForVisionLanguageModeling` renders each
  batch with `processor.apply_chat_template(..., tokenize=True, add_special_tokens=False,
  truncation=True, max_length=max_length)`, so the tokenizer keeps the first max_length ids
  (`truncation_mode` keep_start; `keep_end` is refused for vision datasets with a ValueError when the
  trainer is built, so this preset refuses it too).
- That processor call checks the image tokens after tokenizing (transformers'
  `ProcessorMixin._check_special_mm_tokens`): a cut that removes any image token raises
  `ValueError: Mismatch in image token count between text and input_ids ... Likely due to
  truncation='max_length'` in the collator and the run stops at that batch (with an older processor
  without the check, the model raises "Image features and image tokens do not match" instead):
  the crash outcome.
- Labels are every token (`assistant_only_loss` False, the default) or the assistant turns' tokens
  (`assistant_only_loss` True: the chat template's `{% generation %}` blocks, TRL's training template
  for the model): answer tokens lost are the assistant turns' tokens past the cut either way.
- Packing and padding_free are refused for vision datasets, so a row is never dropped or packed.

tests/test_pipeline_trl.py compares these predictions with TRL's own collator on the fixture rows
(recorded by tests/trainers/record_trl.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from vlmlint.pipelines.base import Pipeline, PipelineError
from vlmlint.pipelines.layout import row_layout
from vlmlint.records import TrainerFate

if TYPE_CHECKING:
    from vlmlint.counting import CountedRow, TextEncoder
    from vlmlint.records import RowResult

TRL_VERSION = "TRL 1.16.0"
DEFAULT_MAX_LENGTH = 1024  # SFTConfig.max_length


class TrlPipeline(Pipeline):
    """TRL's SFTTrainer with a processor (vision dataset): max_length, truncation_mode, assistant_only_loss."""

    name: ClassVar[str] = "trl"
    trainer: ClassVar[str] = TRL_VERSION
    option_names: ClassVar[tuple[str, ...]] = ("max_length", "truncation_mode", "assistant_only_loss")

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        value = self.options.get("max_length", DEFAULT_MAX_LENGTH)
        if value is None or (isinstance(value, str) and value.lower() == "none"):
            self.max_length: int | None = None
        elif isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise PipelineError(
                f"--pipeline trl: max_length must be a positive integer or none, got {value!r}"
            )
        else:
            self.max_length = value
        mode = str(self.options.get("truncation_mode", "keep_start")).lower()
        if mode == "keep_end":
            raise PipelineError(
                "--pipeline trl: truncation_mode keep_end is refused by TRL 1.16.0 for vision datasets "
                "(SFTTrainer raises ValueError: image tokens sit in the prompt and would be cut); use keep_start"
            )
        if mode != "keep_start":
            raise PipelineError(f"--pipeline trl: truncation_mode must be keep_start, got {mode!r}")
        assistant_only = self.options.get("assistant_only_loss", False)
        if not isinstance(assistant_only, bool):
            raise PipelineError(
                f"--pipeline trl: assistant_only_loss must be true or false, got {assistant_only!r}"
            )
        self.assistant_only_loss = assistant_only

    def fate(self, result: RowResult, row: CountedRow, encoder: TextEncoder) -> TrainerFate | None:
        limit = self.max_length
        label = f"{TRL_VERSION} (max_length {limit})"
        assert result.seq_len is not None  # the engine asks only for counted rows
        if limit is None or result.seq_len <= limit:  # under the limit: kept, no extra work
            return TrainerFate("kept", label, length=result.seq_len - sum(encoder.added_special_tokens()))
        layout = row_layout(encoder, row, result.seq_len)
        length = layout.length
        if length <= limit:
            return TrainerFate("kept", label, length=length)
        image_lost = layout.image_tokens_past(limit)
        closing = _closing_tokens(encoder, row)
        if image_lost or any(end + closing > limit for _, end, _ in layout.images):
            total = layout.image_tokens
            if not image_lost:  # only the marker that closes an image is cut (Idefics3)
                return TrainerFate(
                    "crash",
                    label,
                    length=limit,
                    reason=(
                        f"the row's {length} tokens are cut to max_length {limit} just after an image's "
                        "tokens, before the marker that closes it: the Idefics3 processor cannot find the "
                        "image's end and raises TypeError"
                    ),
                    fix=f"raise max_length to {length} (or none), or shrink the row's images",
                )
            return TrainerFate(
                "crash",
                label,
                length=limit,
                image_tokens_lost=image_lost,
                reason=(
                    f"the row's {length} tokens are cut to max_length {limit}, inside its image tokens: "
                    f'{total - image_lost} of {total} stay, and the collator raises "Mismatch in `image` '
                    'token count between text and `input_ids`"'
                ),
                fix=f"raise max_length to {length} (or none), or shrink the row's images",
            )
        lost = layout.answer_lost_past(limit)
        answers = layout.answer_tokens()
        cut = f"the row's {length} tokens are cut to max_length {limit}"
        if lost:
            reason = f"{cut}: {lost} of its {answers} assistant-turn tokens are lost"
            if not self.assistant_only_loss:
                reason += " (every token is a label)"
            if lost == answers:
                reason += "; the answer is gone entirely"
            if not layout.exact:
                reason += " (answer positions approximated: the chat template renders history differently)"
        else:
            reason = f"{cut}; no assistant token is lost"
        return TrainerFate(
            "truncated",
            label,
            length=limit,
            answer_tokens_lost=lost,
            reason=reason,
            fix=f"raise max_length to {length}, or shorten the row's text or images",
        )


def _closing_tokens(encoder: TextEncoder, row: CountedRow) -> int:
    """Tokens after an image's last run that its processor needs too (the closing marker), or 0."""
    # Processors that locate each image's replacement text by its first and last character fail when
    # the cut removes the last one (Idefics3Processor.__call__: char_to_token(end - 1) is None).
    if not encoder.family.checks_image_span or not row.counts:
        return 0
    expansion = encoder.family.expand(row.counts[-1], encoder.model.settings)
    last_run = max(i for i, segment in enumerate(expansion) if not isinstance(segment, str))
    closing = "".join(segment for segment in expansion[last_run + 1 :] if isinstance(segment, str))
    if not closing:
        return 0
    return len(encoder.encode([closing])[0])
