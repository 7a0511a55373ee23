"""Command A Vision (Cohere2 Vision): 512-px tiles on the best-fitting canvas plus a thumbnail, 256 tokens each.

Processor (transformers 5.24 `Cohere2VisionProcessor.replace_image_token`): each image token (the tokenizer's
`image_token`, "<|IMG_PATCH|>", which the chat template writes once per image) becomes

    boi_token + (image_token x patch_size**2 + img_line_break_token) x num_patches + eoi_token

("<|START_OF_IMG|>" ... "<|IMG_LINE_BREAK|>" ... "<|END_OF_IMG|>"), patch_size being the image processor's
(16: 256 tokens per tile) and num_patches its output per image. The four tokens are the tokenizer's
attributes: a tokenizer without them cannot build the processor.

Image processor (`Cohere2VisionImageProcessor`, torchvision only: no PIL backend): with crop_to_patches,
`get_optimal_tiled_canvas` takes every (columns, rows) with columns * rows <= max_patches (min_patches is
not used), sorted by columns * rows (stable), the scale min(columns * tile / width, rows * tile / height)
in numpy float64; if every scale is below 1 the first largest wins, else the first smallest of those at
least 1. The image is resized to that canvas and cut into tiles, plus a thumbnail (the image resized to
one tile) when there is more than one: num_patches = columns * rows (+ 1). Without crop_to_patches
num_patches is 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
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
    positive_int,
)
from vlmlint.models.gemma4 import tokenizer_token

PLACEHOLDER = "<|IMG_PATCH|>"
BOI, EOI, LINE_BREAK = "<|START_OF_IMG|>", "<|END_OF_IMG|>", "<|IMG_LINE_BREAK|>"
# Cohere2VisionImageProcessor's class attributes in transformers 5.24.
DEFAULTS: dict[str, Any] = {
    "size": {"height": 512, "width": 512},
    "crop_to_patches": True,
    "min_patches": 1,
    "max_patches": 12,
    "patch_size": 16,
    "do_resize": True,
}
# The image settings ProcessorMixin._merge_kwargs lets tokenizer_config.json override (patch_size is read
# by the processor from the image processor object, so it is not among them).
IMAGE_KWARGS = ("size", "crop_to_patches", "min_patches", "max_patches", "do_resize")
NEEDS_TORCHVISION = (
    "--verify for cohere2_vision needs torch and torchvision (pip install torch torchvision); the formula is "
    "proven against the recorded outputs in fixtures/reference/cohere2_vision.json"
)


@dataclass(frozen=True)
class Cohere2VisionSettings:
    tile_size: int = 512  # size.height == size.width
    crop_to_patches: bool = True
    min_patches: int = 1
    max_patches: int = 12
    patch_size: int = 16  # tokens per tile side: patch_size**2 image tokens per tile
    do_resize: bool = True
    image_token: str = PLACEHOLDER
    boi_token: str = BOI
    eoi_token: str = EOI
    img_line_break_token: str = LINE_BREAK
    placeholder: str = PLACEHOLDER

    def images_kwargs(self) -> dict[str, Any]:
        """What the processor passes its image processor (so count_exact runs the same pipeline)."""
        return {
            "size": {"height": self.tile_size, "width": self.tile_size},
            "crop_to_patches": self.crop_to_patches,
            "min_patches": self.min_patches,
            "max_patches": self.max_patches,
            "do_resize": self.do_resize,
        }


def _size_side(size: Any, key: str) -> Any:
    return size.get(key) if isinstance(size, dict) else getattr(size, key, None)


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> Cohere2VisionSettings:
    """The images kwargs `processor(text, images)` ends up with, and the tokenizer's image tokens."""
    tokenizer_kwargs = processor_config.get("tokenizer_init_kwargs") or {}

    def own(key: str) -> Any:
        if isinstance(image_processor, dict):  # no torchvision: the raw preprocessor_config.json
            value = image_processor.get(key)
        else:
            value = getattr(image_processor, key, None)
        return DEFAULTS[key] if value is None else value

    def pipeline(key: str) -> Any:
        if tokenizer_kwargs.get(key) is not None:  # _merge_kwargs: tokenizer init kwargs first
            return tokenizer_kwargs[key]
        return own(key)

    tokens = {
        name: tokenizer_token(tokenizer_kwargs, name, None)
        for name in ("boi_token", "eoi_token", "img_line_break_token")
    }
    tokens["image_token"] = processor_config.get("tokenizer_image_token") or tokenizer_token(
        tokenizer_kwargs, "image_token", None
    )
    missing = [name for name, value in tokens.items() if not value]
    if missing:
        raise CountError(
            f"the tokenizer has no {', '.join(missing)}: Cohere2VisionProcessor reads "
            "tokenizer.boi_token / eoi_token / image_token / img_line_break_token and cannot be built without them"
        )
    size = pipeline("size")
    height, width = _size_side(size, "height"), _size_side(size, "width")
    if height is None or height != width:
        raise CountError(f"Cohere2 Vision's tiles must be square (size height == width), got {size}")
    return Cohere2VisionSettings(
        tile_size=positive_int(height, "size.height"),
        crop_to_patches=bool(pipeline("crop_to_patches")),
        min_patches=positive_int(pipeline("min_patches"), "min_patches"),
        max_patches=positive_int(pipeline("max_patches"), "max_patches"),
        patch_size=positive_int(own("patch_size"), "patch_size"),
        do_resize=bool(pipeline("do_resize")),
        image_token=str(tokens["image_token"]),
        boi_token=str(tokens["boi_token"]),
        eoi_token=str(tokens["eoi_token"]),
        img_line_break_token=str(tokens["img_line_break_token"]),
        placeholder=str(tokens["image_token"]),
    )


