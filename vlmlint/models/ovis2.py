"""Ovis2: image_seq_length <IMG_ATOM> per view, a whole-image view plus tiles where the image is tiled.

Image processor (transformers 5.24 `Ovis2ImageProcessorPil._preprocess` and `crop_image_to_patches`, the
same in the torchvision `Ovis2ImageProcessor`): with crop_to_patches on and max_patches > 1 each image
gets a tile grid:

- use_covering_area_grid (the default): `get_min_tile_covering_grid` scores every (a, b) with
  1 <= a * b <= max_patches (sorted by a * b) by how much of the image its tiles cover: the image is split
  as a rows x b cols (`split_image_into_grid`, integer strips, the last taking the remainder) and each
  region covers min(w, h) * side (scaled down when its longer side exceeds side = size.height); the
  grids covering more than 0.9 of the area compete on (a * b, -coverage), else all on
  (-coverage, a * b); the first minimum wins. crop_image_to_patches then reads the pair as
  (num_columns, num_rows) = (a, b).
- otherwise `get_optimal_tiled_canvas`: the (a, b) with min_patches <= a * b <= max_patches whose a / b
  is closest to W / H; a tie goes to the later grid when the image area exceeds half the canvas.

The image is resized to (size.height * rows, size.width * cols) and cut into rows x cols tiles; with more
than one tile a whole-image thumbnail comes first. grids = [rows, cols] ([1, 1] without tiling).

Processor (`Ovis2Processor.replace_image_token`): the text's "<image>" (the processor's image_token,
hard-wired whatever processor_config.json says) becomes

    <IMG_START> + <IMG_ATOM> x image_seq_length + <IMG_GRID>
    [rows x cols > 1: per tile <IMG_ATOM> x image_seq_length, <IMG_COL> between the tiles of a row,
                      <IMG_ROW> between rows]
    <IMG_END>

The image features replace the <IMG_ATOM> ids (config.json's image_token_id); the five markers are the
model's visual indicator tokens. image_seq_length comes from processor_config.json (256 by default).

Settings `processor(text, images)` uses (`ProcessorMixin._merge_kwargs`): Ovis2Processor has no
images_kwargs of its own, so the image processor's attributes, overridden by the tokenizer's init kwargs
where they name crop_to_patches, min_patches, max_patches, use_covering_area_grid or size.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

from vlmlint.models.base import (
    CountError,
    Expansion,
    Family,
    ImageCount,
    Knob,
    Run,
    Segment,
    image_processor_types,
    positive_int,
)

PLACEHOLDER = "<image>"
ATOM, START, GRID, COL, ROW, END = (
    "<IMG_ATOM>",
    "<IMG_START>",
    "<IMG_GRID>",
    "<IMG_COL>",
    "<IMG_ROW>",
    "<IMG_END>",
)
DEFAULT_IMAGE_SEQ_LENGTH = 256  # Ovis2Processor.__init__
COVERING_THRESHOLD = 0.9  # crop_image_to_patches' default
MAX_SEARCHED_PATCHES = 1024  # vlmlint stats: the largest max_patches whose grid is searched
IMAGE_KWARGS = (
    "crop_to_patches",
    "min_patches",
    "max_patches",
    "use_covering_area_grid",
    "size",
    "do_resize",
)


@dataclass(frozen=True)
class Ovis2Settings:
    image_seq_length: int = DEFAULT_IMAGE_SEQ_LENGTH
    tile_height: int = 448  # size.height: the tile side, and the size every view is resized to
    tile_width: int = 448
    crop_to_patches: bool = True
    min_patches: int = 1
    max_patches: int = 12
    use_covering_area_grid: bool = True
    do_resize: bool = True

    def images_kwargs(self) -> dict[str, Any]:
        """What the processor passes its image processor (so count_exact runs the same pipeline)."""
        return {
            "crop_to_patches": self.crop_to_patches,
            "min_patches": self.min_patches,
            "max_patches": self.max_patches,
            "use_covering_area_grid": self.use_covering_area_grid,
            "size": {"height": self.tile_height, "width": self.tile_width},
            "do_resize": self.do_resize,
        }


def _edge(size: Any, key: str) -> int | None:
    value = size.get(key) if isinstance(size, dict) else getattr(size, key, None)
    return None if value is None else positive_int(value, f"size.{key}")


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> Ovis2Settings:
    del model_config
    tokenizer_kwargs = processor_config.get("tokenizer_init_kwargs") or {}

    def pipeline(key: str, default: Any) -> Any:
        if key in tokenizer_kwargs:  # _merge_kwargs step 5: tokenizer init kwargs
            return tokenizer_kwargs[key]
        value = getattr(image_processor, key, None)
        return default if value is None else value

    size = pipeline("size", None)
    height, width = _edge(size, "height"), _edge(size, "width")
    if height is None or width is None:
        raise CountError(f"size must hold height and width, got {size!r}")
    return Ovis2Settings(
        image_seq_length=positive_int(
            processor_config.get("image_seq_length", DEFAULT_IMAGE_SEQ_LENGTH), "image_seq_length"
        ),
        tile_height=height,
        tile_width=width,
        crop_to_patches=bool(pipeline("crop_to_patches", False)),
        min_patches=positive_int(pipeline("min_patches", 1), "min_patches"),
        max_patches=positive_int(pipeline("max_patches", 12), "max_patches"),
        use_covering_area_grid=bool(pipeline("use_covering_area_grid", True)),
        do_resize=bool(pipeline("do_resize", True)),
    )


# ---- the image processor's grid choice, in its order ---------------------------------------------


@functools.lru_cache(maxsize=64)
def supported_aspect_ratios(min_tiles: int, max_tiles: int) -> tuple[tuple[int, int], ...]:
    """`get_all_supported_aspect_ratios`: (a, b) with min <= a * b <= max, sorted (stably) by a * b."""
    ratios = [
        (width, height)
        for width in range(1, max_tiles + 1)
        for height in range(1, max_tiles + 1)
        if min_tiles <= width * height <= max_tiles
    ]
    return tuple(sorted(ratios, key=lambda x: x[0] * x[1]))


def _covering_area(left: int, upper: int, right: int, lower: int, side: int) -> float:
    w = right - left
    h = lower - upper
    w, h = max(w, h), min(w, h)
    if w > side:
        h = h / w * side
        w = side
    return w * h


def _split(h: int, w: int, grid: tuple[int, int]) -> list[tuple[int, int, int, int]]:
    row_height = h // grid[0]
    col_width = w // grid[1]
    return [
        (
            col * col_width,
            row * row_height,
            w if col == grid[1] - 1 else (col + 1) * col_width,
            h if row == grid[0] - 1 else (row + 1) * row_height,
        )
        for row in range(grid[0])
        for col in range(grid[1])
    ]


def min_tile_covering_grid(height: int, width: int, side: int, max_tiles: int) -> tuple[int, int]:
    """`get_min_tile_covering_grid`: the (a, b) pair crop_image_to_patches reads as (columns, rows)."""
    area = width * height
    evaluated = []
    sufficient = []
    for grid in supported_aspect_ratios(1, max_tiles):
        ratio = sum(_covering_area(*region, side) for region in _split(height, width, grid)) / area
        evaluated.append((grid, ratio))
        if ratio > COVERING_THRESHOLD:
            sufficient.append((grid, ratio))
    if sufficient:
        return min(sufficient, key=lambda x: (x[0][0] * x[0][1], -x[1]))[0]
    return min(evaluated, key=lambda x: (-x[1], x[0][0] * x[0][1]))[0]


def optimal_tiled_canvas(height: int, width: int, settings: Ovis2Settings) -> tuple[int, int]:
    """`get_optimal_tiled_canvas`: the (a, b) pair closest to the image's aspect ratio."""
    aspect_ratio = width / height
    area = width * height
    best_diff = float("inf")
    best = (1, 1)
    for grid in supported_aspect_ratios(settings.min_patches, settings.max_patches):
        diff = abs(aspect_ratio - grid[0] / grid[1])
        if diff < best_diff:
            best_diff = diff
            best = grid
        elif diff == best_diff:
            if area > 0.5 * settings.tile_height * settings.tile_width * grid[0] * grid[1]:
                best = grid
    return best


