"""`--pipeline internvl`: what InternVL's own chat fine-tuning script does to each row.

Reproduced from OpenGVLab/InternVL at commit 2410d1dbf208f0e799459aff9376e5747dbf41a2 (2025-09-22):
internvl_chat/internvl/train/internvl_chat_finetune.py (LazySupervisedDataset) and
internvl_chat/internvl/train/dataset.py (dynamic_preprocess, preprocess_internvl2_5), with the defaults of
the official second-stage fine-tune recipe (internvl_chat/shell/internvl3.0/2nd_finetune/
internvl3_1b_dynamic_res_2nd_finetune_full.sh: --conv_style internvl2_5 --force_image_size 448
--max_dynamic_patch 12 --down_sample_ratio 0.5 --max_seq_length 16384 --dynamic_image_size True
--use_thumbnail True):

- placement, `multi_modal_get_item`: a row whose `image` is one path and whose first turn holds no
  `<image>` gets `'<image>\\n' + value` (vlmlint cannot tell a one-element list from a string once read,
  so any one-image row is treated so); `video_get_item` does the same with `<video>`. A row whose
  `image` is a list gets nothing written (`multi_modal_multi_image_get_item`);
- tiles, `dynamic_preprocess(image, min_num=min_dynamic_patch, max_num=..., image_size=force_image_size,
  use_thumbnail)`: max_num is max_dynamic_patch for one image and `max(1, max_dynamic_patch //
  num_image)` for a row of several, so a row's images share the budget; the grid is the one whose
  aspect ratio is closest (`find_closest_aspect_ratio`, its ties as the sorted set orders them), and a
  thumbnail is added when there is more than one tile. Images are opened with `Image.open(...)
  .convert('RGB')`: no EXIF orientation. Each tile is `num_image_token = int((force_image_size //
  patch_size) ** 2 * down_sample_ratio ** 2)` `<IMG_CONTEXT>` (patch_size 14, InternViT's);
- text, `preprocess_internvl2_5`: each `<image>` of the human turns, in order, becomes `<img>` +
  `<IMG_CONTEXT>` x tokens + `</img>`; the turns are `<|im_start|>system\\n{system}<|im_end|>\\n` (the
  row's own system turn, else the internvl2_5 conversation template's system message),
  `<|im_start|>user\\n...<|im_end|>\\n` and `<|im_start|>assistant\\n...<|im_end|>\\n`, each tokenized on its
  own; the labels are the assistant turns less their `<|im_start|>assistant\\n` tokens and the last `\\n`;
- truncation: `input_ids[:tokenizer.model_max_length]` (model_max_length = max_seq_length);
- what `__getitem__` does with a row that raises: it prints the error and trains a random other row
  instead (up to 10 tries). So a cut that removes an image's `</img>` (the `image tokens are truncated`
  assertion), an image placeholder outside the human turns (the `current_image_idx == num_image`
  assertion) or a turn neither human nor gpt (NotImplementedError) drops the row: it never trains;
- videos: `video_get_item` reads frames only through the Ceph `TCSLoader` (a random 8 to 32 frames
  per read); vlmlint does not reproduce it, so video rows are not counted (VLM109 says why).

tests/test_pipeline_internvl.py runs the script's own functions (from the source above where it is on
this machine) and the real tokenizer against these predictions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from vlmlint.models.base import CountError, ImageCount
from vlmlint.pipelines.base import Pipeline, PipelineError
from vlmlint.records import Message, Part, Role, TrainerFate, evolve

if TYPE_CHECKING:
    from vlmlint.counting import CountedRow, TextEncoder
    from vlmlint.models import Model
    from vlmlint.models.base import Family
    from vlmlint.records import RowResult, Sample

COMMIT = "2410d1dbf208f0e799459aff9376e5747dbf41a2"
TRAINER = "InternVL internvl_chat_finetune.py (2410d1d)"
# internvl_chat/internvl/conversation.py, the 'internvl2_5' template's system_message
SYSTEM_MESSAGE = "你是书生·万象，英文名是InternVL，是由上海人工智能实验室、清华大学及多家合作单位联合开发的多模态大语言模型。"
IMG_START, IMG_END, IMG_CONTEXT = "<img>", "</img>", "<IMG_CONTEXT>"
PATCH_SIZE = 14  # InternViT-300M / 6B: vision_config.patch_size of every InternVL 2.5 / 3 / 3.5 checkpoint
# The official 2nd-finetune recipe's values (the script's own dataclass defaults in the comments).
DEFAULTS: dict[str, Any] = {
    "max_seq_length": 16384,  # DataTrainingArguments default 8192
    "force_image_size": 448,
    "down_sample_ratio": 0.5,
    "max_dynamic_patch": 12,
    "min_dynamic_patch": 1,
    "dynamic_image_size": True,  # default False
    "use_thumbnail": True,  # default False
}
# What a family declares (Family.trainer_templates) when its tokens are InternVL's <img> <IMG_CONTEXT>
# </img> as the fine-tune script writes them (the -hf and chat checkpoints).
SCRIPT = "internvl_chat_finetune"


def target_ratios(min_num: int, max_num: int) -> list[tuple[int, int]]:
    """dynamic_preprocess's candidate grids (columns, rows), in its order: sorted(set(...)) by area."""
    ratios = {
        (i, j)
        for n in range(min_num, max_num + 1)
        for i in range(1, n + 1)
        for j in range(1, n + 1)
        if min_num <= i * j <= max_num
    }
    return sorted(ratios, key=lambda x: x[0] * x[1])