@cache
def supported_grids(max_tiles: int) -> tuple[tuple[int, int], ...]:
    """`get_all_supported_aspect_ratios` (columns, rows), sorted by columns * rows as the canvas search does."""
    grids = [(w, h) for w in range(1, max_tiles + 1) for h in range(1, max_tiles + 1) if w * h <= max_tiles]
    return tuple(sorted(grids, key=lambda x: x[0] * x[1]))


def optimal_canvas(height: int, width: int, s: Cohere2VisionSettings) -> tuple[int, int]:
    """(columns, rows): `get_optimal_tiled_canvas` (numpy float64, first best on ties)."""
    grids = supported_grids(s.max_patches)
    scales = [min(cols * s.tile_size / width, rows * s.tile_size / height) for cols, rows in grids]
    if all(scale < 1 for scale in scales):
        return grids[scales.index(max(scales))]
    upscales = [10e9 if scale < 1.0 else scale for scale in scales]
    return grids[upscales.index(min(upscales))]


def num_patches(rows: int, cols: int) -> int:
    return rows * cols + 1 if rows * cols > 1 else 1


def count(height: int, width: int, settings: Cohere2VisionSettings, images_in_row: int = 1) -> ImageCount:
    """resized = the tile canvas; grid = (rows, columns); tokens = image_token ids (patch_size**2 per tile)."""
    s = settings
    if height < 1 or width < 1:
        raise CountError(f"image of {width}x{height} pixels")
    if s.crop_to_patches:
        cols, rows = optimal_canvas(height, width, s)
    else:
        cols = rows = 1
    if s.crop_to_patches or s.do_resize:
        resized_h, resized_w = rows * s.tile_size, cols * s.tile_size
    else:
        resized_h, resized_w = height, width
    return ImageCount(resized_h, resized_w, (rows, cols), num_patches(rows, cols) * s.patch_size**2)


def count_exact(image_processor: Any, images: list[Any], settings: Cohere2VisionSettings) -> list[ImageCount]:
    """The real image processor's num_patches (needs torchvision)."""
    if isinstance(image_processor, dict):
        raise CountError(NEEDS_TORCHVISION)
    try:
        output = image_processor(images=images, **settings.images_kwargs())
    except (ValueError, RuntimeError) as exc:
        raise CountError(str(exc)) from None
    counts = []
    for image, n in zip(images, output["num_patches"], strict=True):
        formula = count(image.height, image.width, settings)  # the grid is not in the output
        tokens = int(n) * settings.patch_size**2  # where it differs from the formula's, --verify says so
        counts.append(ImageCount(formula.resized_height, formula.resized_width, formula.grid, tokens))
    return counts


def expand(count: ImageCount, settings: Cohere2VisionSettings) -> Expansion:
    """`Cohere2VisionProcessor.replace_image_token`."""
    s = settings
    segments: list[Segment] = [s.boi_token]
    for _ in range(count.tokens // s.patch_size**2):
        segments += [Run(s.image_token, s.patch_size**2), s.img_line_break_token]
    segments.append(s.eoi_token)
    return tuple(segments)


FAMILY = Family.define(
    __name__, name="cohere2_vision", title="Command A Vision (Cohere2 Vision)",
    processor_classes=("Cohere2VisionProcessor",), image_processor_types=image_processor_types("Cohere2Vision"),
    placeholder=PLACEHOLDER, marker_tokens=(BOI, EOI, LINE_BREAK), needs_torchvision=True,
    size_knob=no_knob(
        "max_patches bounds the tiles per image, but the canvas it picks is not monotone in it and "
        "vlmlint stats does not search it yet; only the max length is recommended"
    ),
)  # fmt: skip
