"""`--pipeline axolotl`: where axolotl's multimodal chat path puts a row's images, and what it resizes them to.

Reproduces axolotl 0.19.0 (`pip download axolotl==0.19.0 --no-deps`), the path a multimodal config takes
(`processor_type` set: `MultiModalChatDataCollator` in axolotl/utils/collators/mm_chat.py, which calls the
processing strategy on each batch and then `processor.apply_chat_template(messages, tokenize=True,
add_generation_prompt=False, ...)`):

- axolotl/processing_strategies.py, `ProcessingStrategy.__call__` (no strategy subclass overrides it):
  `conversations` rows become `messages` (human -> user, gpt -> assistant); a turn whose content is a
  plain string becomes one text part, so a `<image>` written in it is text to axolotl;
- the image column is the first of `images`, `image` the row has. Only its first value is used
  (`processed_example[image_key][0]`; a longer list logs "Using the first one"): the others never
  reach the model. A string there is indexed too, so `"images": "a.jpg"` hands `load_image` the
  string `"a"` and the collator raises (an object: `KeyError: 0`);
- placement: every turn is searched, in order, for a bare `{"type": "image"}` part (no `image`, `url`,
  `path`, `base64` key); the first bare part of the LAST turn that has one receives the image. With
  none, `{"type": "image", "image": ...}` is appended at the end of the first `user` turn's content
  (after its text), or of the first turn when no turn is a user's. Other bare parts stay in the
  messages: the chat template writes a placeholder for each, the processor gets one image and raises
  (here VLM301: more placeholders than images);
- `image_size` (`MultiModalConfig.image_size`): when set, every image is resized before the processor
  sees it: an int N pads it into an N x N square (`ImageOps.pad`), a (width, height) pair resizes it to
  that size. Unset in the YAML, axolotl takes it from the model's config: `check_model_config` in
  axolotl/loaders/utils.py sets it to `vision_config.image_size` when that attribute exists (LLaVA's
  CLIP 336, InternVL (448, 448), Idefics3, Gemma 3, PaliGemma...; Qwen-VL's vision config has none: no
  resize). `load_image` applies the EXIF orientation (transformers' loader);
- length: the collator pads and never truncates, and a multimodal dataset is not tokenized up front,
  so no row is cut or dropped for its length: the fate is `kept` at the length of
  `apply_chat_template(tokenize=True)`, which adds no special tokens when the rendered text starts with
  the BOS token (one token less than a plain processor call for Gemma 3, whose template writes `<bos>`).

What vlmlint cannot see, and so does not reproduce: vlmlint's readers turn a `<image>` written in a
string into a placeholder before any pipeline runs, so such a row is placed as if it held a bare image
part (axolotl keeps the text `<image>` and appends the image to the first user turn: the same count
for a model whose image token is not `<image>`, a mismatch for LLaVA-style tokenizers); a row whose
turns give their own images (`{"type": "image", "path": ...}`) and that also has an image column is
placed as a column row; chat templates named in the axolotl config (`chat_template: qwen2_vl`) other
than the tokenizer's own (`tokenizer_default`) are not read: the model's template renders the row.

tests/test_pipeline_axolotl.py compares the placement with `ProcessingStrategy.__call__` itself (its
source run torch-free; recorded in tests/trainers/axolotl_truth.json by tests/trainers/record_axolotl.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from vlmlint.pipelines.base import Pipeline, PipelineError
from vlmlint.records import Message, Part, Role, RowProblem, TrainerFate, evolve

if TYPE_CHECKING:
    from vlmlint.counting import CountedRow, TextEncoder
    from vlmlint.models import Model
    from vlmlint.records import RowResult, Sample

AXOLOTL_VERSION = "axolotl 0.19.0"
IMAGE_KEYS = ("images", "image")  # ProcessingStrategy.__call__'s possible_image_keys, in its order
NOTE = "axolotl"  # the code of the note prepare() leaves for fate(): images the row loses


def _image_size(value: Any) -> tuple[int, int] | None:
    """An image_size option as (width, height): N (an N x N square), "WxH", or none."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "none"):
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value, value
    if isinstance(value, str):
        match = re.fullmatch(r"\s*(\d+)\s*[x,]\s*(\d+)\s*", value)
        if match and int(match[1]) > 0 and int(match[2]) > 0:
            return int(match[1]), int(match[2])
    raise PipelineError(
        f"--pipeline axolotl: image_size must be a positive integer, WIDTHxHEIGHT, model or none, got {value!r}"
    )


