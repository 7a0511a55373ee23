"""LFM2-VL: a smart resize to multiples of 32 px, or 512-px tiles plus a thumbnail for a large image.

Processor (transformers 5.24 `Lfm2VlProcessor`): each image token (the tokenizer's `image_token`, "<image>")
becomes `_build_image_tokens(rows, cols, tokens_per_tile, tokens_for_image, use_thumbnail,
use_image_special_tokens)`:

    <|image_start|>
      one tile:   <image> x tokens_for_image
      tiles:      for each row r, col c: <|img_row_r_col_c|> <image> x tokens_per_tile
                  then (use_thumbnail) <|img_thumbnail|> <image> x tokens_for_image
    <|image_end|>

(the start/end, row/col and thumbnail markers only with use_image_special_tokens; start, end and thumbnail
are the tokenizer's image_start_token / image_end_token / image_thumbnail_token where it names them).
tokens_per_tile = ceil((tile_size // encoder_patch_size) / downsample_factor)**2 (256);
tokens_for_image = ceil((h // encoder_patch_size) / downsample_factor) * ceil((w // ...) / ...) on the
smart-resized size (image_sizes). The processor's text kwargs default to add_special_tokens=False: the
tokenizer adds no BOS (the chat template writes it).

Image processor (`Lfm2VlImageProcessor`, torchvision only: no PIL backend), `resize_and_split`, all Python
floats: `smart_resize` rounds each side (round half to even) to multiples of encoder_patch_size *
downsample_factor (32 px, at least one), then scales into [min_image_tokens, max_image_tokens] * 32**2
pixels (sqrt factor, floor down / ceil up); `_is_image_too_large` (the rounded sides, at least 16, over
max_image_tokens * 32**2 * max_pixels_tolerance) with splitting on (do_image_splitting, and not min_tiles
== max_tiles == 1) tiles the image: `find_closest_aspect_ratio` over the (w, h) grids with min_tiles <=
w * h <= max_tiles (ties: the later one when the image is larger than half its canvas), resized to the
grid of tile_size tiles, plus a thumbnail at the smart-resized size when use_thumbnail and more than one
tile. Refused as the real one refuses: min_tiles > max_tiles with splitting on; an image whose
thumbnail has more patches than a tile's padded length (torch.stack of its crops fails), or, in a row of
several images, an image with more than max_num_patches patches (torch.cat of the row fails; with
do_pad off a row of images of different patch counts fails the same way, which vlmlint does not check).
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
    Segment,
    image_processor_types,
    no_knob,
    positive_int,
)
from vlmlint.models.gemma4 import tokenizer_token

PLACEHOLDER = "<image>"
START, END, THUMBNAIL = "<|image_start|>", "<|image_end|>", "<|img_thumbnail|>"
# Lfm2VlImageProcessor's class attributes in transformers 5.24.
DEFAULTS: dict[str, Any] = {
    "downsample_factor": 2,
    "do_image_splitting": True,
    "min_tiles": 2,
    "max_tiles": 10,
    "use_thumbnail": True,
    "min_image_tokens": 64,
    "max_image_tokens": 256,
    "encoder_patch_size": 16,
    "tile_size": 512,
    "max_pixels_tolerance": 2.0,
    "do_pad": True,
}
NEEDS_TORCHVISION = (
    "--verify for lfm2_vl needs torch and torchvision (pip install torch torchvision); the formula is "
    "proven against the recorded outputs in fixtures/reference/lfm2_vl.json"
)


@dataclass(frozen=True)
class Lfm2VlSettings:
    downsample_factor: int = 2
    do_image_splitting: bool = True
    min_tiles: int = 2
    max_tiles: int = 10
    use_thumbnail: bool = True
    min_image_tokens: int = 64
    max_image_tokens: int = 256
    encoder_patch_size: int = 16
    tile_size: int = 512
    max_pixels_tolerance: float = 2.0
    do_pad: bool = True
    use_image_special_tokens: bool = True
    image_token: str = PLACEHOLDER
    image_start_token: str = START
    image_end_token: str = END
    image_thumbnail_token: str = THUMBNAIL
    placeholder: str = PLACEHOLDER

    @property
    def factor(self) -> int:
        return self.encoder_patch_size * self.downsample_factor

    @property
    def tokens_per_tile(self) -> int:
        return math.ceil((self.tile_size // self.encoder_patch_size) / self.downsample_factor) ** 2

    @property
    def max_num_patches(self) -> int:
        """`_preprocess`'s padded patch length."""
        tile_patches = (self.tile_size // self.encoder_patch_size) ** 2 if self.do_image_splitting else 0
        return max(self.max_image_tokens * self.downsample_factor**2, tile_patches)

    def images_kwargs(self) -> dict[str, Any]:
        """What the processor passes its image processor (so count_exact runs the same pipeline)."""
        keys = [k for k in DEFAULTS]
        return {k: getattr(self, k) for k in keys}


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> Lfm2VlSettings:
    """The images kwargs `processor(text, images)` ends up with, and the tokenizer's image tokens."""
    tokenizer_kwargs = processor_config.get("tokenizer_init_kwargs") or {}

    def pipeline(key: str) -> Any:
        if tokenizer_kwargs.get(key) is not None:  # _merge_kwargs: tokenizer init kwargs first
            return tokenizer_kwargs[key]
        if isinstance(image_processor, dict):  # no torchvision: the raw image processor config
            value = image_processor.get(key)
        else:
            value = getattr(image_processor, key, None)
        return DEFAULTS[key] if value is None else value

    tolerance = pipeline("max_pixels_tolerance")
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not math.isfinite(tolerance):
        raise CountError(f"max_pixels_tolerance must be a number, got {tolerance!r}")
    # Lfm2VlProcessor: use_image_special_tokens is a processor setting (processor_config.json, class
    # attribute True); the deprecated text-kwargs spelling (a tokenizer init kwarg) wins over it.
    special = tokenizer_kwargs.get("use_image_special_tokens")
    if special is None:
        special = processor_config.get("use_image_special_tokens", True)
    image_token = processor_config.get("tokenizer_image_token") or tokenizer_token(
        tokenizer_kwargs, "image_token", PLACEHOLDER
    )
    return Lfm2VlSettings(
        downsample_factor=positive_int(pipeline("downsample_factor"), "downsample_factor"),
        do_image_splitting=bool(pipeline("do_image_splitting")),
        min_tiles=positive_int(pipeline("min_tiles"), "min_tiles"),
        max_tiles=positive_int(pipeline("max_tiles"), "max_tiles"),
        use_thumbnail=bool(pipeline("use_thumbnail")),
        min_image_tokens=positive_int(pipeline("min_image_tokens"), "min_image_tokens"),
        max_image_tokens=positive_int(pipeline("max_image_tokens"), "max_image_tokens"),
        encoder_patch_size=positive_int(pipeline("encoder_patch_size"), "encoder_patch_size"),
        tile_size=positive_int(pipeline("tile_size"), "tile_size"),
        max_pixels_tolerance=float(tolerance),
        do_pad=bool(pipeline("do_pad")),
        use_image_special_tokens=bool(special),
        image_token=str(image_token),
        image_start_token=str(tokenizer_token(tokenizer_kwargs, "image_start_token", START)),
        image_end_token=str(tokenizer_token(tokenizer_kwargs, "image_end_token", END)),
        image_thumbnail_token=str(tokenizer_token(tokenizer_kwargs, "image_thumbnail_token", THUMBNAIL)),
        placeholder=str(image_token),
    )


def round_by_factor(number: float, factor: int) -> int:
    return round(number / factor) * factor  # Python's round: half to even


def smart_resize(height: int, width: int, s: Lfm2VlSettings) -> tuple[int, int]:
    """(height, width): `Lfm2VlImageProcessor.smart_resize` (which returns width first)."""
    total = s.factor
    min_pixels = s.min_image_tokens * s.encoder_patch_size**2 * s.downsample_factor**2
    max_pixels = s.max_image_tokens * s.encoder_patch_size**2 * s.downsample_factor**2
    h_bar = max(total, round_by_factor(height, total))
    w_bar = max(total, round_by_factor(width, total))
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(total, math.floor(height / beta / total) * total)
        w_bar = max(total, math.floor(width / beta / total) * total)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / total) * total
        w_bar = math.ceil(width * beta / total) * total
    return h_bar, w_bar


