"""Gemma 3: each <start_of_image> becomes a fixed run of <image_soft_token>, plus pan-and-scan crops.

Processor (transformers 5.24 `Gemma3Processor.replace_image_token`): the chat template writes
`<start_of_image>` (the processor's image_token, the tokenizer's boi_token) once per image; the
processor replaces it with its full_image_sequence

    "\\n\\n<start_of_image>" + "<image_soft_token>" x image_seq_length + "<end_of_image>\\n\\n"

and, when pan-and-scan made n > 0 crops of the image,

    "Here is the original image " + full + " and here are some crops to help you see better "
    + " ".join([full] * n)

The "\\n\\n" around each sequence is plain text that tokenizes together with its neighbours; the engine
tokenizes the whole composed text, so those merges are counted as the processor counts them.

Every image is resized to size (896x896) whatever its shape, so the count only depends on the image
size through pan-and-scan. Which pan-and-scan settings `processor(text, images)` uses is decided by
`ProcessorMixin._merge_kwargs`: the processor class's own `images_kwargs` (do_pan_and_scan False,
min crop 256, at most 4 crops, ratio 1.2) override the image processor's attributes, and the
tokenizer's init kwargs (tokenizer_config.json) override those. A `do_pan_and_scan: true` written in
preprocessor_config.json alone is therefore ignored by the processor (it is honoured by the bare
image processor, and by vLLM); it takes effect when tokenizer_config.json carries it too, which is what
`AutoProcessor.from_pretrained(..., do_pan_and_scan=True).save_pretrained()` writes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from vlmlint.models.base import (
    FIXED_SIZE,
    CountError,
    Expansion,
    Family,
    ImageCount,
    Run,
    image_processor_types,
    positive_int,
)

PLACEHOLDER = "<start_of_image>"
DEFAULT_IMAGE_TOKEN = "<image_soft_token>"
DEFAULT_EOI_TOKEN = "<end_of_image>"
DEFAULT_IMAGE_SEQ_LENGTH = 256
# Gemma3Processor.images_kwargs in transformers 5.24 (read from the class when it is there).
PROCESSOR_IMAGES_KWARGS = {
    "do_pan_and_scan": False,
    "pan_and_scan_min_crop_size": 256,
    "pan_and_scan_max_num_crops": 4,
    "pan_and_scan_min_ratio_to_activate": 1.2,
}
ORIGINAL_PREFIX = "Here is the original image "
CROPS_PREFIX = " and here are some crops to help you see better "


@dataclass(frozen=True)
class Gemma3Settings:
    height: int  # every image (and every crop) is resized to height x width
    width: int
    image_seq_length: int = DEFAULT_IMAGE_SEQ_LENGTH  # <image_soft_token> per image / crop (processor)
    do_resize: bool = True
    do_pan_and_scan: bool = False
    pan_and_scan_min_crop_size: int = 256
    pan_and_scan_max_num_crops: int = 4
    pan_and_scan_min_ratio_to_activate: float = 1.2
    boi_token: str = PLACEHOLDER
    eoi_token: str = DEFAULT_EOI_TOKEN
    image_token: str = DEFAULT_IMAGE_TOKEN

    def images_kwargs(self) -> dict[str, Any]:
        """What the processor passes its image processor (so count_exact runs the same pipeline)."""
        return {
            "do_resize": self.do_resize,
            "size": {"height": self.height, "width": self.width},
            "do_pan_and_scan": self.do_pan_and_scan,
            "pan_and_scan_min_crop_size": self.pan_and_scan_min_crop_size,
            "pan_and_scan_max_num_crops": self.pan_and_scan_max_num_crops,
            "pan_and_scan_min_ratio_to_activate": self.pan_and_scan_min_ratio_to_activate,
        }


def _processor_images_kwargs() -> dict[str, Any]:
    try:
        from transformers import Gemma3Processor
    except ImportError:  # an older transformers without Gemma 3
        return dict(PROCESSOR_IMAGES_KWARGS)
    return {**PROCESSOR_IMAGES_KWARGS, **(getattr(Gemma3Processor, "images_kwargs", None) or {})}


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> Gemma3Settings:
    """The images kwargs `processor(text, images)` ends up with, in `_merge_kwargs`' order."""
    tokenizer_kwargs = processor_config.get("tokenizer_init_kwargs") or {}
    class_kwargs = _processor_images_kwargs()

    def pipeline(key: str) -> Any:
        if key in tokenizer_kwargs:  # _merge_kwargs step 5: tokenizer init kwargs
            return tokenizer_kwargs[key]
        if key in class_kwargs:  # step 7: the processor class's images_kwargs
            return class_kwargs[key]
        return getattr(image_processor, key, None)  # the image processor's own settings

    size = pipeline("size")
    height = size.get("height") if isinstance(size, dict) else getattr(size, "height", None)
    width = size.get("width") if isinstance(size, dict) else getattr(size, "width", None)
    if not height or not width:
        raise CountError(f"Gemma 3's image processor needs size.height and size.width, got {size}")
    do_resize = pipeline("do_resize")
    do_pan_and_scan = bool(pipeline("do_pan_and_scan"))
    pas = {key: pipeline(key) for key in PROCESSOR_IMAGES_KWARGS if key != "do_pan_and_scan"}
    if do_pan_and_scan and any(value is None for value in pas.values()):
        # the image processor compares against None and raises TypeError on every image
        raise CountError(f"pan-and-scan is on but its settings are missing: {pas}")
    pas = {key: PROCESSOR_IMAGES_KWARGS[key] if value is None else value for key, value in pas.items()}
    seq = processor_config.get("image_seq_length") or DEFAULT_IMAGE_SEQ_LENGTH
    return Gemma3Settings(
        height=positive_int(height, "size.height"),
        width=positive_int(width, "size.width"),
        image_seq_length=positive_int(seq, "image_seq_length"),
        do_resize=True if do_resize is None else bool(do_resize),
        do_pan_and_scan=do_pan_and_scan,
        pan_and_scan_min_crop_size=positive_int(
            pas["pan_and_scan_min_crop_size"], "pan_and_scan_min_crop_size"
        ),
        pan_and_scan_max_num_crops=positive_int(
            pas["pan_and_scan_max_num_crops"], "pan_and_scan_max_num_crops"
        ),
        pan_and_scan_min_ratio_to_activate=float(pas["pan_and_scan_min_ratio_to_activate"]),
        boi_token=str(tokenizer_kwargs.get("boi_token") or PLACEHOLDER),
        eoi_token=str(tokenizer_kwargs.get("eoi_token") or DEFAULT_EOI_TOKEN),
        image_token=str(tokenizer_kwargs.get("image_token") or DEFAULT_IMAGE_TOKEN),
    )


