"""Molmo2: a pooled global view plus overlapping crops, each written as rows of <im_patch> and <im_col>.

Processor (transformers 5.24 `Molmo2Processor.replace_image_token`): each image token (the tokenizer's
`image_token`, else "<|image|>") becomes the low-resolution view then the high-resolution one,

    <low_res_im_start> (<im_patch> x low_w  <im_col>) x low_h <im_end>
    <im_start>         (<im_patch> x high_w <im_col>) x high_h <im_end>

(<im_col> only with image_use_col_tokens / use_single_crop_col_tokens; <im_start> for the low view when
use_single_crop_start_token is off). `Molmo2Processor.__call__` also prepends the tokenizer's BOS (else
its EOS) to a prompt that does not start with it.

Image processor (`Molmo2ImageProcessor`, torchvision only), `get_image_grid_and_crops`: crops of
size (378) overlap by overlap_margins (4 + 4 patches); `select_tiling` picks the (rows, cols) with
rows * cols <= max_crops whose window canvas fits the image (minus the margins) with the least upscale,
else the least downscale, in torch float32; the canvas is tiling * window + margins, and its patch grid
and the global view's (378 / 14 = 27) are pooled by pooling_size (2 x 2), rounding up.
"""

from __future__ import annotations

import itertools
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vlmlint.models.base import (
    CountError,
    Expansion,
    Family,
    ImageCount,
    Run,
    Segment,
    compose_default,
    image_processor_types,
    no_knob,
    positive_int,
)

PLACEHOLDER = "<|image|>"
PATCH, COL, START, LOW_START, END = "<im_patch>", "<im_col>", "<im_start>", "<low_res_im_start>", "<im_end>"
# Molmo2ImageProcessor's class attributes in transformers 5.24.
DEFAULTS: dict[str, Any] = {
    "size": {"height": 378, "width": 378},
    "max_crops": 8,
    "overlap_margins": [4, 4],
    "patch_size": 14,
    "pooling_size": [2, 2],
}
NEEDS_TORCHVISION = (
    "--verify for molmo2 needs torch and torchvision (pip install torch torchvision); the formula is "
    "proven against the recorded outputs in fixtures/reference/molmo2.json"
)


@dataclass(frozen=True)
class Molmo2Settings:
    crop_size: int = 378  # size.height == size.width
    max_crops: int = 8
    left_margin: int = 4  # overlap_margins, in patches
    right_margin: int = 4
    patch_size: int = 14
    pooling_h: int = 2
    pooling_w: int = 2
    image_use_col_tokens: bool = True
    single_crop_col_tokens: bool = True  # use_single_crop_col_tokens, None -> image_use_col_tokens
    single_crop_start_token: bool = True
    bos_token: str | None = None  # what __call__ prepends (the tokenizer's BOS, else its EOS)
    image_token: str = PLACEHOLDER
    placeholder: str = PLACEHOLDER


def setting(image_processor: Any, key: str) -> Any:
    """One image processor setting: the object's attribute, or the raw config's key (no torchvision)."""
    if isinstance(image_processor, dict):
        value = image_processor.get(key)
    else:
        value = getattr(image_processor, key, None)
    return DEFAULTS.get(key) if value is None else value


def _pair(value: Any, key: str) -> tuple[int, int]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise CountError(f"{key} must be a pair of whole numbers, got {value!r}")
    return positive_int(value[0], f"{key}[0]", 0), positive_int(value[1], f"{key}[1]", 0)


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> Molmo2Settings:
    size = setting(image_processor, "size")
    height = size.get("height") if isinstance(size, dict) else getattr(size, "height", None)
    width = size.get("width") if isinstance(size, dict) else getattr(size, "width", None)
    if height is None or height != width:
        raise CountError(f"Molmo2 only supports a square `size`, got height={height}, width={width}.")
    left, right = _pair(setting(image_processor, "overlap_margins"), "overlap_margins")
    pool_h, pool_w = _pair(setting(image_processor, "pooling_size"), "pooling_size")
    patch = positive_int(setting(image_processor, "patch_size"), "patch_size")
    crop = positive_int(height, "size.height")
    if crop % patch or crop // patch <= left + right or not pool_h or not pool_w:
        raise CountError(
            f"Molmo2's crops need size ({crop}) a multiple of patch_size ({patch}) wider than the overlap "
            f"margins ({left} + {right} patches) and a pooling size of at least 1"
        )
    # Molmo2Processor.__init__ defaults where processor_config says nothing
    use_cols = processor_config.get("image_use_col_tokens", True)
    single_cols = processor_config.get("use_single_crop_col_tokens")
    single_start = processor_config.get("use_single_crop_start_token", True)
    init = processor_config.get("tokenizer_init_kwargs") or {}
    bos = processor_config.get("tokenizer_bos_token") or _token_text(init.get("eos_token"))
    token = processor_config.get("tokenizer_image_token") or PLACEHOLDER
    return Molmo2Settings(
        crop_size=crop,
        max_crops=positive_int(setting(image_processor, "max_crops"), "max_crops"),
        left_margin=left,
        right_margin=right,
        patch_size=patch,
        pooling_h=pool_h,
        pooling_w=pool_w,
        image_use_col_tokens=bool(use_cols),
        single_crop_col_tokens=bool(use_cols if single_cols is None else single_cols),
        single_crop_start_token=bool(single_start),
        bos_token=bos if isinstance(bos, str) and bos else None,
        image_token=str(token),
        placeholder=str(token),
    )


