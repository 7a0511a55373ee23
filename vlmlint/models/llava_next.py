"""LLaVA-NeXT / LLaVA-1.6 (LlavaNextProcessor): anyres tiles, unpadded features, one newline per row.

Processor (transformers 5.x `LlavaNextProcessor.replace_image_token` / `_get_number_of_features`):
the i-th `<image>` becomes N copies of itself, where, for an image of H x W (image_sizes),
  best = select_best_resolution((H, W), image_processor.image_grid_pinpoints)
  h, w = the processed base patch (pixel_values[0][0]: crop_size for the hub configs)
  scale_h, scale_w = best_h // h, best_w // w;  g_h, g_w = h // patch_size, w // patch_size
  rows, cols = g_h * scale_h, g_w * scale_w, then the padding rows (or columns) the resize left are removed:
    if W / H > cols / rows: rows -= 2 * ((rows - int(round(H * (cols / W), 7))) // 2)
    else:                   cols -= 2 * ((cols - int(round(W * (rows / H), 7))) // 2)
  N = rows * cols + rows (one image_newline per row) + g_h * g_w + num_additional_image_tokens
      - (1 if vision_feature_select_strategy == "default")
The newline and base features are `<image>` tokens too: nothing else enters the text.

Ties: select_best_resolution keeps the first pinpoint with the largest effective area and, among equal
ones, the least waste (strict comparisons, so the earliest listed wins a full tie: a small square image
gets [336, 672], not [672, 336]). Both are replicated with the same float operations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from vlmlint.models.base import CountError, Expansion, Family, ImageCount, Run, image_processor_types, no_knob
from vlmlint.models.llava import PLACEHOLDER, Size, processor_settings, resize_output

Pinpoints = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class LlavaNextSettings:
    patch_size: int
    image_grid_pinpoints: Pinpoints
    num_additional_image_tokens: int = 0
    vision_feature_select_strategy: str | None = None  # the processor's (what input_ids get)
    do_resize: bool = True
    size: Size | None = Size(shortest_edge=336)
    do_center_crop: bool = True
    crop_size: Size | None = Size(height=336, width=336)
    # What the model's config.json says; the model unpads its features with these.
    model_vision_feature_select_strategy: str | None = None
    model_patch_size: int | None = None
    model_image_grid_pinpoints: Pinpoints | None = None

    @property
    def dropped(self) -> int:
        return 1 if self.vision_feature_select_strategy == "default" else 0


def _pinpoints(value: Any) -> Pinpoints | None:
    if not isinstance(value, (list, tuple)) or not value:
        return None
    try:
        return tuple((int(h), int(w)) for h, w in value)
    except (TypeError, ValueError):
        return None


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> LlavaNextSettings:
    pinpoints = _pinpoints(getattr(image_processor, "image_grid_pinpoints", None))
    if pinpoints is None:
        raise CountError("the image processor has no image_grid_pinpoints list of [height, width] pairs")
    return LlavaNextSettings(
        **processor_settings(processor_config, model_config),
        image_grid_pinpoints=pinpoints,
        do_resize=bool(getattr(image_processor, "do_resize", True)),
        size=Size.of(image_processor.size),
        do_center_crop=bool(getattr(image_processor, "do_center_crop", False)),
        crop_size=Size.of(getattr(image_processor, "crop_size", None)),
        model_image_grid_pinpoints=_pinpoints(model_config.get("image_grid_pinpoints")),
    )


def select_best_resolution(height: int, width: int, pinpoints: Pinpoints) -> tuple[int, int]:
    """transformers' select_best_resolution: most effective pixels, then least waste; first wins a tie."""
    best_fit = None
    max_effective = 0
    min_wasted = float("inf")
    for pin_h, pin_w in pinpoints:
        scale = min(pin_w / width, pin_h / height)
        downscaled_w, downscaled_h = int(width * scale), int(height * scale)
        effective = min(downscaled_w * downscaled_h, width * height)
        wasted = (pin_w * pin_h) - effective
        if effective > max_effective or (effective == max_effective and wasted < min_wasted):
            max_effective, min_wasted, best_fit = effective, wasted, (pin_h, pin_w)
    return best_fit


def patch_output_size(height: int, width: int, target: tuple[int, int]) -> tuple[int, int]:
    """transformers' get_patch_output_size: the aspect-preserving size inside the chosen resolution."""
    target_h, target_w = target
    scale_w, scale_h = target_w / width, target_h / height
    if scale_w < scale_h:
        return min(math.ceil(height * scale_w), target_h), target_w
    return target_h, min(math.ceil(width * scale_h), target_w)