def tile_grid(height: int, width: int, settings: Ovis2Settings) -> tuple[int, int]:
    """(rows, cols) as `_preprocess` reports them in grids."""
    if not (settings.crop_to_patches and settings.max_patches > 1):
        return (1, 1)
    if settings.use_covering_area_grid:
        columns, rows = min_tile_covering_grid(height, width, settings.tile_height, settings.max_patches)
    else:
        columns, rows = optimal_tiled_canvas(height, width, settings)
    return (rows, columns)


def count(height: int, width: int, settings: Ovis2Settings, images_in_row: int = 1) -> ImageCount:
    """<IMG_ATOM> tokens of one image: image_seq_length for the whole image, and as many per tile.

    grid: (rows, cols) of tiles ((1, 1) untiled). The resized size is the tiled canvas's.
    """
    del images_in_row
    if height < 1 or width < 1:
        raise CountError(f"image of {width}x{height} pixels")
    rows, cols = tile_grid(height, width, settings)
    tiles = rows * cols
    tokens = settings.image_seq_length * (1 + tiles if tiles > 1 else 1)
    if tiles > 1 or settings.do_resize:
        resized = (settings.tile_height * rows, settings.tile_width * cols)
    else:
        resized = (height, width)
    return ImageCount(resized[0], resized[1], (rows, cols), tokens)