def is_image_too_large(height: int, width: int, s: Lfm2VlSettings) -> bool:
    total = s.factor
    h_bar = max(s.encoder_patch_size, round_by_factor(height, total))
    w_bar = max(s.encoder_patch_size, round_by_factor(width, total))
    limit = s.max_image_tokens * s.encoder_patch_size**2 * s.downsample_factor**2 * s.max_pixels_tolerance
    return h_bar * w_bar > limit


@cache
def target_ratios(min_tiles: int, max_tiles: int) -> tuple[tuple[int, int], ...]:
    """`Lfm2VlImageProcessor._target_ratios`: (w, h) grids, the same set and stable sort by w * h."""
    ratios = [
        (w, h)
        for n in range(min_tiles, max_tiles + 1)
        for w in range(1, n + 1)
        for h in range(1, n + 1)
        if min_tiles <= w * h <= max_tiles
    ]
    return tuple(sorted(set(ratios), key=lambda x: x[0] * x[1]))


def closest_aspect_ratio(
    height: int, width: int, s: Lfm2VlSettings, min_tiles: int, max_tiles: int
) -> tuple[int, int]:
    """(grid_w, grid_h): `find_closest_aspect_ratio` on width / height."""
    aspect_ratio = width / height
    best_diff = float("inf")
    best = (1, 1)
    area = width * height
    for ratio in target_ratios(min_tiles, max_tiles):
        diff = abs(aspect_ratio - ratio[0] / ratio[1])
        if diff < best_diff:
            best_diff, best = diff, ratio
        elif diff == best_diff:
            if area > 0.5 * (s.tile_size * s.tile_size * ratio[0] * ratio[1]):
                best = ratio
    return best


