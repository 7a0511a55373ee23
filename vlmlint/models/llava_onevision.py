"""LLaVA-OneVision: NeXT-style anyres with a 27x27 SigLIP base and the anyres_max_9 reduction.

Processor (transformers 5.x `LlavaOnevisionProcessor.replace_image_token`): each `<image>` becomes
N copies of itself. What N is depends on the row, because the image processor gets the row's images
as one nested list (`apply_chat_template` and TRL's collators pass `images=[[img, ...]]`) and returns
`batch_num_images`:
- a row with ONE image: anyres. N = unpadded feature grid (reduced to about max_num_patches * 27^2 when
  larger) + one newline per grid row + 729 for the base view;
- a row with SEVERAL images: no anyres; each image is padded to a square and resized to one 384x384
  view, N = num_image_tokens + 1 (newline) = 730 per image.
"default" feature selection (not used by the hub checkpoints) subtracts one from either.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from vlmlint.models.base import CountError, Expansion, Family, ImageCount, Run, image_processor_types, no_knob
from vlmlint.models.llava_next import select_best_resolution  # the same pinpoint choice

PLACEHOLDER = "<image>"


@dataclass(frozen=True)
class OnevisionSettings:
    image_grid_pinpoints: tuple[tuple[int, int], ...]  # (height, width) canvases the image may fill
    view_height: int  # one processed view, pixel_values[0][0].shape[-2:], which the processor divides by
    view_width: int
    tile_size: int  # what the image processor cuts the canvas into (crop_size, else size)
    num_image_tokens: int  # features of one view: 729 = 27*27 for SigLIP 384/14
    vision_feature_select_strategy: str | None = "full"
    vision_aspect_ratio: str = "anyres_max_9"


def _size_pair(size: Any) -> tuple[int, int] | None:
    height = getattr(size, "height", None)
    width = getattr(size, "width", None)
    if height and width:
        return int(height), int(width)
    edge = getattr(size, "shortest_edge", None)
    return (int(edge), int(edge)) if edge else None


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> OnevisionSettings:
    """Pinpoints and view size from the image processor; token counts from the processor's own config."""
    del model_config  # the processor counts from its own settings; the model's may disagree (see docs)
    view = _size_pair(getattr(image_processor, "size", None))
    if view is None:
        raise CountError(f"size must hold height/width or shortest_edge, got {image_processor.size}")
    crop = _size_pair(getattr(image_processor, "crop_size", None))
    crop_height = getattr(getattr(image_processor, "crop_size", None), "height", None)
    tile_size = int(crop_height) if crop_height else view[0]  # the image processor's patch_size
    if getattr(image_processor, "do_center_crop", None) and crop is not None:
        view = crop  # every view is center-cropped to crop_size before the processor reads its shape
    pinpoints = getattr(image_processor, "image_grid_pinpoints", None)
    if not pinpoints:
        raise CountError("image_grid_pinpoints is empty: the processor cannot choose an anyres canvas")
    num_image_tokens = processor_config.get("num_image_tokens")
    if not isinstance(num_image_tokens, int) or num_image_tokens <= 0:
        raise CountError(
            "processor_config.json has no num_image_tokens; LlavaOnevisionProcessor cannot count image tokens"
        )
    return OnevisionSettings(
        image_grid_pinpoints=tuple((int(h), int(w)) for h, w in pinpoints),
        view_height=view[0],
        view_width=view[1],
        tile_size=tile_size,
        num_image_tokens=num_image_tokens,
        vision_feature_select_strategy=processor_config.get("vision_feature_select_strategy"),
        vision_aspect_ratio=str(processor_config.get("vision_aspect_ratio") or "anyres_max_9"),
    )


def _patch_output_size(height: int, width: int, target: tuple[int, int]) -> tuple[int, int]:
    """transformers' get_patch_output_size: the image fitted inside the canvas before padding."""
    target_height, target_width = target
    scale_w = target_width / width
    scale_h = target_height / height
    if scale_w < scale_h:
        return min(math.ceil(height * scale_w), target_height), target_width
    return target_height, min(math.ceil(width * scale_h), target_width)


def _max_num_patches(vision_aspect_ratio: str) -> int:
    try:
        # A strip of characters, not of a prefix: exactly what the processor does.
        return int(vision_aspect_ratio.strip("anyres_max_"))  # noqa: B005
    except ValueError:
        raise CountError(
            f"vision_aspect_ratio {vision_aspect_ratio!r} has no anyres_max_<N>: the processor fails on it"
        ) from None


