"""DeepSeek-OCR-2: a padded 1024-px global view (256 tokens) plus 768-px local tiles (144 each) and a separator.

Processor (transformers 5.24 `DeepseekOcr2Processor.replace_image_token`): each image token (the tokenizer's
`image_token`, else "<image>") becomes `image_token * num_tokens`,

    num_tokens = ceil(size.height / patch_size / downsample_ratio)**2            (1024 / 16 / 4: 256, the global view)
               + ceil(tile_size / patch_size / downsample_ratio)**2 * num_crops  (768 / 16 / 4: 144 per tile)
               + 1                                                           (the view separator)

with patch_size 16 and downsample_ratio 4 (processor_config.json over `__init__`'s defaults). Nothing else is
written: no start/end/break tokens, no text around it.

Which image settings the call uses (`ProcessorMixin._merge_kwargs`): the processor's own `images_kwargs` class
attribute (crop_to_patches true, min_patches 2, max_patches 6) is passed to the image processor on every call, so
it wins over preprocessor_config.json's values of those three keys; the tokenizer's init kwargs win over both. The
image processor's size and tile_size come from its files.

Image processor (`DeepseekOcr2ImageProcessorPil._preprocess`, the same in the torchvision backend): with
crop_to_patches and max(width, height) > tile_size, `get_optimal_tiled_canvas` picks the (columns, rows) with
min_patches <= columns * rows <= max_patches (sorted by columns * rows) whose columns / rows is closest to width /
height (on a tie the later grid while the image is larger than half its canvas), and the image is resized to that
grid of tiles: num_crops = columns * rows, else 0. The global view is the image scaled to size.height (tile_size
without crop_to_patches) on its longer side, each side `round()`ed (half to even), then padded to a square; a side
that rounds to 0 px cannot be resized (PIL refuses it), so the processor refuses such an image.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Any

from vlmlint.models.base import (
    CountError,
    Expansion,
    Family,
    ImageCount,
    Run,
    image_processor_types,
    no_knob,
    positive_int,
)
from vlmlint.models.gemma4 import tokenizer_token

PLACEHOLDER = "<image>"
# DeepseekOcr2Processor.images_kwargs: passed on every call, over the image processor's own values.
PROCESSOR_IMAGES_KWARGS: dict[str, Any] = {"crop_to_patches": True, "min_patches": 2, "max_patches": 6}
# DeepseekOcr2ImageProcessorPil's class attributes in transformers 5.24.
DEFAULTS: dict[str, Any] = {"size": {"height": 1024, "width": 1024}, "tile_size": 768}
IMAGE_KWARGS = ("size", "tile_size", "crop_to_patches", "min_patches", "max_patches")


@dataclass(frozen=True)
class DeepseekOcr2Settings:
    global_size: int = 1024  # size.height
    tile_size: int = 768
    crop_to_patches: bool = True
    min_patches: int = 2
    max_patches: int = 6
    patch_size: int = 16  # the processor's
    downsample_ratio: int = 4
    image_token: str = PLACEHOLDER
    placeholder: str = PLACEHOLDER

    @property
    def global_tokens(self) -> int:
        return math.ceil(self.global_size / self.patch_size / self.downsample_ratio) ** 2

    @property
    def local_tokens(self) -> int:
        return math.ceil(self.tile_size / self.patch_size / self.downsample_ratio) ** 2

    def images_kwargs(self) -> dict[str, Any]:
        """What the processor passes its image processor (so count_exact runs the same pipeline)."""
        return {
            "crop_to_patches": self.crop_to_patches,
            "min_patches": self.min_patches,
            "max_patches": self.max_patches,
            "tile_size": self.tile_size,
        }


def _size_height(size: Any) -> Any:
    return size.get("height") if isinstance(size, dict) else getattr(size, "height", None)


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> DeepseekOcr2Settings:
    """The images kwargs `processor(text, images)` ends up with, and the processor's own settings."""
    tokenizer_kwargs = processor_config.get("tokenizer_init_kwargs") or {}

    def pipeline(key: str) -> Any:
        if tokenizer_kwargs.get(key) is not None:  # _merge_kwargs: tokenizer init kwargs first
            return tokenizer_kwargs[key]
        if key in PROCESSOR_IMAGES_KWARGS:  # then the processor's images_kwargs class attribute
            return PROCESSOR_IMAGES_KWARGS[key]
        value = getattr(image_processor, key, None)  # the image processor's own settings
        return DEFAULTS[key] if value is None else value

    size = pipeline("size")
    height = _size_height(size)
    image_token = processor_config.get("tokenizer_image_token") or tokenizer_token(
        tokenizer_kwargs, "image_token", PLACEHOLDER
    )
    return DeepseekOcr2Settings(
        global_size=positive_int(height, "size.height"),
        tile_size=positive_int(pipeline("tile_size"), "tile_size"),
        crop_to_patches=bool(pipeline("crop_to_patches")),
        min_patches=positive_int(pipeline("min_patches"), "min_patches", 0),
        max_patches=positive_int(pipeline("max_patches"), "max_patches"),
        patch_size=positive_int(processor_config.get("patch_size", 16), "patch_size"),
        downsample_ratio=positive_int(processor_config.get("downsample_ratio", 4), "downsample_ratio"),
        image_token=str(image_token),
        placeholder=str(image_token),
    )