def _patches(side: int, s: Lfm2VlSettings) -> int:
    return math.ceil((side // s.encoder_patch_size) / s.downsample_factor)


def layout(height: int, width: int, s: Lfm2VlSettings) -> tuple[int, int, int, int]:
    """(rows, cols, image_h, image_w): image_rows, image_cols and image_sizes of `resize_and_split`."""
    min_tiles, max_tiles = (s.min_tiles, s.max_tiles) if s.do_image_splitting else (1, 1)
    if s.do_image_splitting and min_tiles > max_tiles:
        raise CountError("min_tiles must be less than or equal to max_tiles")
    new_h, new_w = smart_resize(height, width, s)
    if is_image_too_large(height, width, s) and not min_tiles == max_tiles == 1:
        cols, rows = closest_aspect_ratio(height, width, s, min_tiles, max_tiles)
        return rows, cols, new_h, new_w
    return 1, 1, new_h, new_w


def count(height: int, width: int, settings: Lfm2VlSettings, images_in_row: int = 1) -> ImageCount:
    """resized = the tile canvas (tiled) or the smart-resized size; grid = (rows, cols, image_h, image_w);
    tokens = <image> ids."""
    s = settings
    if height < 1 or width < 1:
        raise CountError(f"image of {width}x{height} pixels")
    rows, cols, new_h, new_w = layout(height, width, s)
    for_image = _patches(new_h, s) * _patches(new_w, s)
    patches = (new_h // s.encoder_patch_size) * (new_w // s.encoder_patch_size)  # of the resized image
    tiled = rows > 1 or cols > 1
    if tiled:
        tokens = rows * cols * s.tokens_per_tile + (for_image if s.use_thumbnail else 0)
        resized_h, resized_w = rows * s.tile_size, cols * s.tile_size
        tile_patches = (s.tile_size // s.encoder_patch_size) ** 2
        crop_length = max(tile_patches, s.max_num_patches) if s.do_pad else tile_patches
        if s.use_thumbnail and max(patches, s.max_num_patches if s.do_pad else 0) != crop_length:
            raise CountError(
                f"the {new_w}x{new_h} thumbnail of this {width}x{height} image has {patches} patches, its "
                f"{s.tile_size}-px tiles {crop_length}: Lfm2VlImageProcessor cannot stack them "
                "(torch.stack: stack expects each tensor to be equal size)"
            )
    else:
        tokens = for_image
        resized_h, resized_w = new_h, new_w
        if images_in_row > 1 and s.do_pad and patches > s.max_num_patches:
            raise CountError(
                f"this {width}x{height} image resizes to {new_w}x{new_h} ({patches} patches, over "
                f"max_num_patches {s.max_num_patches}): with other images in the row Lfm2VlImageProcessor's "
                "torch.cat of the padded patches fails (unless every image of the row has as many)"
            )
    return ImageCount(resized_h, resized_w, (rows, cols, new_h, new_w), tokens)


def count_exact(image_processor: Any, images: list[Any], settings: Lfm2VlSettings) -> list[ImageCount]:
    """The real image processor's image_rows / image_cols / image_sizes (needs torchvision)."""
    if isinstance(image_processor, dict):
        raise CountError(NEEDS_TORCHVISION)
    kwargs = {**settings.images_kwargs(), "return_row_col_info": True}
    try:
        output = image_processor(images=[[image] for image in images], **kwargs)
    except (ValueError, RuntimeError) as exc:
        raise CountError(str(exc)) from None
    counts = []
    if len(output["image_sizes"]) != len(images):
        raise CountError(
            f"the image processor gave {len(output['image_sizes'])} sizes for {len(images)} images"
        )
    for rows, cols, size in zip(
        output["image_rows"], output["image_cols"], output["image_sizes"], strict=True
    ):
        rows, cols, (new_h, new_w) = int(rows), int(cols), (int(v) for v in size)
        for_image = _patches(new_h, settings) * _patches(new_w, settings)
        if rows > 1 or cols > 1:
            tokens = rows * cols * settings.tokens_per_tile + (for_image if settings.use_thumbnail else 0)
            resized = (rows * settings.tile_size, cols * settings.tile_size)
        else:
            tokens, resized = for_image, (new_h, new_w)
        counts.append(ImageCount(resized[0], resized[1], (rows, cols, new_h, new_w), tokens))
    return counts


def expand(count: ImageCount, settings: Lfm2VlSettings) -> Expansion:
    """`Lfm2VlProcessor._build_image_tokens`."""
    s = settings
    rows, cols, new_h, new_w = count.grid
    for_image = _patches(new_h, s) * _patches(new_w, s)
    special = s.use_image_special_tokens
    segments: list[Segment] = [s.image_start_token] if special else []
    if rows > 1 or cols > 1:
        for row in range(rows):
            for col in range(cols):
                if special:
                    segments.append(f"<|img_row_{row + 1}_col_{col + 1}|>")
                segments.append(Run(s.image_token, s.tokens_per_tile))
        if s.use_thumbnail:
            if special:
                segments.append(s.image_thumbnail_token)
            segments.append(Run(s.image_token, for_image))
    else:
        segments.append(Run(s.image_token, for_image))
    if special:
        segments.append(s.image_end_token)
    return tuple(segments)


FAMILY = Family.define(
    __name__, name="lfm2_vl", title="LFM2-VL", processor_classes=("Lfm2VlProcessor",),
    image_processor_types=image_processor_types("Lfm2Vl"), placeholder=PLACEHOLDER,
    marker_tokens=(START, END, THUMBNAIL), needs_torchvision=True, add_special_tokens=False,
    size_knob=no_knob(
        "max_image_tokens bounds the smart resize but also moves the threshold above which an image is "
        "tiled, so the count is not monotone in it; only the max length is recommended"
    ),
)  # fmt: skip