def _crops_along(long: int, short: int, settings: Gemma3Settings) -> int:
    """Crops along the long side, 0 below the ratio that activates pan-and-scan (transformers' order)."""
    if long / short < settings.pan_and_scan_min_ratio_to_activate:
        return 0
    crops = int(math.floor(long / short + 0.5))
    crops = min(int(math.floor(long / settings.pan_and_scan_min_crop_size)), crops)
    return min(settings.pan_and_scan_max_num_crops, max(2, crops))


def pan_and_scan_grid(height: int, width: int, settings: Gemma3Settings) -> tuple[int, int]:
    """(rows, cols) of crops `Gemma3ImageProcessor.pan_and_scan` cuts, (0, 0) when it makes none.

    The same float arithmetic as transformers, in the same order, so ties round the same way.
    """
    min_crop = settings.pan_and_scan_min_crop_size
    if width >= height:  # square or landscape: crops side by side
        rows, cols = 1, _crops_along(width, height, settings)
    else:
        rows, cols = _crops_along(height, width, settings), 1
    if not rows or not cols:
        return 0, 0
    crop_w = int(math.ceil(width / cols))
    crop_h = int(math.ceil(height / rows))
    if min(crop_w, crop_h) < min_crop:
        return 0, 0
    # Every crop counts, even one that starts past the edge (an empty slice, possible only with a
    # min crop size of a few pixels): transformers resizes it like the others.
    return rows, cols


def count(height: int, width: int, settings: Gemma3Settings, images_in_row: int = 1) -> ImageCount:
    if height < 1 or width < 1:
        raise CountError(f"image of {width}x{height} pixels")
    try:
        rows, cols = pan_and_scan_grid(height, width, settings) if settings.do_pan_and_scan else (0, 0)
    except ZeroDivisionError:  # a min crop size or max crop count of 0: transformers divides by it too
        raise CountError("pan-and-scan settings divide by zero (min crop size or max crops is 0)") from None
    crops = rows * cols
    resized = (settings.height, settings.width) if settings.do_resize else (height, width)
    return ImageCount(
        resized[0], resized[1], (rows, cols) if crops else (1, 1), settings.image_seq_length * (1 + crops)
    )


def count_exact(image_processor: Any, images: list[Any], settings: Gemma3Settings) -> list[ImageCount]:
    """Run the real image processor with the processor's images kwargs and read num_crops."""
    try:
        output = image_processor(images=images, **settings.images_kwargs())
    except (ValueError, ZeroDivisionError) as exc:
        raise CountError(str(exc)) from None
    counts = []
    view = 0
    for image, crops in zip(images, output["num_crops"], strict=True):
        crops = int(crops)
        _, resized_height, resized_width = output["pixel_values"][view].shape  # channels first
        view += 1 + crops
        width, height = image.size
        grid = (1, 1) if not crops else ((1, crops) if width >= height else (crops, 1))
        counts.append(
            ImageCount(int(resized_height), int(resized_width), grid, settings.image_seq_length * (1 + crops))
        )
    return counts


def expand(count: ImageCount, settings: Gemma3Settings) -> Expansion:
    """full_image_sequence, or the original-and-crops sentence when pan-and-scan cut crops."""
    full = (
        "\n\n" + settings.boi_token,
        Run(settings.image_token, settings.image_seq_length),
        settings.eoi_token + "\n\n",
    )
    crops = count.tokens // settings.image_seq_length - 1
    if crops <= 0:
        return full
    segments: list[str | Run] = [ORIGINAL_PREFIX, *full, CROPS_PREFIX]
    for index in range(crops):
        if index:
            segments.append(" ")
        segments.extend(full)
    return tuple(segments)


def size_knob(settings: Any) -> str:
    """No image-size knob that `vlmlint stats` searches: the sentence that says why."""
    if getattr(settings, "do_pan_and_scan", False):
        return (
            "pan-and-scan is on: pan_and_scan_max_num_crops bounds the crops per image, but vlmlint stats "
            "does not search it yet; only the max length is recommended"
        )
    return f"Gemma 3 without pan-and-scan resizes every image to one size: {FIXED_SIZE}"


def resized_copies(grid: tuple[int, ...]) -> int:
    """Pan-and-scan: each crop is resized to the full size too, so the model sees rows x cols images."""
    if grid and len(grid) == 2 and grid != (1, 1):
        return grid[0] * grid[1]
    return 1


FAMILY = Family.define(
    __name__, name="gemma3", title="Gemma 3", processor_classes=("Gemma3Processor",),
    image_processor_types=image_processor_types("Gemma3"), placeholder=PLACEHOLDER,
    marker_tokens=("<start_of_image>", "<image_soft_token>"),
)  # fmt: skip
