"""`--pipeline swift`: ms-swift's SFT preprocessing of a row (max_length and truncation_strategy).

Reproduces ms-swift 4.6.0 (`pip install ms-swift==4.6.0`):

- swift/template/base.py, `Template._encode_truncated`: a row whose encoded length (its input_ids,
  image tokens expanded) is above `max_length` is handled by the template's `truncation_strategy`:
  `raise` raises `MaxLengthError("Current length of row(N) is larger than the max_length(L).")`;
  `left`/`right` call `Template._truncate`, which keeps every image placeholder token
  (`placeholder_tokens`: the processor's image and video token ids) and the first (`right`) or last
  (`left`) `max_length - n_image_tokens` other tokens, so no image loses tokens but the kept length can
  exceed max_length when the images alone fill it (then nothing else is kept: no labels).
- swift/arguments/base_args/template_args.py: the command line's `--truncation_strategy` defaults to
  `delete`, which becomes the template's `raise`; swift/dataset/preprocessor/core.py (pre-encoding) and
  swift/dataset/utils.py (`LazyLLMDataset`) catch the MaxLengthError and skip the row (a random other row
  is fetched in its place). With `--strict true` the error is re-raised and the run stops: that is the
  `raise` outcome here (`truncation_strategy=raise` or `strict=true`).
- `max_length` defaults to the model's maximum length (`max_model_len`, from config.json).
- swift/loss_scale/base.py: the default loss_scale trains every assistant turn; `last_round` only the
  last, `all` every token (what counts as answer tokens lost; with `all` vlmlint also counts the tokens
  swift's image tag writes around an image, e.g. Qwen's <|vision_start|> and <|vision_end|>, which
  swift leaves unlabelled: up to two answer tokens too many per image).
- swift/template/vision_utils.py, `rescale_image`: `--max_pixels` scales a larger image down to that
  pixel count, keeping its aspect ratio, before the model's processor sees it; `load_image` opens
  images without applying their EXIF orientation.

vlmlint renders rows with the model's own chat template, which stands in for ms-swift's registered
template of that model (for Qwen2-VL they agree token for token: tests/test_pipeline_swift.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from vlmlint.pipelines.base import Pipeline, PipelineError
from vlmlint.pipelines.layout import Layout, row_layout
from vlmlint.records import TrainerFate

if TYPE_CHECKING:
    from vlmlint.counting import CountedRow, TextEncoder
    from vlmlint.records import RowResult

SWIFT_VERSION = "ms-swift 4.6.0"
_STRATEGIES = ("delete", "left", "right", "raise")
_LOSS_SCALES = {"default": "all_assistant", "last_round": "last_assistant", "all": "every_token"}


# ms-swift 4.6.0's registered templates (swift/model/models/*.py register_model -> template, defined in
# swift/template/templates/*.py) for the processors where vlmlint does not know the model's own chat
# template to give the same tokens: a scan of such a model with --pipeline swift is refused by name.
NOT_REPRODUCED: dict[str, tuple[str, str]] = {
    "Gemma4Processor": ("gemma4_nothinking (E2B/E4B) or gemma4", "gemma.py"),
    "Gemma3nProcessor": ("gemma3n", "gemma.py"),
    "Glm4vProcessor": ("glm4v, glm4_5v or glm_ocr", "glm.py"),
    "Glm46VProcessor": ("glm4_5v", "glm.py"),
    "MiniCPMV4_6Processor": ("minicpmv4_6", "minicpm.py"),
    "MiniCPMV4_7Processor": ("minicpmv4_7", "minicpm.py"),
    "Kimi_K25Processor": ("kimi_k25", "moonshot.py"),
    "KimiVLProcessor": ("kimi_vl", "moonshot.py"),
    "Llama4Processor": ("llama4", "llama.py"),
    "Ernie4_5_VLMoeProcessor": ("ernie_vl", "baidu.py"),
    "Qwen2_5OmniProcessor": ("qwen2_5_omni", "qwen.py"),
    "Qwen3OmniMoeProcessor": ("qwen3_omni", "qwen.py"),
    "Molmo2Processor": ("molmo2", "molmo.py"),
    "Phi4MultimodalProcessor": ("phi4_multimodal", "microsoft.py"),
    "PaddleOCRVLProcessor": ("paddle_ocr", "baidu.py"),
    "HunYuanVLProcessor": ("hunyuan_ocr", "tencent.py"),
    "DeepseekOcr2Processor": ("deepseek_ocr2", "deepseek.py"),
    "Ovis2Processor": ("ovis2", "qwen.py"),
}


def _positive_int(name: str, value: Any, allow_none: bool = False) -> int | None:
    if allow_none and (value is None or (isinstance(value, str) and value.lower() == "none")):
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise PipelineError(f"--pipeline swift: {name} must be a positive integer, got {value!r}")
    return value


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise PipelineError(f"--pipeline swift: {name} must be true or false, got {value!r}")


class SwiftPipeline(Pipeline):
    """ms-swift's `swift sft`: its max_length, truncation_strategy, loss_scale and max_pixels."""

    name: ClassVar[str] = "swift"
    trainer: ClassVar[str] = SWIFT_VERSION
    option_names: ClassVar[tuple[str, ...]] = (
        "max_length",
        "truncation_strategy",
        "strict",
        "loss_scale",
        "max_pixels",
    )
    exif_transpose: ClassVar[bool] = False  # swift's load_image: Image.open, no EXIF orientation

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        options = self.options
        self.max_length = _positive_int("max_length", options.get("max_length"), allow_none=True)
        strategy = str(options.get("truncation_strategy", "delete")).lower()
        if strategy == "split":
            raise PipelineError(
                "--pipeline swift: truncation_strategy split is for pre-training only (ms-swift refuses it "
                "with a chat template)"
            )
        if strategy not in _STRATEGIES:
            raise PipelineError(
                f"--pipeline swift: truncation_strategy must be one of {', '.join(_STRATEGIES)}, got {strategy!r}"
            )
        self.strict = _bool("strict", options.get("strict", False))
        # delete is the template's raise with the error caught; --strict true lets it stop the run.
        self.strategy = "raise" if strategy == "delete" and self.strict else strategy
        loss_scale = str(options.get("loss_scale", "default")).lower()
        if loss_scale not in _LOSS_SCALES:
            raise PipelineError(
                f"--pipeline swift: loss_scale must be one of {', '.join(_LOSS_SCALES)}, got {loss_scale!r}"
            )
        self.rounds = _LOSS_SCALES[loss_scale]
        self.max_pixels = _positive_int("max_pixels", options.get("max_pixels"), allow_none=True)

    def bind(self, model: Any) -> None:
        found = NOT_REPRODUCED.get(model.processor_class or "")
        if found is not None:
            template, source = found
            raise PipelineError(
                f"--pipeline swift: {SWIFT_VERSION} encodes {model.family.title} rows with its own template "
                f"{template} (swift/template/templates/{source}), which vlmlint does not reproduce yet (the "
                "model's chat template is not proven to give the same tokens); scan without --pipeline for "
                "the processor's own counts"
            )

    def resize(self, height: int, width: int) -> tuple[int, int]:
        """swift's `rescale_image(img, max_pixels)`: the same aspect ratio at max_pixels, truncated."""
        if self.max_pixels is None or width * height <= self.max_pixels:
            return height, width
        ratio = width / height
        height_scaled = math.sqrt(self.max_pixels / ratio)
        return int(height_scaled), int(height_scaled * ratio)

    def _limit(self, encoder: TextEncoder) -> int | None:
        return self.max_length if self.max_length is not None else encoder.model.max_position_embeddings

    def fate(self, result: RowResult, row: CountedRow, encoder: TextEncoder) -> TrainerFate | None:
        limit = self._limit(encoder)
        label = f"{SWIFT_VERSION} (max_length {limit}, truncation_strategy {self.strategy})"
        assert result.seq_len is not None  # the engine asks only for counted rows
        if limit is None or result.seq_len <= limit:  # under the limit: kept, no extra work
            return TrainerFate("kept", label, length=result.seq_len - sum(encoder.added_special_tokens()))
        layout = row_layout(encoder, row, result.seq_len, self.rounds)
        length = layout.length
        if length <= limit:
            return TrainerFate("kept", label, length=length)
        fix = (
            f"raise max_length to {length}, shrink the row's images (--pipeline-option max_pixels=...) "
            "or shorten its text"
        )
        if self.strategy == "raise":
            return TrainerFate(
                "raise",
                label,
                length=length,
                reason=(
                    f"MaxLengthError: Current length of row({length}) is larger than the max_length({limit}); "
                    "the run stops"
                ),
                fix=fix + ", or drop --strict to let ms-swift skip the row",
            )
        if self.strategy == "delete":
            return TrainerFate(
                "dropped",
                label,
                reason=(
                    f"the row's {length} tokens are over max_length {limit}: MaxLengthError is caught and the "
                    "row deleted (never trained)"
                ),
                fix=fix,
            )
        return self._truncated(layout, limit, label)

    def _truncated(self, layout: Layout, limit: int, label: str) -> TrainerFate:
        """`Template._truncate`: every image token kept, the other tokens cut on one side."""
        side = self.strategy  # "left" or "right"
        protected = layout.image_tokens
        total_answer = layout.answer_tokens()
        if protected >= limit:  # the images alone fill max_length: nothing else is kept
            lost = total_answer
            length = protected
            where = (
                f"its {protected} image tokens alone reach max_length {limit}: only they are kept "
                f"(length {length}), every other token is cut"
            )
        else:
            cut = layout.protected_cut(limit - protected, side)
            if side == "right":
                lost = layout.answer_lost_past(cut)
            else:
                lost = layout.answer_lost_before(cut)
                # _truncate sets labels[0] = -100: the first kept token, when no image token comes before
                # the cut, is the one at the cut, and it is no label any more if it was an answer token.
                if not any(start < cut for start, _, _ in layout.images) and any(
                    start <= cut < end for start, end in layout.answers
                ):
                    lost += 1
            length = limit
            where = (
                f"{layout.length - limit} tokens are cut from the {side} to fit max_length {limit} "
                "(image tokens are kept)"
            )
        if lost:
            reason = f"{where}: {lost} of its {total_answer} answer tokens are lost"
            if not layout.exact:
                reason += " (answer positions approximated: the chat template renders history differently)"
        else:
            reason = f"{where}; no answer token is lost"
        fix = f"raise max_length to {layout.length}, or shrink the row's images or text"
        return TrainerFate("truncated", label, length=length, answer_tokens_lost=lost, reason=reason, fix=fix)