def unpadded_features(
    height: int, width: int, patches: int, scale_height: int, scale_width: int, max_num_patches: int
) -> tuple[int, int]:
    """The processor's _get_unpadded_features, same float expressions: (features, newlines)."""
    current_height = patches * scale_height
    current_width = patches * scale_width
    original_aspect_ratio = width / height
    current_aspect_ratio = current_width / current_height
    if original_aspect_ratio > current_aspect_ratio:
        new_height = int(round(height * (current_width / width), 7))
        padding = (current_height - new_height) // 2
        current_height -= padding * 2
    else:
        new_width = int(round(width * (current_height / height), 7))
        padding = (current_width - new_width) // 2
        current_width -= padding * 2
    features = current_height * current_width
    newlines = current_height
    ratio = math.sqrt(current_height * current_width / (max_num_patches * patches**2))
    if ratio > 1.1:
        features = int(current_height // ratio) * int(current_width // ratio)
        newlines = int(current_height // ratio)
    return features, newlines


def _tokens(settings: OnevisionSettings, base: int) -> int:
    return base - 1 if settings.vision_feature_select_strategy == "default" else base


def _single(height: int, width: int, settings: OnevisionSettings) -> ImageCount:
    best = select_best_resolution(height, width, settings.image_grid_pinpoints)
    scale_height, scale_width = best[0] // settings.view_height, best[1] // settings.view_width
    patches = int(math.sqrt(settings.num_image_tokens))
    features, newlines = unpadded_features(
        height, width, patches, scale_height, scale_width, _max_num_patches(settings.vision_aspect_ratio)
    )
    resized_height, resized_width = _patch_output_size(height, width, best)
    grid = (math.ceil(best[0] / settings.tile_size), math.ceil(best[1] / settings.tile_size))
    tokens = _tokens(settings, features + newlines + settings.num_image_tokens)
    return ImageCount(resized_height, resized_width, grid, tokens)


def _multi(settings: OnevisionSettings) -> ImageCount:
    """One padded-square view per image, no anyres tiles (grid (0, 0)): 729 + 1 newline."""
    return ImageCount(
        settings.view_height, settings.view_width, (0, 0), _tokens(settings, settings.num_image_tokens + 1)
    )


def count(height: int, width: int, settings: OnevisionSettings, images_in_row: int = 1) -> ImageCount:
    """Anyres for the only image of a row; a fixed 730 per image when the row holds several."""
    if height <= 0 or width <= 0:
        raise CountError(f"image size {width}x{height} is empty")
    if images_in_row != 1:
        return _multi(settings)
    return _single(height, width, settings)


def count_exact(image_processor: Any, images: list[Any], settings: OnevisionSettings) -> list[ImageCount]:
    """The real image processor on the row's images, passed together as one sample (nested list)."""
    if not images:
        return []
    try:
        output = image_processor(images=[list(images)])
    except ValueError as exc:
        raise CountError(str(exc)) from None
    batch_num_images = [int(n) for n in output["batch_num_images"]]
    view_height, view_width = (int(v) for v in output["pixel_values"][0][0].shape[-2:])
    view = OnevisionSettings(
        settings.image_grid_pinpoints,
        view_height,
        view_width,
        settings.tile_size,
        settings.num_image_tokens,
        settings.vision_feature_select_strategy,
        settings.vision_aspect_ratio,
    )
    counts = []
    for image_size, views in zip(output["image_sizes"], output["pixel_values"], strict=True):
        height, width = (int(v) for v in image_size)
        if batch_num_images != [1]:
            counts.append(_multi(view))
            continue
        single = _single(height, width, view)
        rows, cols = single.grid
        if len(views) != 1 + rows * cols:  # the image processor cut another number of tiles
            raise CountError(f"{width}x{height}: {len(views) - 1} anyres tiles, expected {rows}x{cols}")
        counts.append(single)
    return counts


def expand(count: ImageCount, settings: OnevisionSettings) -> Expansion:
    """`<image>` repeated once per feature; newline and base features are `<image>` ids too."""
    return (Run(PLACEHOLDER, count.tokens),)


FAMILY = Family.define(
    __name__, name="llava-onevision", title="LLaVA-OneVision",
    processor_classes=("LlavaOnevisionProcessor",),
    image_processor_types=image_processor_types("LlavaOnevision"), placeholder=PLACEHOLDER,
    raw_image_prompt="<image>\n",
    size_knob=no_knob(
        "no image-size knob: image tokens per image are fixed by the grid pinpoints "
        "(image_grid_pinpoints); only the max length is recommended"
    ),
)  # fmt: skip
