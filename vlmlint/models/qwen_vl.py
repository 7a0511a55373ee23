"""Qwen2-VL, Qwen2.5-VL and Qwen3-VL: smart_resize, then one <|image_pad|> per merged patch.

Processor (transformers 5.x `Qwen2VLProcessor.replace_image_token`): each <|image_pad|> the chat
template writes between <|vision_start|> and <|vision_end|> becomes grid_t*grid_h*grid_w / merge^2
copies of itself; the start and end tokens stay.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from vlmlint.models.base import (
    CountError,
    Expansion,
    Family,
    ImageCount,
    Knob,
    Run,
    image_processor_types,
    positive_int,
)

MAX_ASPECT_RATIO = 200
PLACEHOLDER = "<|image_pad|>"


@dataclass(frozen=True)
class QwenSettings:
    patch_size: int
    merge_size: int
    temporal_patch_size: int
    min_pixels: int
    max_pixels: int
    do_resize: bool = True
    # The processor's image token: the tokenizer's image_token when it names one (Qwen2VLProcessor.__init__).
    placeholder: str = PLACEHOLDER

    @property
    def raw_image_prompt(self) -> str:
        return f"<|vision_start|>{self.placeholder}<|vision_end|>"

    @property
    def factor(self) -> int:
        return self.patch_size * self.merge_size


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> QwenSettings:
    size = image_processor.size  # transformers folds legacy min_pixels/max_pixels keys into size
    min_pixels = getattr(size, "shortest_edge", None)
    max_pixels = getattr(size, "longest_edge", None)
    if not min_pixels or not max_pixels:
        raise CountError(f"size must hold shortest_edge and longest_edge (pixel counts), got {size}")
    del model_config  # Qwen-VL's image settings all live in the image processor
    placeholder = processor_config.get("tokenizer_image_token") or PLACEHOLDER
    return QwenSettings(
        patch_size=positive_int(image_processor.patch_size, "patch_size"),
        merge_size=positive_int(image_processor.merge_size, "merge_size"),
        temporal_patch_size=positive_int(image_processor.temporal_patch_size, "temporal_patch_size"),
        min_pixels=positive_int(min_pixels, "min_pixels"),
        max_pixels=positive_int(max_pixels, "max_pixels"),
        do_resize=bool(getattr(image_processor, "do_resize", True)),
        placeholder=str(placeholder),
    )


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """transformers' smart_resize, to the bit: Python's round() is banker's rounding there too."""
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise CountError(
            f"absolute aspect ratio must be smaller than {MAX_ASPECT_RATIO}, got {max(height, width) / min(height, width)}"
        )
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def max_pixels_saturation(height: int, width: int, factor: int) -> int:
    """The max_pixels from which smart_resize no longer shrinks this image: its rounded area.

    At max_pixels >= round(h/factor)*factor * round(w/factor)*factor the downscale branch is never
    taken, so every larger max_pixels gives the same size. Below it the image is shrunk and its sides
    never decrease as max_pixels grows; but the shrink keeps at least one factor-sized row, which can
    give more tokens just below this point than at it (vlmlint stats cuts its search here).
    """
    return round(height / factor) * factor * (round(width / factor) * factor)


def count(height: int, width: int, settings: QwenSettings, images_in_row: int = 1) -> ImageCount:
    if settings.do_resize:
        resized_height, resized_width = smart_resize(
            height, width, settings.factor, settings.min_pixels, settings.max_pixels
        )
    else:
        resized_height, resized_width = height, width
    grid_h, grid_w = resized_height // settings.patch_size, resized_width // settings.patch_size
    if grid_h % settings.merge_size or grid_w % settings.merge_size or not grid_h or not grid_w:
        raise CountError(
            f"{width}x{height} is not a multiple of patch*merge={settings.factor} and do_resize is off"
        )
    return ImageCount(
        resized_height, resized_width, (1, grid_h, grid_w), grid_h * grid_w // settings.merge_size**2
    )


def count_exact(image_processor: Any, images: list[Any], settings: QwenSettings) -> list[ImageCount]:
    """Run the model's real image processor on the row's decoded images and read image_grid_thw."""
    return counts_from_grid_thw(image_processor, images, {}, settings.patch_size, settings.merge_size)


def counts_from_grid_thw(
    image_processor: Any, images: list[Any], kwargs: dict[str, Any], patch_size: int, merge_size: int
) -> list[ImageCount]:
    """Run a Qwen-style image processor and read each image's count from its image_grid_thw (one token
    per merge_size x merge_size patches); the families whose processors return that grid share it."""
    try:
        output = image_processor(images=images, **kwargs)
    except ValueError as exc:
        raise CountError(str(exc)) from None
    counts = []
    for grid in output["image_grid_thw"]:
        grid_t, grid_h, grid_w = (int(v) for v in grid)
        tokens = grid_t * grid_h * grid_w // merge_size**2
        counts.append(ImageCount(grid_h * patch_size, grid_w * patch_size, (grid_t, grid_h, grid_w), tokens))
    return counts