def unpadded_features(
    height: int, width: int, patches_h: int, patches_w: int, scale_h: int, scale_w: int
) -> tuple[int, int]:
    """LlavaNextProcessor._get_unpadded_features as (rows, cols): the round(..., 7) is transformers'."""
    current_h, current_w = patches_h * scale_h, patches_w * scale_w
    if current_h == 0:
        raise CountError("the chosen resolution is smaller than one processed patch (division by zero)")
    if width / height > current_w / current_h:
        new_h = int(round(height * (current_w / width), 7))
        current_h -= ((current_h - new_h) // 2) * 2
    else:
        new_w = int(round(width * (current_h / height), 7))
        current_w -= ((current_w - new_w) // 2) * 2
    return current_h, current_w


def _processed(height: int, width: int, settings: LlavaNextSettings) -> tuple[int, int]:
    """A patch's size after the per-patch resize and center crop."""
    if settings.do_resize:
        height, width = resize_output(height, width, settings.size)
    if settings.do_center_crop:
        crop = settings.crop_size
        if crop is None or not crop.height or not crop.width:
            raise CountError(f"center crop needs crop_size height and width, got {crop}")
        height, width = crop.height, crop.width
    if height <= 0 or width <= 0:
        raise CountError(f"the image processor would resize a patch to {width}x{height}")
    return height, width


def base_patch(settings: LlavaNextSettings) -> tuple[int, int]:
    """pixel_values[0][0]'s size: the whole image resized to size (height/width or a shortest_edge square)."""
    size = settings.size
    if size is not None and size.height and size.width:
        start = (size.height, size.width)
    elif size is not None and size.shortest_edge:
        start = (size.shortest_edge, size.shortest_edge)
    else:
        raise CountError(f"the image processor's size {size} has neither height/width nor shortest_edge")
    return _processed(*start, settings)


def tile_edge(settings: LlavaNextSettings) -> int:
    """The edge the padded image is cut into: crop_size.height, else size.height, else size.shortest_edge."""
    crop, size = settings.crop_size, settings.size
    if crop is not None and crop.height:
        return crop.height
    if size is not None and size.height:
        return size.height
    return size.shortest_edge if size is not None and size.shortest_edge else 0


def _check_tiles(best: tuple[int, int], base: tuple[int, int], settings: LlavaNextSettings) -> None:
    """Every tile must process to the base patch's size, or numpy cannot stack them (ValueError)."""
    edge = tile_edge(settings)
    if edge <= 0:
        raise CountError("no tile size (crop_size.height / size.height / size.shortest_edge)")

    def pieces(extent: int) -> set[int]:
        return ({edge} if extent >= edge else set()) | ({extent % edge} if extent % edge else set())

    for tile_h in pieces(best[0]):
        for tile_w in pieces(best[1]):
            if _processed(tile_h, tile_w, settings) != base:
                raise CountError(
                    f"tiles of {tile_w}x{tile_h} process to a different size than the {base[1]}x{base[0]} base "
                    "patch; the image processor cannot stack them"
                )


def features(height: int, width: int, patch_h: int, patch_w: int, settings: LlavaNextSettings) -> ImageCount:
    """LlavaNextProcessor.replace_image_token for an image of height x width and a processed patch size."""
    best = select_best_resolution(height, width, settings.image_grid_pinpoints)
    if best is None:
        raise CountError("image_grid_pinpoints is empty")
    scale_h, scale_w = best[0] // patch_h, best[1] // patch_w
    grid_h, grid_w = patch_h // settings.patch_size, patch_w // settings.patch_size
    rows, cols = unpadded_features(height, width, grid_h, grid_w, scale_h, scale_w)
    tokens = rows * cols + rows + grid_h * grid_w + settings.num_additional_image_tokens - settings.dropped
    resized_h, resized_w = patch_output_size(height, width, best)
    return ImageCount(resized_h, resized_w, (scale_h, scale_w, rows, cols), tokens)


def count(height: int, width: int, settings: LlavaNextSettings, images_in_row: int = 1) -> ImageCount:
    """Header-only: grid = (tile rows, tile cols, unpadded feature rows, cols); resized = the image inside
    the chosen resolution before padding."""
    if height <= 0 or width <= 0:
        raise CountError(f"{width}x{height} image")
    base = base_patch(settings)
    best = select_best_resolution(height, width, settings.image_grid_pinpoints)
    if best is None:
        raise CountError("image_grid_pinpoints is empty")
    _check_tiles(best, base, settings)
    return features(height, width, *base, settings)


def count_exact(image_processor: Any, images: list[Any], settings: LlavaNextSettings) -> list[ImageCount]:
    """Run the real image processor; count from its image_sizes and pixel_values[0][0], as the processor does."""
    try:
        output = image_processor(images=images)
    except ValueError as exc:
        raise CountError(str(exc)) from None
    patch_h, patch_w = (int(v) for v in output["pixel_values"][0][0].shape[-2:])
    return [
        features(int(size[0]), int(size[1]), patch_h, patch_w, settings) for size in output["image_sizes"]
    ]


def expand(count: ImageCount, settings: LlavaNextSettings) -> Expansion:
    """`<image>` repeated for unpadded features, row newlines and the base image alike."""
    return (Run(PLACEHOLDER, count.tokens),)


def trainer_template(pipeline: str, model: Any) -> str | None:
    """LLaMA-Factory's llava_next_mistral for a Mistral chat template ([INST]), else llava_next."""
    del pipeline
    return "llava_next_mistral" if "[INST]" in (model.chat_template or "") else "llava_next"


FAMILY = Family.define(
    __name__, name="llava-next", title="LLaVA-NeXT (LLaVA-1.6)",
    processor_classes=("LlavaNextProcessor",), image_processor_types=image_processor_types("LlavaNext"),
    placeholder=PLACEHOLDER,
    size_knob=no_knob(
        "no image-size knob: image tokens per image are fixed by the grid pinpoints "
        "(image_grid_pinpoints); only the max length is recommended"
    ),
    trainer_templates={"llamafactory": ("llava_next", "llava_next_mistral")},
    choose_trainer_template=trainer_template,
)  # fmt: skip
