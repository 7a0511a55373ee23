"""Llama 4: the image on a canvas of 336-px tiles picked by get_best_fit, plus a global tile when there are several.

Processor (transformers 5.24 `Llama4Processor`): `ProcessorMixin.get_text_with_replacements` replaces each
image token (`image_token`, "<|image|>") with `Llama4Processor._prompt_split_image(aspect_ratio, n)`,
n = (tile_h // patch_size) * (tile_w // patch_size) // downsample_ratio, downsample_ratio =
int(round(1 / pixel_shuffle_ratio**2)) (144 for 336-px tiles, patch 14, ratio 0.5):

    <|image_start|>
      (only with more than one tile) for each of ratio_h rows:
        (<|patch|> x n <|tile_x_separator|>) x (ratio_w - 1)  <|patch|> x n  <|tile_y_separator|>
    <|image|> <|patch|> x n <|image_end|>

The marker strings are written literally by `_prompt_split_image` (the processor's start/end/patch/separator
token settings are stored but not used there); the last <|image|> + n patches is the global tile (the
single tile itself when there is only one).

Image processor (`Llama4ImageProcessor`, torchvision only: no PIL backend), `_preprocess`:
`find_supported_resolutions(max_patches, size)` lists every (h, w) tile grid with h * w <= max_patches
(times the tile size), grouped by aspect ratio in the order the function builds them; `get_best_fit`
takes, in torch float32, scale = min(canvas_h / height, canvas_w / width) per canvas, the smallest scale
>= 1 (the largest with resize_to_max_canvas) when there is one, else the largest scale below 1, and among
the canvases of that scale the first of least area. The image is then resized without distortion
(`get_max_res_without_distortion`, never upscaled past the tile size unless resize_to_max_canvas) and
padded to the canvas; aspect_ratios is (canvas_h // tile, canvas_w // tile). `do_resize=False` and a
non-square `size` are refused.
"""

from __future__ import annotations

import math
import struct
from collections import defaultdict
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

PLACEHOLDER = "<|image|>"
START, END, PATCH = "<|image_start|>", "<|image_end|>", "<|patch|>"
TILE_X, TILE_Y = "<|tile_x_separator|>", "<|tile_y_separator|>"
# Llama4ImageProcessor's class attributes in transformers 5.24.
DEFAULTS: dict[str, Any] = {
    "size": {"height": 336, "width": 336},
    "max_patches": 16,
    "resize_to_max_canvas": False,
    "do_resize": True,
}
# The image settings ProcessorMixin._merge_kwargs lets tokenizer_config.json override.
IMAGE_KWARGS = ("size", "max_patches", "resize_to_max_canvas", "do_resize")
NEEDS_TORCHVISION = (
    "--verify for llama4 needs torch and torchvision (pip install torch torchvision); the formula is "
    "proven against the recorded outputs in fixtures/reference/llama4.json"
)


