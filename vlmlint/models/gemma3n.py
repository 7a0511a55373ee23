"""Gemma 3n: each image token becomes a fixed run of image_seq_length soft tokens between markers.

Processor (transformers 5.24 `Gemma3nProcessor`): the chat template writes the tokenizer's image_token
(`<image_soft_token>`, unlike Gemma 3's template, which writes `<start_of_image>`) once per image;
`replace_image_token` returns the same full_image_sequence for every image:

    "\\n\\n" + boi_token + image_token x image_seq_length + eoi_token + "\\n\\n"

(`<start_of_image>` ... `<end_of_image>`; image_seq_length is the processor's own setting, 256 by
default and on the hub). The "\\n\\n" on both sides is plain text that tokenizes together with its
neighbours; the engine tokenizes the whole composed text, so those merges count as the processor's.

The image processor is SigLIP's (`SiglipImageProcessorPil`, the hub's SiglipImageProcessorFast): every
image is resized to size.height x size.width (768 x 768 on the hub) whatever its shape, so the count
never depends on the image; no pan-and-scan, no crops. Which size `processor(text, images)` uses
(`ProcessorMixin._merge_kwargs`): Gemma3nProcessor has no images_kwargs of its own, so the image
processor's attributes, overridden by the tokenizer's init kwargs where they name size or do_resize.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vlmlint.models.base import (
    FIXED_SIZE,
    CountError,
    Expansion,
    Family,
    ImageCount,
    Run,
    no_knob,
    positive_int,
)
from vlmlint.models.gemma4 import tokenizer_token

DEFAULT_IMAGE_TOKEN = "<image_soft_token>"
DEFAULT_BOI_TOKEN = "<start_of_image>"
DEFAULT_EOI_TOKEN = "<end_of_image>"
DEFAULT_IMAGE_SEQ_LENGTH = 256  # Gemma3nProcessor.__init__'s default


@dataclass(frozen=True)
class Gemma3nSettings:
    height: int  # every image is resized to height x width
    width: int
    image_seq_length: int = DEFAULT_IMAGE_SEQ_LENGTH
    do_resize: bool = True
    image_token: str = DEFAULT_IMAGE_TOKEN
    boi_token: str = DEFAULT_BOI_TOKEN
    eoi_token: str = DEFAULT_EOI_TOKEN

    @property
    def placeholder(self) -> str:
        """The processor's image_token is what it looks for in the text (Family.bound reads this)."""
        return self.image_token

    def images_kwargs(self) -> dict[str, Any]:
        return {"do_resize": self.do_resize, "size": {"height": self.height, "width": self.width}}


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> Gemma3nSettings:
    """The size `processor(text, images)` resizes to, its image_seq_length and the tokenizer's tokens."""
    tokenizer_kwargs = processor_config.get("tokenizer_init_kwargs") or {}

    def pipeline(key: str) -> Any:
        if key in tokenizer_kwargs:  # _merge_kwargs step 5: tokenizer init kwargs
            return tokenizer_kwargs[key]
        return getattr(image_processor, key, None)

    size = pipeline("size")
    height = size.get("height") if isinstance(size, dict) else getattr(size, "height", None)
    width = size.get("width") if isinstance(size, dict) else getattr(size, "width", None)
    if not height or not width:
        raise CountError(f"Gemma 3n's image processor needs size.height and size.width, got {size}")
    do_resize = pipeline("do_resize")
    image_token = processor_config.get("tokenizer_image_token") or tokenizer_token(
        tokenizer_kwargs, "image_token", DEFAULT_IMAGE_TOKEN
    )
    seq = processor_config.get("image_seq_length")
    return Gemma3nSettings(
        height=positive_int(height, "size.height"),
        width=positive_int(width, "size.width"),
        image_seq_length=positive_int(DEFAULT_IMAGE_SEQ_LENGTH if seq is None else seq, "image_seq_length"),
        do_resize=True if do_resize is None else bool(do_resize),
        image_token=str(image_token),
        boi_token=str(tokenizer_token(tokenizer_kwargs, "boi_token", DEFAULT_BOI_TOKEN)),
        eoi_token=str(tokenizer_token(tokenizer_kwargs, "eoi_token", DEFAULT_EOI_TOKEN)),
    )


def count(height: int, width: int, settings: Gemma3nSettings, images_in_row: int = 1) -> ImageCount:
    """image_seq_length soft tokens for any image; the resized size is the processor's fixed size."""
    if height < 1 or width < 1:
        raise CountError(f"image of {width}x{height} pixels")
    resized = (settings.height, settings.width) if settings.do_resize else (height, width)
    return ImageCount(resized[0], resized[1], (1, 1), settings.image_seq_length)


def count_exact(image_processor: Any, images: list[Any], settings: Gemma3nSettings) -> list[ImageCount]:
    """Run the real image processor with the processor's images kwargs and read each resized size."""
    try:
        output = image_processor(images=images, **settings.images_kwargs())
    except ValueError as exc:
        raise CountError(str(exc)) from None
    counts = []
    for pixels in output["pixel_values"]:
        _, resized_height, resized_width = pixels.shape  # channels first
        counts.append(ImageCount(int(resized_height), int(resized_width), (1, 1), settings.image_seq_length))
    return counts


def expand(count: ImageCount, settings: Gemma3nSettings) -> Expansion:
    """`full_image_sequence`: the same for every image."""
    return (
        "\n\n" + settings.boi_token,
        Run(settings.image_token, settings.image_seq_length),
        settings.eoi_token + "\n\n",
    )


size_knob = no_knob(f"Gemma 3n resizes every image to one size: {FIXED_SIZE}")


FAMILY = Family.define(
    __name__, name="gemma3n", title="Gemma 3n", processor_classes=("Gemma3nProcessor",),
    # SigLIP's image processor is shared with SigLIP, PaliGemma and others: claimed by processor class only
    image_processor_types=(), placeholder=DEFAULT_IMAGE_TOKEN,
    marker_tokens=(DEFAULT_IMAGE_TOKEN, DEFAULT_BOI_TOKEN, DEFAULT_EOI_TOKEN),
)  # fmt: skip
