"""Pixtral and Mistral3 (PixtralProcessor + PixtralImageProcessor): native resolution, one row of
[IMG] per patch row, each row closed by [IMG_BREAK], the last one by [IMG_END].

Image processor (transformers 5.x `pixtral.get_resize_output_image_size`): when the image exceeds the
size (longest_edge, or height/width as maxima) it is scaled down by the larger of h/max_h and w/max_w,
each side floored; then each side is rounded UP to a multiple of the effective patch (small images are
padded up, never scaled up). A side that floors to 0 makes the resize raise.

Processor (`PixtralProcessor`): the effective patch is patch_size * spatial_merge_size (Pixtral-12B:
16 * 1; Mistral3 / Mistral-Small-3.1: 14 * 2); the processor passes it to the image processor,
overriding the image processor's own patch_size. Each "[IMG]" the chat template writes becomes
rows x ("[IMG]" x cols + "[IMG_BREAK]") with the last "[IMG_BREAK]" replaced by "[IMG_END]", where
rows, cols = resized height // patch, resized width // patch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from vlmlint.models.base import (
    CountError,
    Expansion,
    Family,
    ImageCount,
    Run,
    Segment,
    image_processor_types,
    no_knob,
)

PROCESSOR_CLASS = "PixtralProcessor"
# PixtralProcessor.__init__ defaults. transformers cannot import PixtralProcessor without torch, so the
# loader cannot read them from the class; tests/families/test_pixtral.py checks they are the class's.
DEFAULTS = {
    "patch_size": 16,
    "spatial_merge_size": 1,
    "image_token": "[IMG]",
    "image_break_token": "[IMG_BREAK]",
    "image_end_token": "[IMG_END]",
}
CALL_KEYS = ("size", "do_resize")


@dataclass(frozen=True)
class PixtralSettings:
    patch_size: int  # the processor's (vision tower) patch size
    spatial_merge_size: int
    max_height: int
    max_width: int
    do_resize: bool = True
    image_token: str = "[IMG]"
    image_break_token: str = "[IMG_BREAK]"
    image_end_token: str = "[IMG_END]"

    @property
    def effective_patch(self) -> int:
        return self.patch_size * self.spatial_merge_size


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> PixtralSettings:
    processor_class = processor_config.get("processor_class")
    if processor_class not in (None, PROCESSOR_CLASS) or model_config.get("model_type") == "lighton_ocr":
        raise CountError(
            f"PixtralImageProcessor under {processor_class or model_config.get('model_type')} is not "
            "PixtralProcessor (no [IMG_BREAK] rows); vlmlint does not count it yet"
        )
    values = {key: processor_config.get(key) or default for key, default in DEFAULTS.items()}
    if values["image_token"] != DEFAULTS["image_token"]:
        raise CountError(
            f"processor image_token {values['image_token']!r}: vlmlint finds images by the {DEFAULTS['image_token']} "
            "placeholder only"
        )
    # ProcessorMixin._merge_kwargs: image kwargs the tokenizer was initialised with beat the image
    # processor's own (patch_size too, but _process_images then overwrites it with the effective patch).
    call = {k: v for k, v in (processor_config.get("tokenizer_init_kwargs") or {}).items() if k in CALL_KEYS}
    size = call.get("size", image_processor.size)
    if isinstance(size, dict):
        longest, height, width = size.get("longest_edge"), size.get("height"), size.get("width")
    else:
        longest = getattr(size, "longest_edge", None)
        height, width = getattr(size, "height", None), getattr(size, "width", None)
    if longest:
        max_height = max_width = int(longest)
    elif height and width:
        max_height, max_width = int(height), int(width)
    else:
        raise CountError(f"size must hold longest_edge, or height and width, got {size}")
    return PixtralSettings(
        patch_size=int(values["patch_size"]),
        spatial_merge_size=int(values["spatial_merge_size"]),
        max_height=max_height,
        max_width=max_width,
        do_resize=bool(call.get("do_resize", getattr(image_processor, "do_resize", True))),
        image_token=str(values["image_token"]),
        image_break_token=str(values["image_break_token"]),
        image_end_token=str(values["image_end_token"]),
    )


def resize_output_size(
    height: int, width: int, max_height: int, max_width: int, patch: int
) -> tuple[int, int]:
    """transformers' pixtral get_resize_output_image_size, float for float (floor after dividing by the
    ratio, then up to a multiple of the patch)."""
    ratio = max(height / max_height, width / max_width)
    if ratio > 1:
        height = int(math.floor(height / ratio))
        width = int(math.floor(width / ratio))
    return ((height - 1) // patch + 1) * patch, ((width - 1) // patch + 1) * patch


def count(height: int, width: int, settings: PixtralSettings, images_in_row: int = 1) -> ImageCount:
    """rows * cols [IMG] tokens; the rows [IMG_BREAK]/[IMG_END] come on top (see expand)."""
    del images_in_row  # each image is resized on its own
    patch = settings.effective_patch
    if settings.do_resize:
        resized_height, resized_width = resize_output_size(
            height, width, settings.max_height, settings.max_width, patch
        )
        if resized_height < 1 or resized_width < 1:
            raise CountError(
                f"{width}x{height} scales to {max(resized_width, 0)}x{max(resized_height, 0)} within "
                f"{settings.max_width}x{settings.max_height}: the image processor cannot resize to a zero side"
            )
    else:
        resized_height, resized_width = height, width
    return _grid_count(resized_height, resized_width, settings)


def _grid_count(resized_height: int, resized_width: int, settings: PixtralSettings) -> ImageCount:
    patch = settings.effective_patch
    rows, cols = resized_height // patch, resized_width // patch
    if rows < 1:  # replace_image_token indexes the last token of an empty list
        raise CountError(
            f"{resized_width}x{resized_height} is less than one {patch}px patch high and do_resize is off"
        )
    return ImageCount(resized_height, resized_width, (rows, cols), rows * cols)


def count_exact(image_processor: Any, images: list[Any], settings: PixtralSettings) -> list[ImageCount]:
    """The real image processor's image_sizes, called with the kwargs the processor passes it."""
    try:
        output = image_processor(
            images=images,
            patch_size=settings.effective_patch,
            size={"height": settings.max_height, "width": settings.max_width},
            do_resize=settings.do_resize,
        )
    except ValueError as exc:
        raise CountError(str(exc)) from None
    return [_grid_count(int(h), int(w), settings) for h, w in output["image_sizes"]]


def expand(count: ImageCount, settings: PixtralSettings) -> Expansion:
    """rows x ([IMG] x cols + [IMG_BREAK]), the last [IMG_BREAK] replaced by [IMG_END]."""
    rows, cols = count.grid
    segments: list[Segment] = []
    for row in range(rows):
        segments.append(Run(settings.image_token, cols))
        segments.append(settings.image_end_token if row == rows - 1 else settings.image_break_token)
    return tuple(segments)


FAMILY = Family.define(
    __name__, name="pixtral", title="Pixtral / Mistral3", processor_classes=(PROCESSOR_CLASS,),
    image_processor_types=image_processor_types("Pixtral"), placeholder=DEFAULTS["image_token"],
    size_knob=no_knob(
        "size.longest_edge bounds the image size, but vlmlint stats does not search it yet; only the "
        "max length is recommended"
    ),
    marker_tokens=("[IMG]",),
)  # fmt: skip