def vision_image_size(config: Mapping[str, Any]) -> tuple[int, int] | None:
    """What check_model_config takes from a config.json: vision_config.image_size, as (width, height).

    The config is built by its transformers class, as AutoConfig.from_pretrained builds it, so a class
    default counts where the file is silent (CLIPVisionConfig's 224); the file alone where the class
    is unknown.
    """
    vision: Any = None
    try:
        from transformers import CONFIG_MAPPING

        built = CONFIG_MAPPING[config["model_type"]].from_dict(dict(config))
        vision = getattr(built, "vision_config", None)
        size = getattr(vision, "image_size", None) if vision is not None else None
    except Exception:  # noqa: BLE001 (an unknown model type, a config the class refuses): read the file
        vision = config.get("vision_config")
        size = vision.get("image_size") if isinstance(vision, Mapping) else None
    if size is None:
        return None
    if isinstance(size, (list, tuple)):  # PIL's resize reads the pair as (width, height)
        return int(size[0]), int(size[1])
    return int(size), int(size)  # an int: ImageOps.pad into a square


def _config_json(model: Model) -> dict[str, Any]:
    """The model's config.json (a profile's shipped one, a folder's, a hub id's), or {}."""
    from vlmlint.models import profiles
    from vlmlint.models.files import model_file, read_json_file

    if model.profile is not None:
        profile = profiles.find_profile(model.profile)
        path = str(profiles.profile_folder(profile) / "config.json") if profile else None
    else:
        path = model_file(model.name, "config.json")
    if path is None:
        return {}
    try:
        data = read_json_file(path)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class AxolotlPipeline(Pipeline):
    """axolotl's multimodal chat collator: the first image of the image column, placed by ProcessingStrategy."""

    name: ClassVar[str] = "axolotl"
    trainer: ClassVar[str] = AXOLOTL_VERSION
    option_names: ClassVar[tuple[str, ...]] = ("image_size",)

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        value = self.options.get("image_size", "model")
        self._from_model = isinstance(value, str) and value.strip().lower() == "model"
        self.image_size = None if self._from_model else _image_size(value)

    def bind(self, model: Model) -> None:
        if self._from_model:
            self.image_size = vision_image_size(_config_json(model))
            self._from_model = False

    def describe(self) -> dict[str, Any]:
        described = super().describe()
        size = self.image_size
        described["image_size"] = None if size is None else f"{size[0]}x{size[1]}"
        return described

    def resize(self, height: int, width: int) -> tuple[int, int]:
        if self.image_size is None:
            return height, width
        target_width, target_height = self.image_size
        return target_height, target_width

    def prepare(self, sample: Sample) -> Sample:
        """ProcessingStrategy.__call__'s placement of the image column's first image."""
        if not sample.images or not sample.messages:
            return sample
        if not any(key in sample.fields for key in IMAGE_KEYS):  # the turns name their own images
            return sample
        messages = list(sample.messages)
        bare = None
        first_user = None
        for k, message in enumerate(messages):
            if first_user is None and message.role is Role.USER:
                first_user = k
            if any(part.is_image for part in message.parts):
                bare = k  # the last turn with a bare part wins (the search goes on after a match)
        if bare is None:
            k = 0 if first_user is None else first_user
            messages[k] = Message(messages[k].role, (*messages[k].parts, Part(is_image=True)))
        unused = len(sample.images) - 1
        notes = sample.notes
        if unused:
            notes = (
                *notes,
                RowProblem(
                    NOTE,
                    f"axolotl uses the first of the row's {len(sample.images)} images; the other {unused} "
                    "never reach the model",
                ),
            )
        return evolve(sample, messages=tuple(messages), images=sample.images[:1], notes=notes)

    def fate(self, result: RowResult, row: CountedRow, encoder: TextEncoder) -> TrainerFate | None:
        label = AXOLOTL_VERSION + (
            "" if self.image_size is None else " (image_size {}x{})".format(*self.image_size)
        )
        notes = row.sample.notes
        lone = next((note for note in notes if note.code == "VLM106" and "images" in row.sample.fields), None)
        if lone is not None:
            kind = "a string" if "a string" in lone.message else "an object"
            return TrainerFate(
                "raise",
                label,
                reason=(
                    f'"images" is {kind}: ProcessingStrategy takes its element [0] as the image '
                    + (
                        "(the string's first character), and load_image raises"
                        if kind == "a string"
                        else "(KeyError: 0)"
                    )
                ),
                fix='wrap it in a list: "images": [...]',
            )
        reason = "; ".join(note.message for note in notes if note.code == NOTE)
        return TrainerFate("kept", label, length=self._length(result, row, encoder), reason=reason)

    @staticmethod
    def _length(result: RowResult, row: CountedRow, encoder: TextEncoder) -> int | None:
        """The collator's length: ProcessorMixin.apply_chat_template(tokenize=True) tokenizes without
        special tokens when the rendered prompt starts with the BOS token (Gemma's templates write it)."""
        if result.seq_len is None:
            return None
        lead, trail = encoder.added_special_tokens()
        bos = getattr(encoder.model.tokenizer, "bos_token", None)
        if (lead or trail) and bos and encoder.render(row.sample.messages).startswith(bos):
            return result.seq_len - lead - trail
        return result.seq_len