@dataclass(frozen=True)
class Llama4Settings:
    tile_size: int = 336  # size.height == size.width
    max_patches: int = 16  # the most tiles per image (the global tile aside)
    resize_to_max_canvas: bool = False
    do_resize: bool = True
    patch_size: int = 14  # Llama4Processor's, not the vision config's
    downsample_ratio: int = 4  # int(round(1 / pixel_shuffle_ratio**2))
    image_token: str = PLACEHOLDER
    placeholder: str = PLACEHOLDER

    @property
    def tokens_per_tile(self) -> int:
        return (
            (self.tile_size // self.patch_size) * (self.tile_size // self.patch_size) // self.downsample_ratio
        )

    def images_kwargs(self) -> dict[str, Any]:
        """What the processor passes its image processor (so count_exact runs the same pipeline)."""
        return {
            "size": {"height": self.tile_size, "width": self.tile_size},
            "max_patches": self.max_patches,
            "resize_to_max_canvas": self.resize_to_max_canvas,
            "do_resize": self.do_resize,
        }


def _size_side(size: Any, key: str) -> Any:
    return size.get(key) if isinstance(size, dict) else getattr(size, key, None)


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> Llama4Settings:
    """The images kwargs `processor(text, images)` ends up with, and the processor's own settings."""
    tokenizer_kwargs = processor_config.get("tokenizer_init_kwargs") or {}

    def pipeline(key: str) -> Any:
        if tokenizer_kwargs.get(key) is not None:  # _merge_kwargs: tokenizer init kwargs first
            return tokenizer_kwargs[key]
        if isinstance(image_processor, dict):  # no torchvision: the raw preprocessor_config.json
            value = image_processor.get(key)
        else:
            value = getattr(image_processor, key, None)
        return DEFAULTS[key] if value is None else value

    size = pipeline("size")
    height, width = _size_side(size, "height"), _size_side(size, "width")
    if height is None or height != width:
        raise CountError("`size` must be square.")  # find_supported_resolutions
    ratio = processor_config.get("pixel_shuffle_ratio", 0.5)
    if (
        isinstance(ratio, bool)
        or not isinstance(ratio, (int, float))
        or not math.isfinite(ratio)
        or ratio <= 0
    ):
        raise CountError(f"pixel_shuffle_ratio must be a number above 0, got {ratio!r}")
    token = processor_config.get("image_token") or PLACEHOLDER
    return Llama4Settings(
        tile_size=positive_int(height, "size.height"),
        max_patches=positive_int(pipeline("max_patches"), "max_patches"),
        resize_to_max_canvas=bool(pipeline("resize_to_max_canvas")),
        do_resize=bool(pipeline("do_resize")),
        patch_size=positive_int(processor_config.get("patch_size", 14), "patch_size"),
        downsample_ratio=positive_int(
            int(round(1.0 / (ratio**2))), "downsample_ratio (1 / pixel_shuffle_ratio**2)"
        ),
        image_token=str(token),
        placeholder=str(token),
    )


def _f32(value: float) -> float:
    """`value` rounded to float32 (a float64 quotient of float32 values rounds to the float32 quotient)."""
    return struct.unpack("f", struct.pack("f", value))[0]


def _factors(dividend: int) -> set[int]:
    """transformers' `get_factors`."""
    found = set()
    for i in range(1, int(dividend**0.5) + 1):
        if dividend % i == 0:
            found.add(i)
            found.add(dividend // i)
    return found


@cache
def supported_resolutions(max_num_chunks: int, tile: int) -> tuple[tuple[int, int], ...]:
    """transformers' `find_supported_resolutions`, in its order (by aspect ratio, first seen first)."""
    by_ratio: dict[float, list[tuple[int, int]]] = defaultdict(list)
    for chunk_size in range(max_num_chunks, 0, -1):
        for factor in sorted(_factors(chunk_size)):
            by_ratio[factor / (chunk_size // factor)].append((factor, chunk_size // factor))
    return tuple((h * tile, w * tile) for pairs in by_ratio.values() for h, w in pairs)


def best_fit(height: int, width: int, s: Llama4Settings) -> tuple[int, int]:
    """transformers' `get_best_fit`: the canvas (h, w) in pixels, with torch's float32 scales."""
    canvases = supported_resolutions(s.max_patches, s.tile_size)
    h32, w32 = _f32(height), _f32(width)
    scales = [min(_f32(_f32(ch) / h32), _f32(_f32(cw) / w32)) for ch, cw in canvases]
    upscales = [scale for scale in scales if scale >= 1]
    if upscales:
        selected = max(upscales) if s.resize_to_max_canvas else min(upscales)
    else:
        selected = max(scale for scale in scales if scale < 1)
    chosen = [canvas for canvas, scale in zip(canvases, scales, strict=True) if scale == selected]
    areas = [ch * cw for ch, cw in chosen]
    return chosen[areas.index(min(areas))]  # torch.argmin: the first of least area


class _Num:
    """A number as `_preprocess` holds it: a python int/float, or a torch 0-d tensor (int64 / float32)."""

    __slots__ = ("value", "tensor")

    def __init__(self, value: float, tensor: bool) -> None:
        self.value, self.tensor = value, tensor


def _min(a: _Num, b: _Num) -> _Num:
    return b if b.value < a.value else a  # python's min(a, b): b only when strictly smaller


def _divide(a: _Num, b: int) -> _Num:
    if a.tensor:  # int64 tensor / int: torch's true division in float32
        return _Num(_f32(_f32(a.value) / _f32(b)), True)
    return _Num(a.value / b, False)


def _less(a: _Num, b: _Num) -> bool:
    if a.tensor or b.tensor:  # a python float against a float32 tensor is compared in float32
        return _f32(a.value) < _f32(b.value)
    return a.value < b.value


def _floor_times(side: int, scale: _Num) -> _Num:
    if scale.tensor:  # int * float32 tensor, floored
        return _Num(math.floor(_f32(_f32(side) * scale.value)), True)
    return _Num(math.floor(side * scale.value), False)


def resized_size(height: int, width: int, canvas: tuple[int, int], s: Llama4Settings) -> tuple[int, int]:
    """The size `_preprocess` resizes to before padding to the canvas (`get_max_res_without_distortion`,
    the canvas elements being torch tensors as there)."""
    target_h, target_w = _Num(canvas[0], True), _Num(canvas[1], True)
    if not s.resize_to_max_canvas:  # upscale no further than the tile size
        target_h = _min(_Num(max(height, s.tile_size), False), target_h)
        target_w = _min(_Num(max(width, s.tile_size), False), target_w)
    scale_w, scale_h = _divide(target_w, width), _divide(target_h, height)
    if _less(scale_w, scale_h):
        new_w, new_h = target_w, _min(_floor_times(height, scale_w), target_h)
    else:
        new_h, new_w = target_h, _min(_floor_times(width, scale_h), target_w)
    return max(int(new_h.value), 1), max(int(new_w.value), 1)


def tiling(height: int, width: int, s: Llama4Settings) -> tuple[tuple[int, int], tuple[int, int]]:
    """((ratio_h, ratio_w), canvas (h, w)): the processor's aspect_ratios row and the padded canvas."""
    canvas = best_fit(height, width, s)
    return (canvas[0] // s.tile_size, canvas[1] // s.tile_size), canvas


def count(height: int, width: int, settings: Llama4Settings, images_in_row: int = 1) -> ImageCount:
    """resized = the size before padding; grid = aspect_ratios (ratio_h, ratio_w); tokens = <|patch|> ids."""
    if height < 1 or width < 1:
        raise CountError(f"image of {width}x{height} pixels")
    if not settings.do_resize:
        raise CountError(
            "Llama4 always resizes images to one of its supported resolutions; `do_resize=False` is not "
            "supported because the resulting pixel values would have inconsistent shapes and could not be "
            "tensorized."
        )
    (ratio_h, ratio_w), canvas = tiling(height, width, settings)
    tiles = ratio_h * ratio_w
    chunks = tiles + 1 if tiles > 1 else 1
    resized_h, resized_w = resized_size(height, width, canvas, settings)
    return ImageCount(resized_h, resized_w, (ratio_h, ratio_w), chunks * settings.tokens_per_tile)


def count_exact(image_processor: Any, images: list[Any], settings: Llama4Settings) -> list[ImageCount]:
    """The real image processor's aspect_ratios (needs torchvision)."""
    if isinstance(image_processor, dict):
        raise CountError(NEEDS_TORCHVISION)
    try:
        output = image_processor(images=images, **settings.images_kwargs())
    except (ValueError, RuntimeError) as exc:
        raise CountError(str(exc)) from None
    counts = []
    for image, (ratio_h, ratio_w) in zip(images, output["aspect_ratios"], strict=True):
        ratio_h, ratio_w = int(ratio_h), int(ratio_w)
        chunks = ratio_h * ratio_w + 1 if ratio_h * ratio_w > 1 else 1
        formula = count(image.height, image.width, settings)  # the resized size is not in the output
        counts.append(
            ImageCount(
                formula.resized_height,
                formula.resized_width,
                (ratio_h, ratio_w),
                chunks * settings.tokens_per_tile,
            )
        )
    return counts


def expand(count: ImageCount, settings: Llama4Settings) -> Expansion:
    """`Llama4Processor._prompt_split_image`."""
    ratio_h, ratio_w = count.grid
    n = settings.tokens_per_tile
    segments: list[Segment] = [START]
    if ratio_h * ratio_w > 1:
        for _ in range(ratio_h):
            for x in range(ratio_w):
                segments.append(Run(PATCH, n))
                if x < ratio_w - 1:
                    segments.append(TILE_X)
            segments.append(TILE_Y)
    segments += [PLACEHOLDER, Run(PATCH, n), END]
    return tuple(segments)


FAMILY = Family.define(
    __name__, name="llama4", title="Llama 4", processor_classes=("Llama4Processor",),
    image_processor_types=image_processor_types("Llama4"), placeholder=PLACEHOLDER,
    marker_tokens=(START, END, PATCH, TILE_X, TILE_Y), needs_torchvision=True,
    trainer_templates={"llamafactory": ("llama4",)},
    size_knob=no_knob(
        "max_patches bounds the tiles per image, but the tiling it picks is not monotone in it and "
        "vlmlint stats does not search it yet; only the max length is recommended"
    ),
)  # fmt: skip