def _token_text(token: Any) -> str | None:
    if isinstance(token, dict):  # an AddedToken as tokenizer_config.json writes it
        token = token.get("content")
    return token if isinstance(token, str) else None


def _f32(value: float) -> float:
    """`value` rounded to float32 (a float64 quotient of float32 values rounds to the float32 quotient)."""
    return struct.unpack("f", struct.pack("f", value))[0]


def _f32_div(a: int, b: int) -> float:
    if b == 0:
        return math.inf  # a > 0: torch's division by zero
    return _f32(_f32(a) / _f32(b))


def select_tiling(height: int, width: int, window: int, max_crops: int) -> tuple[int, int]:
    """transformers' `select_tiling` (torch float32), with argmax / argmin taking the first best."""
    tilings = [(h, w) for h, w in itertools.product(range(1, max_crops + 1), repeat=2) if h * w <= max_crops]
    tilings.sort(key=lambda x: (x[0] * x[1], x[0]))
    scales = [min(_f32_div(h * window, height), _f32_div(w * window, width)) for h, w in tilings]
    if all(scale < 1 for scale in scales):
        return tilings[scales.index(max(scales))]
    upscales = [1e10 if scale < 1.0 else scale for scale in scales]
    return tilings[upscales.index(min(upscales))]


def image_grid(
    height: int, width: int, s: Molmo2Settings
) -> tuple[tuple[int, int, int, int], tuple[int, int]]:
    """((low_h, low_w, high_h, high_w), (tiling_h, tiling_w)): `get_image_grid_and_crops`."""
    patch = s.patch_size
    margin = (s.left_margin + s.right_margin) * patch
    window = (s.crop_size // patch - s.left_margin - s.right_margin) * patch
    tiling_h, tiling_w = select_tiling(height - margin, width - margin, window, s.max_crops)
    canvas_h, canvas_w = tiling_h * window + margin, tiling_w * window + margin
    high_h = math.ceil((canvas_h // patch) / s.pooling_h)
    high_w = math.ceil((canvas_w // patch) / s.pooling_w)
    low_h = math.ceil((s.crop_size // patch) / s.pooling_h)
    low_w = math.ceil((s.crop_size // patch) / s.pooling_w)
    return (low_h, low_w, high_h, high_w), (tiling_h, tiling_w)


def count(height: int, width: int, settings: Molmo2Settings, images_in_row: int = 1) -> ImageCount:
    """resized = the crop canvas; grid = the processor's image_grids row; tokens = <im_patch> ids."""
    if height < 1 or width < 1:
        raise CountError(f"image of {width}x{height} pixels")
    (low_h, low_w, high_h, high_w), (tiling_h, tiling_w) = image_grid(height, width, settings)
    margin = (settings.left_margin + settings.right_margin) * settings.patch_size
    window = settings.crop_size - margin
    return ImageCount(
        tiling_h * window + margin,
        tiling_w * window + margin,
        (low_h, low_w, high_h, high_w),
        low_h * low_w + high_h * high_w,
    )


def count_exact(image_processor: Any, images: list[Any], settings: Molmo2Settings) -> list[ImageCount]:
    """The real image processor's image_grids (needs torchvision)."""
    if isinstance(image_processor, dict):
        raise CountError(NEEDS_TORCHVISION)
    counts = []
    for image in images:
        try:
            output = image_processor(images=[image])
        except (ValueError, RuntimeError) as exc:
            raise CountError(str(exc)) from None
        grid = tuple(int(v) for v in output["image_grids"][0])
        formula = count(image.height, image.width, settings)  # the canvas is not in the output
        tokens = grid[0] * grid[1] + grid[2] * grid[3]
        counts.append(ImageCount(formula.resized_height, formula.resized_width, grid, tokens))
    return counts


def _rows(start: str, rows: int, cols: int, col_token: bool) -> list[Segment]:
    segments: list[Segment] = [start]
    for _ in range(rows):
        segments.append(Run(PATCH, cols))
        if col_token:
            segments.append(COL)
    segments.append(END)
    return segments


def expand(count: ImageCount, settings: Molmo2Settings) -> Expansion:
    low_h, low_w, high_h, high_w = count.grid
    start = LOW_START if settings.single_crop_start_token else START
    return tuple(
        _rows(start, low_h, low_w, settings.single_crop_col_tokens)
        + _rows(START, high_h, high_w, settings.image_use_col_tokens)
    )


def compose(rendered: str, expansions: Sequence[Expansion], settings: Molmo2Settings) -> list[Segment]:
    """`Molmo2Processor.__call__`: the BOS (else EOS) first unless the prompt starts with it."""
    segments = compose_default(rendered, settings.placeholder, expansions)
    if settings.bos_token and not rendered.startswith(settings.bos_token):
        segments.insert(0, settings.bos_token)
    return segments


FAMILY = Family.define(
    __name__, name="molmo2", title="Molmo2", processor_classes=("Molmo2Processor",),
    image_processor_types=image_processor_types("Molmo2"), placeholder=PLACEHOLDER,
    marker_tokens=(PATCH, COL, START, LOW_START, END), needs_torchvision=True,
    size_knob=no_knob(
        "max_crops bounds the crops per image, but vlmlint stats does not search it yet; "
        "only the max length is recommended"
    ),
)  # fmt: skip