def expand(count: ImageCount, settings: QwenSettings) -> Expansion:
    """<|image_pad|> repeated once per merged patch; <|vision_start|>/<|vision_end|> are the template's."""
    return (Run(settings.placeholder, count.tokens),)


def position_span(count: ImageCount, settings: QwenSettings) -> int:
    """How far one image moves the M-RoPE position, as get_rope_index does for images (transformers 5.24.0).

    Qwen2VLModel.get_rope_index (and the Qwen2.5-VL / Qwen3-VL copies) gives an image's tokens the
    positions start + (t, h, w) on its (grid_t, grid_h/merge, grid_w/merge) grid, then moves the next
    text position on by max(grid_h, grid_w) // merge. An image has grid_t = 1, so this is also
    max(t, h/merge, w/merge), the image's largest position minus its start, plus one.
    """
    _, grid_h, grid_w = count.grid
    return max(grid_h, grid_w) // settings.merge_size


def size_knob(settings: QwenSettings) -> Knob | str:
    """max_pixels, on the grid of multiples of factor^2 from min_pixels (`vlmlint stats`)."""
    factor = settings.factor
    if not settings.do_resize:
        return (
            "do_resize is false: max_pixels has no effect and every image keeps its size "
            f"(sides must be multiples of {factor}); only the max length is recommended"
        )
    step = factor * factor

    def shape(height: int, width: int) -> tuple[tuple[int, ...], int]:
        # Below its rounded area an image is shrunk, and its sides never shrink as max_pixels grows;
        # at the rounded area the shrinking (and its one-row clamp) stops: the count may drop there.
        saturation = max_pixels_saturation(height, width, factor)
        return (saturation,), saturation

    return Knob(
        name="max_pixels",
        current=settings.max_pixels,
        step=step,
        low=-(-settings.min_pixels // step) * step,
        settings_at=lambda value: dataclasses.replace(settings, max_pixels=value),
        shape=shape,
        open_ended=True,
        text_unchanged=True,
        grid=f"multiples of (patch_size*merge_size)^2 = {step}, from min_pixels {settings.min_pixels}",
    )


def _positive(settings: Any, name: str) -> int | None:
    value = getattr(settings, name, None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def shrink_hint(height: int, width: int, limit: float, settings: Any) -> str | None:
    """The smallest max_pixels that keeps an image's shrink within `limit` (rule VLM208's fix)."""
    factor = _positive(settings, "factor")
    if not factor or not _positive(settings, "max_pixels"):
        return None
    # The smallest max_pixels (a multiple of factor^2) whose smart_resize, which floors each side
    # to the factor grid, keeps the shrink within the limit.
    area = height * width
    unit = factor * factor
    min_pixels = _positive(settings, "min_pixels") or unit
    pixels = math.ceil(area / limit / unit) * unit
    resized_h, resized_w = smart_resize(height, width, factor, min_pixels, pixels)
    for _ in range(10_000):  # a few steps in practice; the bound only guards the loop
        if resized_h * resized_w * limit >= area:
            break
        pixels += unit
        resized_h, resized_w = smart_resize(height, width, factor, min_pixels, pixels)
    return (
        f"set max_pixels >= {pixels} ({resized_h * resized_w // unit} image tokens for this image), "
        "or crop the region that matters"
    )


def trainer_template(pipeline: str, model: Any) -> str | None:
    """LLaMA-Factory registers qwen3_vl_nothink for Qwen3-VL and qwen2_vl for Qwen2-VL / Qwen2.5-VL."""
    del pipeline
    return "qwen3_vl_nothink" if model.processor_class == "Qwen3VLProcessor" else "qwen2_vl"


FAMILY = Family.define(
    __name__, name="qwen-vl", title="Qwen2-VL / Qwen2.5-VL / Qwen3-VL",
    processor_classes=("Qwen2VLProcessor", "Qwen2_5_VLProcessor", "Qwen3VLProcessor"),
    image_processor_types=image_processor_types("Qwen2VL"), placeholder=PLACEHOLDER,
    raw_image_prompt="<|vision_start|><|image_pad|><|vision_end|>", marker_tokens=("<|vision_start|>",),
    trainer_templates={"llamafactory": ("qwen2_vl", "qwen3_vl_nothink")},
    choose_trainer_template=trainer_template,
)  # fmt: skip
