"""Granite 4 Vision (Granite4VisionProcessor): LLaVA-NeXT's anyres tiling with a fractional downsample rate.

Processor (transformers 5.24 `Granite4VisionProcessor.replace_image_token` / `_get_number_of_features` /
`_get_unpadded_features`): the i-th `<image>` (the tokenizer's image_token where it names one) becomes N
copies of itself, computed as LLaVA-NeXT does (see vlmlint/models/llava_next.py) except that the patch
grid of the processed base patch is scaled by `downsample_rate` (a fraction string, e.g. "4/8": the
Window Q-Former projector's output grid) before anything else:

    best = select_best_resolution((H, W), image_processor.image_grid_pinpoints)
    h, w = the processed base patch (pixel_values[0][0]); scale_h, scale_w = best_h // h, best_w // w
    g_h, g_w = h // patch_size, w // patch_size
    g_h, g_w = int(g_h * Fraction(downsample_rate)), int(g_w * Fraction(downsample_rate))   # when set
    rows, cols = LLaVA-NeXT's unpadded feature grid on (g_h * scale_h, g_w * scale_w)
    N = rows * cols + rows + g_h * g_w + num_additional_image_tokens - (1 if strategy == "default")

`_get_unpadded_features` is LLaVA-NeXT's character for character (a test pins it), so this module calls
`llava_next.unpadded_features`, `select_best_resolution`, `patch_output_size`, `base_patch` and the tile
check. The image processor is LLaVA-NeXT's (`LlavaNextImageProcessorPil`); the processor adds
images_kwargs do_pad=True, which only pads the tile batch. patch_size, downsample_rate,
num_additional_image_tokens and vision_feature_select_strategy are the processor's (processor_config.json;
class defaults None, None, 0, None): without patch_size the processor cannot expand `<image>`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from vlmlint.models import llava_next
from vlmlint.models.base import CountError, Expansion, Family, ImageCount, Run, image_processor_types, no_knob
from vlmlint.models.llava import PLACEHOLDER


@dataclass(frozen=True)
class Granite4VisionSettings(llava_next.LlavaNextSettings):
    downsample_rate: str | None = None  # the processor's (a Fraction string), None: no downsampling
    placeholder: str = PLACEHOLDER  # the tokenizer's image_token, else the processor's image_token

    @property
    def rate(self) -> Fraction | None:
        return None if self.downsample_rate is None else Fraction(self.downsample_rate)


def _fraction(value: Any) -> str | None:
    if value is None:
        return None
    try:
        rate = Fraction(value)
    except (TypeError, ValueError, ZeroDivisionError):
        # Granite4VisionProcessor's Fraction(...) raises on every image
        raise CountError(f'downsample_rate must be a fraction such as "4/8", got {value!r}') from None
    if rate <= 0:
        raise CountError(f"downsample_rate must be above 0, got {value!r}")
    return str(value)


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> Granite4VisionSettings:
    base = llava_next.settings_from(image_processor, processor_config, model_config)
    placeholder = (
        processor_config.get("tokenizer_image_token") or processor_config.get("image_token") or PLACEHOLDER
    )
    return Granite4VisionSettings(
        **{f.name: getattr(base, f.name) for f in dataclasses.fields(base)},
        downsample_rate=_fraction(processor_config.get("downsample_rate")),
        placeholder=str(placeholder),
    )


def features(
    height: int, width: int, patch_h: int, patch_w: int, settings: Granite4VisionSettings
) -> ImageCount:
    """Granite4VisionProcessor._get_number_of_features for an image of height x width and a processed patch."""
    best = llava_next.select_best_resolution(height, width, settings.image_grid_pinpoints)
    if best is None:
        raise CountError("image_grid_pinpoints is empty")
    scale_h, scale_w = best[0] // patch_h, best[1] // patch_w
    grid_h, grid_w = patch_h // settings.patch_size, patch_w // settings.patch_size
    if settings.rate is not None:
        grid_h, grid_w = int(grid_h * settings.rate), int(grid_w * settings.rate)
    rows, cols = llava_next.unpadded_features(height, width, grid_h, grid_w, scale_h, scale_w)
    tokens = rows * cols + rows + grid_h * grid_w + settings.num_additional_image_tokens - settings.dropped
    resized_h, resized_w = llava_next.patch_output_size(height, width, best)
    return ImageCount(resized_h, resized_w, (scale_h, scale_w, rows, cols), tokens)


def count(height: int, width: int, settings: Granite4VisionSettings, images_in_row: int = 1) -> ImageCount:
    """Header-only: grid = (tile rows, tile cols, unpadded feature rows, cols) as for LLaVA-NeXT."""
    if height <= 0 or width <= 0:
        raise CountError(f"{width}x{height} image")
    base = llava_next.base_patch(settings)
    best = llava_next.select_best_resolution(height, width, settings.image_grid_pinpoints)
    if best is None:
        raise CountError("image_grid_pinpoints is empty")
    llava_next._check_tiles(best, base, settings)
    return features(height, width, *base, settings)


def count_exact(
    image_processor: Any, images: list[Any], settings: Granite4VisionSettings
) -> list[ImageCount]:
    """Run the real image processor (with the processor's do_pad); count from image_sizes and pixel_values."""
    try:
        output = image_processor(images=images, do_pad=True)
    except ValueError as exc:
        raise CountError(str(exc)) from None
    patch_h, patch_w = (int(v) for v in output["pixel_values"][0][0].shape[-2:])
    return [
        features(int(size[0]), int(size[1]), patch_h, patch_w, settings) for size in output["image_sizes"]
    ]


def expand(count: ImageCount, settings: Granite4VisionSettings) -> Expansion:
    """The image token repeated for unpadded features, row newlines and the base image alike."""
    return (Run(settings.placeholder, count.tokens),)


FAMILY = Family.define(
    __name__, name="granite4_vision", title="Granite 4 Vision",
    processor_classes=("Granite4VisionProcessor",), image_processor_types=image_processor_types("LlavaNext"),
    placeholder=PLACEHOLDER,
    size_knob=no_knob(
        "no image-size knob: image tokens per image are fixed by the grid pinpoints "
        "(image_grid_pinpoints) and the downsample rate; only the max length is recommended"
    ),
)  # fmt: skip