def count_exact(image_processor: Any, images: list[Any], settings: Ovis2Settings) -> list[ImageCount]:
    """Run the real image processor with the processor's images kwargs and read its grids."""
    try:
        output = image_processor(images=images, **settings.images_kwargs())
    except (ValueError, ZeroDivisionError) as exc:
        raise CountError(str(exc)) from None
    counts = []
    for (rows, cols), one in zip(output["grids"], images, strict=True):
        rows, cols = int(rows), int(cols)
        tiles = rows * cols
        tokens = settings.image_seq_length * (1 + tiles if tiles > 1 else 1)
        if tiles > 1 or settings.do_resize:
            height, width = settings.tile_height * rows, settings.tile_width * cols
        else:
            width, height = one.size
        counts.append(ImageCount(height, width, (rows, cols), tokens))
    return counts


def expand(count: ImageCount, settings: Ovis2Settings) -> Expansion:
    """`replace_image_token`: <IMG_START>, the whole image, <IMG_GRID>, the tiles, <IMG_END>."""
    rows, cols = count.grid
    atoms = Run(ATOM, settings.image_seq_length)
    segments: list[Segment] = [START, atoms, GRID]
    if rows * cols > 1:
        for row in range(rows):
            for col in range(cols):
                segments.append(atoms)
                if col < cols - 1:
                    segments.append(COL)
            if row < rows - 1:
                segments.append(ROW)
    segments.append(END)
    return tuple(segments)


@functools.lru_cache(maxsize=65536)
def max_patches_saturation(height: int, width: int, side: int) -> int:
    """The smallest max_patches from which the covering grid no longer changes: the area of the first grid
    (by a * b) that covers more than 0.9 of the image (larger values only add larger grids). Searched up
    to MAX_SEARCHED_PATCHES tiles: an image that needs more is taken as settled there."""
    area = width * height
    for n in range(1, MAX_SEARCHED_PATCHES + 1):
        for grid in ((a, n // a) for a in range(1, n + 1) if n % a == 0):
            ratio = sum(_covering_area(*region, side) for region in _split(height, width, grid)) / area
            if ratio > COVERING_THRESHOLD:
                return n
    return MAX_SEARCHED_PATCHES


def size_knob(settings: Ovis2Settings) -> Knob | str:
    """max_patches, on the whole numbers from 1 (`vlmlint stats`)."""
    if not settings.crop_to_patches:
        return (
            f"crop_to_patches is off: every image is one {settings.tile_height}x{settings.tile_width} view of "
            f"{settings.image_seq_length} tokens, so there is no image-size knob; only the max length is recommended"
        )
    if not settings.use_covering_area_grid:
        return (
            "use_covering_area_grid is off: the closest-aspect-ratio grid keeps improving as max_patches grows, "
            "so vlmlint stats does not search max_patches; only the max length is recommended"
        )

    def shape(height: int, width: int) -> tuple[tuple[int, ...], int]:
        # Larger values only add grids of more tiles: the chosen grid never shrinks, and once a grid covers
        # 90% of the image it stays chosen.
        return (), max_patches_saturation(height, width, settings.tile_height)

    return Knob(
        name="max_patches",
        current=settings.max_patches,
        step=1,
        low=1,
        settings_at=lambda value: dataclasses.replace(settings, max_patches=value),
        shape=shape,
        open_ended=True,
        text_unchanged=False,  # the <IMG_COL>/<IMG_ROW> markers change with the grid
        grid="whole numbers from 1 (1: no tiles)",
    )


FAMILY = Family.define(
    __name__, name="ovis2", title="Ovis2", processor_classes=("Ovis2Processor",),
    image_processor_types=image_processor_types("Ovis2"), placeholder=PLACEHOLDER,
    marker_tokens=(ATOM, START, GRID, COL, ROW, END),
)  # fmt: skip
