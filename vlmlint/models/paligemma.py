"""PaliGemma (1 and 2): every image is resized to one square and becomes image_seq_length <image> tokens.

Processor (transformers 5.24 `PaliGemmaProcessor`): image_seq_length is the image processor's
(preprocessor_config.json: 256 / 1024 / 4096 for 224 / 448 / 896), whatever the image's size. Unlike
other processors it also rewrites the prompt before expanding it (`prepare_inputs_layout`):
- text with `<image>` in it: `<bos>` is inserted right after the LAST `<image>` and "\\n" appended;
- text without `<image>`: one `<image>` per image, then `<bos>`, the text and "\\n" (the BC branch);
- then each `<image>` becomes `<image>` x image_seq_length.
It sets the tokenizer's add_bos_token (and add_eos_token) off, so the tokenizer adds nothing: the
text is tokenized as written, without special tokens (`add_special_tokens=False` here, since vlmlint
loads the tokenizer with its own add_bos_token on). The processor refuses a call without images.
`suffix=` (training targets) is tokenized as a text pair followed by <eos>; vlmlint counts the whole
conversation as one text instead (see docs/models/paligemma.md).

PaliGemma checkpoints ship no chat template: rows are rendered raw, turns joined by "\\n" and each
image written as `<image>` where the row has it, i.e. the prompt a user passes to the processor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vlmlint.models.base import FIXED_SIZE, CountError, Expansion, Family, ImageCount, Run, Segment, no_knob

PLACEHOLDER = "<image>"
BOS = "<bos>"
DEFAULT_PATCH_SIZE = 14  # SigLIP so400m/14, the vision tower of every PaliGemma checkpoint


@dataclass(frozen=True)
class PaliGemmaSettings:
    height: int  # size the image processor resizes every image to
    width: int
    image_seq_length: int  # <image> tokens per image (image processor attribute, read by the processor)
    do_resize: bool = True
    patch_size: int = DEFAULT_PATCH_SIZE  # vision_config.patch_size: only for the reported patch grid
    bos_token: str = BOS


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> PaliGemmaSettings:
    seq = getattr(image_processor, "image_seq_length", None)
    if not seq:
        # PaliGemmaProcessor.__init__ raises the same way
        raise CountError("Image processor is missing an `image_seq_length` attribute.")
    size = image_processor.size
    height, width = getattr(size, "height", None), getattr(size, "width", None)
    if not height or not width:
        raise CountError(f"PaliGemma's image processor needs size.height and size.width, got {size}")
    vision = model_config.get("vision_config") or {}
    tokenizer_kwargs = processor_config.get("tokenizer_init_kwargs") or {}
    # PaliGemmaProcessor writes tokenizer.bos_token (init kwargs may not name it in transformers 5)
    bos = processor_config.get("tokenizer_bos_token") or tokenizer_kwargs.get("bos_token")
    return PaliGemmaSettings(
        height=int(height),
        width=int(width),
        image_seq_length=int(seq),
        do_resize=bool(getattr(image_processor, "do_resize", True)),
        patch_size=int(vision.get("patch_size") or DEFAULT_PATCH_SIZE),
        bos_token=bos if isinstance(bos, str) and bos else BOS,
    )


def count(height: int, width: int, settings: PaliGemmaSettings, images_in_row: int = 1) -> ImageCount:
    if height < 1 or width < 1:
        raise CountError(f"image of {width}x{height} pixels")
    resized = (settings.height, settings.width) if settings.do_resize else (height, width)
    grid = (resized[0] // settings.patch_size, resized[1] // settings.patch_size)
    return ImageCount(resized[0], resized[1], grid, settings.image_seq_length)


def count_exact(image_processor: Any, images: list[Any], settings: PaliGemmaSettings) -> list[ImageCount]:
    """Run the real image processor; the token count never depends on the pixels."""
    try:
        output = image_processor(images=images)
    except ValueError as exc:
        raise CountError(str(exc)) from None
    counts = []
    for pixels in output["pixel_values"]:
        _, height, width = pixels.shape  # channels first
        grid = (int(height) // settings.patch_size, int(width) // settings.patch_size)
        counts.append(ImageCount(int(height), int(width), grid, settings.image_seq_length))
    return counts


def expand(count: ImageCount, settings: PaliGemmaSettings) -> Expansion:
    return (Run(PLACEHOLDER, count.tokens),)


def compose(rendered: str, expansions: Sequence[Expansion], settings: PaliGemmaSettings) -> list[Segment]:
    """The text `PaliGemmaProcessor.prepare_inputs_layout` builds, with each <image> expanded."""
    if not expansions:
        # PaliGemmaProcessor.validate_inputs: "`images` are expected as arguments to a
        # `PaliGemmaProcessor` instance." (the engine reports the row instead of counting it)
        raise CountError("PaliGemma's processor refuses a row without an image")
    if PLACEHOLDER not in rendered:  # BC branch: the images go first
        rendered = PLACEHOLDER * len(expansions) + settings.bos_token + rendered + "\n"
    else:
        end = rendered.rfind(PLACEHOLDER) + len(PLACEHOLDER)
        rendered = rendered[:end] + settings.bos_token + rendered[end:] + "\n"
    pieces = rendered.split(PLACEHOLDER)
    segments: list[Segment] = [pieces[0]]
    for expansion, piece in zip(expansions, pieces[1:], strict=True):
        segments.extend(expansion)
        segments.append(piece)
    return segments


# SiglipImageProcessor alone names a SigLIP encoder, not PaliGemma: found by processor_class only
FAMILY = Family.define(
    __name__, name="paligemma", title="PaliGemma / PaliGemma 2",
    processor_classes=("PaliGemmaProcessor",), image_processor_types=(), placeholder=PLACEHOLDER,
    add_special_tokens=False,
    size_knob=no_knob(f"PaliGemma resizes every image to one size: {FIXED_SIZE}"),
)  # fmt: skip
