"""`--pipeline qwen-vl-finetune`: what Qwen's official fine-tune scripts (qwen-vl-finetune) do to each row.

Reproduced from QwenLM/Qwen3-VL (the renamed QwenLM/Qwen2.5-VL) at commit
96588727e44c78b25ba03ea03b8e12f7e64fd0da (2026-01-30): qwen-vl-finetune/qwenvl/data/data_processor.py (the
successor of data_qwen.py's preprocess_qwen_2_visual), qwenvl/train/train_qwen.py, qwenvl/train/argument.py,
with scripts/sft.sh's options as defaults (--max_pixels 50176 --min_pixels 784 --model_max_length 8192
--data_flatten True):

- images, `update_processor_pixels`: where the image processor has `min_pixels` and `max_pixels`
  attributes it sets them, and where its `size` is a dict it sets `size['shortest_edge'] = min_pixels`
  and `size['longest_edge'] = max_pixels`. On the transformers the README pins (4.57) the processor is
  Qwen2VLImageProcessorFast with a dict `size`: every image is smart_resize'd within [min_pixels,
  max_pixels] (50176 = 64 tokens at most). On transformers 5 (5.24 measured) `size` is a SizeDict, not a
  dict, and the class has no `min_pixels` attribute: the function changes nothing and images keep the
  checkpoint's own min/max pixels (option `transformers=5`). Images are opened by the processor's
  apply_chat_template (transformers' load_image: EXIF orientation applied);
- text, `_build_messages` + `preprocess_qwen_visual`: a turn whose `from` is "human" is a user turn,
  every other one (gpt, and also system) an assistant turn; a user turn is split at `<image>` / `<video>`,
  each text segment `.strip()`ped and dropped when empty; an assistant turn is kept as one text. The
  conversation goes through the processor's apply_chat_template (the checkpoint's chat template: Qwen2-VL
  and Qwen2.5-VL write their default system prompt, since the row can have no system turn);
- labels: after each token 77091 (`assistant`, hard-coded) the tokens from 2 positions on up to the next
  151645 (`<|im_end|>`) and one more (the `\\n`) are labels; a tokenizer with other ids labels nothing;
- a row the script refuses: an `<image>` in a non-human turn (its image is left unused: ValueError),
  images under another key than `image` (`<image>` finds no image), a row without `conversations`
  (KeyError). `__getitem__` retries it 3 times, then returns the NEXT row in its place (3 tries): the row
  never trains (dropped); a last row, or one followed by another such row, raises and stops the run;
- length: `train_qwen.py` gives `--model_max_length` to a tokenizer the Trainer keeps (processing_class),
  not to the data: `make_supervised_data_module` builds the collators with `processor.tokenizer`, loaded
  by AutoProcessor without it. With `data_flatten` (sft.sh's) or `data_packing`,
  FlattenedDataCollatorForSupervisedDataset concatenates the rows and cuts nothing: every row is kept
  whole, however long. Without them, DataCollatorForSupervisedDataset cuts input_ids, labels and
  position_ids to `processor.tokenizer.model_max_length` (the checkpoint's tokenizer_config.json:
  32768 for Qwen2-VL, 131072 for Qwen2.5-VL) after the processor has made every image's pixel values: a
  cut through an image's tokens leaves fewer tokens than features and the model raises "Image features
  and image tokens do not match" (crash); a cut elsewhere loses the labels past it (truncated);
- videos: the processor's own video path with the script's fps / frames / pixels; not reproduced, so
  video rows are not counted (VLM109 says why).

tests/test_pipeline_qwen_vl_finetune.py compares these predictions with the script's own code, run on
transformers 4.57.1 and 5.24.0 by tests/trainers/record_qwen_vl_finetune.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from vlmlint.pipelines.base import Pipeline, PipelineError
from vlmlint.records import Message, Part, Role, TrainerFate, evolve

if TYPE_CHECKING:
    from vlmlint.counting import CountedRow, TextEncoder
    from vlmlint.models import Model
    from vlmlint.models.base import Family, ImageCount
    from vlmlint.records import RowResult, Sample

COMMIT = "96588727e44c78b25ba03ea03b8e12f7e64fd0da"
TRAINER = "Qwen qwen-vl-finetune (9658872)"
SCRIPT = "qwen_vl_finetune"  # what a family declares (Family.trainer_templates) when the script trains it
ASSISTANT_ID, IM_END_ID = 77091, 151645  # preprocess_qwen_visual's hard-coded ids
DEFAULTS: dict[str, Any] = {  # scripts/sft.sh (argument.py's defaults in the comments)
    "max_pixels": 50176,  # 28 * 28 * 576
    "min_pixels": 784,  # 28 * 28 * 16
    "model_max_length": 8192,  # 512; given to a tokenizer the data never sees
    "data_flatten": True,  # False
    "data_packing": False,
    "transformers": "4.57",  # the README's requirement; 5: update_processor_pixels changes nothing
}


def _whole(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PipelineError(
            f"--pipeline qwen-vl-finetune: {name} must be a positive whole number, got {value!r}"
        )
    return value


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise PipelineError(f"--pipeline qwen-vl-finetune: {name} must be true or false, got {value!r}")
    return value


class QwenVLFinetunePipeline(Pipeline):
    """Qwen's qwen-vl-finetune (train_qwen.py, data_processor.py)."""

    name: ClassVar[str] = "qwen-vl-finetune"
    trainer: ClassVar[str] = TRAINER
    option_names: ClassVar[tuple[str, ...]] = tuple(DEFAULTS)

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        o = {**DEFAULTS, **self.options}
        self.max_pixels = _whole("max_pixels", o["max_pixels"])
        self.min_pixels = _whole("min_pixels", o["min_pixels"])
        self.model_max_length = _whole("model_max_length", o["model_max_length"])
        self.data_flatten = _flag("data_flatten", o["data_flatten"])
        self.data_packing = _flag("data_packing", o["data_packing"])
        version = str(o["transformers"]).strip()
        if version.split(".")[0] not in ("4", "5"):
            raise PipelineError(
                f"--pipeline qwen-vl-finetune: transformers must be 4 (4.57, the README's) or 5, got {version!r}"
            )
        self.transformers = version
        self.pixels_applied = version.split(".")[0] == "4"
        self._settings: Any = None
        self._image_processor: Any = None
        self._tokenizer: Any = None
        self._image_id: int | None = None
        self._limit: int | None = None

    def bind(self, model: Model) -> None:
        if SCRIPT not in model.family.trainer_templates.get(self.name, ()):
            raise PipelineError(
                f"--pipeline qwen-vl-finetune: Qwen's fine-tune scripts train Qwen2-VL, Qwen2.5-VL and Qwen3-VL; "
                f"{model.name} is {model.family.title}"
            )
        if model.tokenizer is None:
            raise PipelineError(f"--pipeline qwen-vl-finetune: {model.name} has no tokenizer")
        self._tokenizer = model.tokenizer
        self._image_id = model.tokenizer.convert_tokens_to_ids(model.family.placeholder)
        limit = getattr(model.tokenizer, "model_max_length", None)
        self._limit = limit if isinstance(limit, int) and limit < 10**12 else None  # unset: no cut
        self._settings, self._image_processor = model.settings, model.image_processor
        if not self.pixels_applied:
            return
        if self.max_pixels < self.min_pixels:
            raise PipelineError(
                f"--pipeline qwen-vl-finetune: max_pixels {self.max_pixels} is below min_pixels {self.min_pixels}"
            )
        # update_processor_pixels on transformers 4.57: size = {shortest_edge: min_pixels, longest_edge: max_pixels}
        self._settings = dataclasses.replace(
            model.settings, min_pixels=self.min_pixels, max_pixels=self.max_pixels
        )
        ip = model.image_processor
        if not isinstance(ip, dict) and hasattr(ip, "to_dict"):
            size = {"shortest_edge": self.min_pixels, "longest_edge": self.max_pixels}
            self._image_processor = type(ip).from_dict({**ip.to_dict(), "size": size})

    def describe(self) -> dict[str, Any]:
        described = super().describe()
        described["trainer"] = self._label()
        return described

    def _label(self) -> str:
        if self.data_flatten or self.data_packing:
            cut = "data_flatten: no cut" if self.data_flatten else "data_packing: no cut"
        else:
            cut = f"cut at the tokenizer's model_max_length {self._limit}"
        pixels = (
            f"pixels {self.min_pixels}-{self.max_pixels}"
            if self.pixels_applied
            else "the checkpoint's pixels (transformers 5)"
        )
        return f"{TRAINER} ({pixels}, {cut})"

    # -- the row as the script reads it ------------------------------------------------------------

    def prepare(self, sample: Sample) -> Sample:
        """_build_messages: human turns split at the placeholders with each text stripped, every other
        turn an assistant turn (a system turn too)."""
        messages = []
        for message in sample.messages:
            if message.role is Role.USER:
                parts = tuple(
                    part if part.is_image or part.media else Part(text=part.text.strip())
                    for part in message.parts
                    if part.is_image or part.media or part.text.strip()
                )
                messages.append(Message(Role.USER, parts))
            else:
                messages.append(Message(Role.ASSISTANT, message.parts))
        return evolve(sample, messages=tuple(messages))

    # -- images ------------------------------------------------------------------------------------

    def image_size_option(self) -> tuple[str, int, int] | None:
        """The script's --max_pixels where it reaches the processor (transformers 4); on 5 it does not, and
        the processor's own max_pixels is the knob."""
        return ("max_pixels", self.max_pixels, max(self.min_pixels, 1)) if self.pixels_applied else None

    def count_image(
        self, family: Family, height: int, width: int, settings: Any, images_in_row: int
    ) -> ImageCount:
        return family.count(height, width, self._settings or settings, images_in_row=images_in_row)

    def count_exact(
        self, family: Family, image_processor: Any, images: list[Any], settings: Any
    ) -> list[ImageCount]:
        return family.count_exact(
            self._image_processor or image_processor, images, self._settings or settings
        )

    # -- the row's fate ----------------------------------------------------------------------------

    def fate(self, result: RowResult, row: CountedRow, encoder: TextEncoder) -> TrainerFate | None:
        if self._tokenizer is None:
            self.bind(encoder.model)
        sample = row.sample
        if sample.media:  # video rows: the processor's video sampling is not reproduced (VLM109)
            return None
        refused = self._refused(sample)
        if refused:
            return TrainerFate("dropped", self._label(), reason=refused[0], fix=refused[1])
        assert result.seq_len is not None
        length = result.seq_len
        flat = self.data_flatten or self.data_packing
        if flat or self._limit is None or length <= self._limit:
            reason = f"{length} tokens"
            if flat:
                reason += f", never cut ({'data_flatten' if self.data_flatten else 'data_packing'})"
                if length > self.model_max_length:
                    reason += (
                        f"; above --model_max_length {self.model_max_length}, which train_qwen.py gives the "
                        "Trainer's tokenizer only: the script trains the row whole"
                    )
            return TrainerFate("kept", self._label(), length=length, reason=reason)
        ids = self._ids(row, encoder)
        if ids is None:  # a literal image token in the text: the family's VLM304 says so
            return None
        limit = self._limit
        labels = _labels(ids)
        image_lost = sum(1 for token in ids[limit:] if token == self._image_id)
        if image_lost:
            total = sum(count.tokens for count in row.counts)
            return TrainerFate(
                "crash",
                self._label(),
                length=limit,
                image_tokens_lost=image_lost,
                reason=(
                    f"DataCollatorForSupervisedDataset cuts the row's {len(ids)} tokens to the tokenizer's "
                    f"model_max_length {limit}, inside its image tokens ({total - image_lost} of {total} stay) "
                    'after the pixel values are made: the model raises "Image features and image tokens do not match"'
                ),
                fix=f"train with data_flatten (sft.sh's), raise the tokenizer's model_max_length to {len(ids)}, "
                "or lower max_pixels",
            )
        lost = sum(1 for position in labels if position >= limit)
        return TrainerFate(
            "truncated",
            self._label(),
            length=limit,
            answer_tokens_lost=lost,
            reason=(
                f"DataCollatorForSupervisedDataset cuts the row's {len(ids)} tokens to the tokenizer's "
                f"model_max_length {limit}: {lost} of its {len(labels)} label token(s) lost"
            ),
            fix=f"train with data_flatten, raise the tokenizer's model_max_length to {len(ids)}, or shorten the row",
        )

    def _refused(self, sample: Sample) -> tuple[str, str] | None:
        """Why _build_messages raises for this row (reason, fix), or None."""
        fields = set(sample.fields)
        if fields and "conversations" not in fields:
            return (
                "the row has no 'conversations': _build_messages raises KeyError and __getitem__ trains the next "
                "row in its place (the last row stops the run)",
                'write the row as {"image": ..., "conversations": [{"from": "human", "value": ...}, ...]}',
            )
        if sample.images and fields and "image" not in fields:
            return (
                "the row's images are not under 'image' (the only key the script reads): its <image> placeholders "
                "find no image, _build_messages raises ValueError and the next row trains in its place",
                "put the image paths under 'image'",
            )
        stray = sum(part.is_image for m in sample.messages if m.role is not Role.USER for part in m.parts)
        if stray:
            return (
                f"{stray} <image> placeholder(s) outside the human turns: the script splits human turns only, the "
                "image(s) stay unused, _build_messages raises ValueError and the next row trains in its place",
                "move the <image> placeholder into a human turn",
            )
        return None

    def _ids(self, row: CountedRow, encoder: TextEncoder) -> list[int] | None:
        """The row's input_ids as the processor gives them (each image's run written out)."""
        text, _ = encoder.compose(encoder.render(row.sample.messages), row.counts)
        compact = encoder.encode([text])[0]
        if sum(1 for token in compact if token == self._image_id) != len(row.counts):
            return None
        runs = iter(count.tokens for count in row.counts)
        ids: list[int] = []
        for token in compact:
            if token == self._image_id:
                ids.extend([token] * next(runs))
            else:
                ids.append(token)
        return ids


def _labels(ids: list[int]) -> list[int]:
    """preprocess_qwen_visual's label positions, loop for loop."""
    labelled: list[int] = []
    length, pos = len(ids), 0
    while pos < length:
        if ids[pos] == ASSISTANT_ID:
            start = end = pos + 2
            while end < length and ids[end] != IM_END_ID:
                end += 1
            if end < length:
                labelled.extend(range(start, min(end + 2, length)))
                pos = end
        pos += 1
    return labelled