def closest_aspect_ratio(
    aspect_ratio: float, ratios: list[tuple[int, int]], width: int, height: int, image_size: int
) -> tuple[int, int]:
    """find_closest_aspect_ratio, comparison for comparison (a tie goes to the later grid while the image's
    area is above half the grid's)."""
    best_diff = float("inf")
    best = (1, 1)
    area = width * height
    for ratio in ratios:
        diff = abs(aspect_ratio - ratio[0] / ratio[1])
        if diff < best_diff:
            best_diff = diff
            best = ratio
        elif diff == best_diff and area > 0.5 * image_size * image_size * ratio[0] * ratio[1]:
            best = ratio
    return best


def tiles(
    width: int, height: int, min_num: int, max_num: int, image_size: int, use_thumbnail: bool
) -> tuple[tuple[int, int], int]:
    """(columns, rows) and the number of images dynamic_preprocess returns (tiles, + 1 thumbnail)."""
    columns, rows = closest_aspect_ratio(
        width / height, target_ratios(min_num, max_num), width, height, image_size
    )
    blocks = columns * rows
    return (columns, rows), blocks + (1 if use_thumbnail and blocks != 1 else 0)


def _whole(name: str, value: Any, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise PipelineError(
            f"--pipeline internvl: {name} must be a whole number of at least {low}, got {value!r}"
        )
    return value


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise PipelineError(f"--pipeline internvl: {name} must be true or false, got {value!r}")
    return value


class InternVLPipeline(Pipeline):
    """InternVL's chat fine-tuning (internvl_chat_finetune.py, conv_style internvl2_5)."""

    name: ClassVar[str] = "internvl"
    trainer: ClassVar[str] = TRAINER
    option_names: ClassVar[tuple[str, ...]] = tuple(DEFAULTS)
    exif_transpose: ClassVar[bool] = False  # Image.open(path).convert('RGB')

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        o = {**DEFAULTS, **self.options}
        self.max_seq_length = _whole("max_seq_length", o["max_seq_length"])
        self.image_size = _whole("force_image_size", o["force_image_size"], PATCH_SIZE)
        ratio = o["down_sample_ratio"]
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 1:
            raise PipelineError(
                f"--pipeline internvl: down_sample_ratio must be above 0 and at most 1, got {ratio!r}"
            )
        self.down_sample_ratio = float(ratio)
        self.max_dynamic_patch = _whole("max_dynamic_patch", o["max_dynamic_patch"])
        self.min_dynamic_patch = _whole("min_dynamic_patch", o["min_dynamic_patch"])
        self.dynamic_image_size = _flag("dynamic_image_size", o["dynamic_image_size"])
        self.use_thumbnail = _flag("use_thumbnail", o["use_thumbnail"])
        # model.num_image_token in internvl_chat_finetune.py main()
        self.num_image_token = int((self.image_size // PATCH_SIZE) ** 2 * (self.down_sample_ratio**2))
        if self.num_image_token < 1:
            raise PipelineError(
                f"--pipeline internvl: force_image_size {self.image_size} with down_sample_ratio "
                f"{self.down_sample_ratio:g} gives tiles of no token"
            )
        self._tokenizer: Any = None
        self._context_id: int | None = None
        self._end_id: int | None = None
        self._ignore_len = 0

    def bind(self, model: Model) -> None:
        if SCRIPT not in model.family.trainer_templates.get(self.name, ()):
            raise PipelineError(
                f"--pipeline internvl: InternVL's fine-tuning script trains InternVL checkpoints; "
                f"{model.name} is {model.family.title} (use --model internvl3.5 or internvl3.5-chat)"
            )
        tokenizer = model.tokenizer
        if tokenizer is None:
            raise PipelineError(f"--pipeline internvl: {model.name} has no tokenizer")
        ids = [tokenizer.convert_tokens_to_ids(token) for token in (IMG_CONTEXT, IMG_END)]
        if any(found is None or found == tokenizer.unk_token_id for found in ids):
            raise PipelineError(
                f"--pipeline internvl: the tokenizer of {model.name} has no {IMG_CONTEXT} or {IMG_END}"
            )
        self._tokenizer = tokenizer
        self._context_id, self._end_id = ids
        # ignore_len: the labels of an assistant turn start after these tokens (no BOS for Qwen's tokenizer)
        self._ignore_len = len(tokenizer("<|im_start|>assistant\n")["input_ids"])

    def describe(self) -> dict[str, Any]:
        described = super().describe()
        described["trainer"] = self._label()
        return described

    def _label(self) -> str:
        return f"{TRAINER} (max_seq_length {self.max_seq_length}, max_dynamic_patch {self.max_dynamic_patch})"

    # -- the row as the script reads it ------------------------------------------------------------

    def prepare(self, sample: Sample) -> Sample:
        """multi_modal_get_item / video_get_item: `<image>\\n` (`<video>\\n`) before the first turn's text
        when it has none."""
        if not sample.messages:
            return sample
        first = sample.messages[0]
        if len(sample.images) == 1:
            if any(part.is_image for part in first.parts):
                return sample
            added = Part(is_image=True)
        elif not sample.images and sum(ref.kind == "video" for ref in sample.media) == 1:
            if any(part.media == "video" for part in first.parts):
                return sample
            added = Part(media="video")
        else:
            return sample
        if first.role is Role.SYSTEM:  # the script writes into conversations[0] whatever it is: the
            # system prompt then starts with the literal text (preprocess_internvl2_5 keeps it as text)
            parts = _prepend_text("<image>\n" if added.is_image else "<video>\n", first.parts)
            return evolve(sample, messages=(Message(first.role, parts), *sample.messages[1:]))
        parts = (added, *_prepend_text("\n", first.parts))
        return evolve(sample, messages=(Message(first.role, parts), *sample.messages[1:]))

    # -- images ------------------------------------------------------------------------------------

    def max_num(self, images_in_row: int) -> int:
        """dynamic_preprocess's max_num: the whole budget for one image, a share of it for several."""
        if images_in_row <= 1:
            return self.max_dynamic_patch
        return max(1, self.max_dynamic_patch // images_in_row)

    def count_image(
        self, family: Family, height: int, width: int, settings: Any, images_in_row: int
    ) -> ImageCount:
        if height < 1 or width < 1:
            raise CountError(f"{width}x{height}: an image needs at least one pixel per side")
        if not self.dynamic_image_size:  # one image, resized to force_image_size by the transform
            return ImageCount(self.image_size, self.image_size, (1, 1), self.num_image_token)
        (columns, rows), count = tiles(
            width,
            height,
            self.min_dynamic_patch,
            self.max_num(images_in_row),
            self.image_size,
            self.use_thumbnail,
        )
        if count == 0:  # min_dynamic_patch above max_num: no grid, dynamic_preprocess's assertion
            raise CountError(
                f"min_dynamic_patch {self.min_dynamic_patch} is above this row's tile budget "
                f"{self.max_num(images_in_row)}: no grid fits"
            )
        return ImageCount(
            self.image_size * rows, self.image_size * columns, (rows, columns), self.num_image_token * count
        )

    def count_exact(
        self, family: Family, image_processor: Any, images: list[Any], settings: Any
    ) -> list[ImageCount]:
        """dynamic_preprocess reads only the decoded image's size."""
        return [
            self.count_image(family, image.height, image.width, settings, len(images)) for image in images
        ]

    # -- the row's fate ----------------------------------------------------------------------------

    def fate(self, result: RowResult, row: CountedRow, encoder: TextEncoder) -> TrainerFate | None:
        if self._tokenizer is None:
            self.bind(encoder.model)
        if row.sample.media:  # video rows: the script's TCSLoader sampling is not reproduced (VLM109)
            return None
        messages = row.sample.messages
        system = SYSTEM_MESSAGE
        if messages and messages[0].role is Role.SYSTEM:
            if any(part.is_image for part in messages[0].parts):
                return self._dropped(
                    "an <image> in the system turn: preprocess_internvl2_5 replaces the placeholders of the "
                    "human turns only, and its assertion (images placed != images) fails",
                    "move the <image> placeholder into the first human turn",
                )
            system, messages = _text(messages[0]), messages[1:]
        batches: list[tuple[str, str]] = [("system", f"<|im_start|>system\n{system}<|im_end|>\n")]
        images = iter(row.counts)
        owners: list[list[int]] = [[]]
        for message in messages:
            if message.role not in (Role.USER, Role.ASSISTANT):
                return self._dropped(
                    f"a {message.role.value} turn: preprocess_internvl2_5 takes human and gpt turns only "
                    "(NotImplementedError)",
                    "map the turn to human or gpt, or drop it",
                )
            tokens: list[int] = []
            text = []
            for part in message.parts:
                if part.is_image:
                    if message.role is not Role.USER:
                        return self._dropped(
                            "an <image> in a gpt turn: preprocess_internvl2_5 replaces the placeholders of the "
                            "human turns only, and its assertion (images placed != images) fails",
                            "move the <image> placeholder into a human turn",
                        )
                    tokens.append(next(images).tokens)
                    text.append(IMG_START + IMG_CONTEXT + IMG_END)
                elif not part.media:
                    text.append(part.text)
            role = "user" if message.role is Role.USER else "assistant"
            batches.append((role, f"<|im_start|>{role}\n{''.join(text)}<|im_end|>\n"))
            owners.append(tokens)
        ids = self._tokenizer([text for _, text in batches])["input_ids"]
        position = 0
        ends: list[int] = []  # each image's </img> position
        labels: list[tuple[int, int]] = []
        for (role, _), turn, runs in zip(batches, ids, owners, strict=True):
            extra = 0
            contexts = [k for k, token in enumerate(turn) if token == self._context_id]
            if len(contexts) != len(runs):  # a literal <IMG_CONTEXT> in the text: the family's VLM304 says so
                return None
            for k, run in zip(contexts, runs, strict=True):
                ends.append(position + k + extra + run)  # </img> follows the run
                extra += run - 1
            length = len(turn) + extra
            if role == "assistant":
                labels.append((position + self._ignore_len, position + length - 1))
            position += length
        limit = self.max_seq_length
        if position <= limit:
            return TrainerFate("kept", self._label(), length=position, reason=f"{position} tokens <= {limit}")
        if any(end >= limit for end in ends):
            lost = sum(1 for end in ends if end >= limit)
            return self._dropped(
                f"the {position}-token row is cut to max_seq_length {limit}, through {lost} image(s)' tokens: "
                "the 'image tokens are truncated' assertion fails and __getitem__ trains a random other row instead",
                f"raise max_seq_length to {position}, lower max_dynamic_patch, or shorten the row",
                length=limit,
            )
        lost = sum(max(0, end - max(start, limit)) for start, end in labels)
        return TrainerFate(
            "truncated",
            self._label(),
            length=limit,
            answer_tokens_lost=lost,
            reason=f"the {position}-token row is cut to max_seq_length {limit}: {lost} answer token(s) lost",
            fix=f"raise max_seq_length to {position}, or shorten or split the conversation",
        )

    def _dropped(self, reason: str, fix: str, length: int | None = None) -> TrainerFate:
        return TrainerFate("dropped", self._label(), length=length, reason=reason, fix=fix)


def _text(message: Message) -> str:
    return "".join(part.text for part in message.parts if not part.is_image and not part.media)


def _prepend_text(text: str, parts: tuple[Part, ...]) -> tuple[Part, ...]:
    """`text` before the parts' first text (merged into it when the first part is text)."""
    if parts and not parts[0].is_image and not parts[0].media:
        return (Part(text=text + parts[0].text), *parts[1:])
    return (Part(text=text), *parts)