@cache
def supported_grids(min_tiles: int, max_tiles: int) -> tuple[tuple[int, int], ...]:
    """`get_all_supported_aspect_ratios` (columns, rows), sorted by columns * rows."""
    grids = [
        (w, h)
        for w in range(1, max_tiles + 1)
        for h in range(1, max_tiles + 1)
        if min_tiles <= w * h <= max_tiles
    ]
    return tuple(sorted(grids, key=lambda x: x[0] * x[1]))


def optimal_canvas(height: int, width: int, s: DeepseekOcr2Settings) -> tuple[int, int]:
    """(columns, rows): `get_optimal_tiled_canvas` (closest aspect ratio; ties to the later while the image
    is larger than half the canvas)."""
    aspect_ratio = width / height
    area = width * height
    best_diff = float("inf")
    best = (1, 1)
    for grid in supported_grids(s.min_patches, s.max_patches):
        diff = abs(aspect_ratio - grid[0] / grid[1])
        if diff < best_diff:
            best_diff, best = diff, grid
        elif diff == best_diff:
            if area > 0.5 * s.tile_size * s.tile_size * grid[0] * grid[1]:
                best = grid
    return best


def global_view(height: int, width: int, s: DeepseekOcr2Settings) -> tuple[int, int]:
    """(height, width) of the global view before its square padding."""
    target = s.global_size if s.crop_to_patches else s.tile_size
    scale = target / max(width, height)
    return round(height * scale), round(width * scale)


def count(height: int, width: int, settings: DeepseekOcr2Settings, images_in_row: int = 1) -> ImageCount:
    """resized = the tile canvas (with crops) or the global view; grid = (rows, columns), (0, 0) without crops;
    tokens = image_token ids."""
    s = settings
    if height < 1 or width < 1:
        raise CountError(f"image of {width}x{height} pixels")
    view_h, view_w = global_view(height, width, s)
    if view_h < 1 or view_w < 1:
        # the image processor's resize refuses the empty SizeDict with this message
        raise CountError(
            f"the {width}x{height} image's global view rounds to {view_w}x{view_h} px: Size must contain "
            "'height' and 'width' keys, or 'max_height' and 'max_width', or 'shortest_edge' key. Got "
            f"SizeDict(height={view_h}, width={view_w}, longest_edge=None, shortest_edge=None, max_height=None, "
            "max_width=None, min_pixels=None, max_pixels=None)."
        )
    if s.crop_to_patches and max(width, height) > s.tile_size:
        cols, rows = optimal_canvas(height, width, s)
        resized = (rows * s.tile_size, cols * s.tile_size)
    else:
        cols = rows = 0
        resized = (view_h, view_w)
    tokens = s.global_tokens + s.local_tokens * cols * rows + 1
    return ImageCount(resized[0], resized[1], (rows, cols), tokens)


def count_exact(image_processor: Any, images: list[Any], settings: DeepseekOcr2Settings) -> list[ImageCount]:
    """The real image processor's num_local_patches, on decoded pixels."""
    counts = []
    for image in images:
        try:
            output = image_processor(images=[image], **settings.images_kwargs())
        except (ValueError, RuntimeError) as exc:
            raise CountError(str(exc)) from None
        crops = int(output["num_local_patches"][0])
        formula = count(image.height, image.width, settings)  # the grid itself is not in the output
        tokens = settings.global_tokens + settings.local_tokens * crops + 1
        counts.append(ImageCount(formula.resized_height, formula.resized_width, formula.grid, tokens))
    return counts


def expand(count: ImageCount, settings: DeepseekOcr2Settings) -> Expansion:
    return (Run(settings.image_token, count.tokens),)


FAMILY = Family.define(
    __name__, name="deepseek_ocr2", title="DeepSeek-OCR-2", processor_classes=("DeepseekOcr2Processor",),
    image_processor_types=image_processor_types("DeepseekOcr2"), placeholder=PLACEHOLDER,
    size_knob=no_knob(
        "max_patches bounds the local tiles per image, but the grid is picked by aspect ratio, not size, "
        "so the count is not monotone in it; only the max length is recommended"
    ),
)  # fmt: skip
