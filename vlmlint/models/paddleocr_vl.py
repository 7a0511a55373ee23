"""PaddleOCR-VL (PaddleOCRVLProcessor): short sides lifted to 28, then Qwen-VL's smart_resize.

Processor (transformers 5.24 `PaddleOCRVLProcessor`): `__init__` takes `tokenizer.image_token`
(<|IMAGE_PLACEHOLDER|>; a tokenizer without it cannot build the processor), and `replace_image_token`
turns each into

    image_token x (int(image_grid_thw[i].prod()) // image_processor.merge_size**2)

and nothing else. The checkpoint's chat template writes its `image_token` variable for each image part of
a user turn (all of the turn's images before its texts), `<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>`
unless the caller defines it; transformers 5.24 passes the tokenizer's `special_tokens_map`, which holds the
tokenizer's `image_token`, so with the hub's tokenizer the template writes the bare <|IMAGE_PLACEHOLDER|>
(no start/end tokens). vlmlint renders the template with the same special tokens and counts what it writes.

Image processor (`PaddleOCRVLImageProcessorPil` and the torchvision `PaddleOCRVLImageProcessor`,
`smart_resize` of image_processing_paddleocr_vl.py), factor = patch_size * merge_size:

1. a height under factor lifts the image: width = round(width * factor / height), height = factor; then a
   width under factor: height = round(height * factor / width), width = factor (Python's round, half to
   even; in that order, so the second sees the first's result);
2. the rest is Qwen2-VL's smart_resize character for character (the 200:1 refusal on the lifted sides,
   round to the grid, the floor/ceil rescale into [min_pixels, max_pixels] of height * width), so this
   module lifts and then calls `qwen_vl.smart_resize`, and reuses Qwen-VL's knob (after the lift).

grid = (1, h / patch, w / patch). With do_resize off, `patchify` cuts whole patch_size patches only (it
does not group them by merge_size), so sides must be multiples of patch_size and the count is
grid_h * grid_w // merge_size**2, rounded down, as replace_image_token computes it.

Settings `processor(text, images)` uses: the image processor's size (its `__init__` folds the hub file's
legacy top-level min_pixels / max_pixels into size.shortest_edge / longest_edge), patch_size, merge_size,
do_resize; the tokenizer's init kwargs override them where they name them, min_pixels / max_pixels too
(`_standardize_kwargs` writes those into the size). The token count divides by the image processor's own
merge_size.

M-RoPE (`PaddleOCRVLModel.get_rope_index`): an image moves the next text position by
max(grid_h, grid_w) // config.vision_config.spatial_merge_size.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from vlmlint.models import qwen_vl
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

PLACEHOLDER = "<|IMAGE_PLACEHOLDER|>"
IMAGE_START = "<|IMAGE_START|>"
IMAGE_END = "<|IMAGE_END|>"
# PaddleOCRVLImageProcessorPil's class defaults (transformers 5.24).
DEFAULT_MIN_PIXELS = 384 * 384
DEFAULT_MAX_PIXELS = 1536 * 1536
DEFAULT_PATCH_SIZE = 14
DEFAULT_MERGE_SIZE = 2


@dataclass(frozen=True)
class PaddleSettings:
    # Qwen-VL's field names (min_pixels / max_pixels: size.shortest_edge / longest_edge, bounds on
    # height * width after the lift), so the rules' Qwen-VL hints read them as they are.
    patch_size: int = DEFAULT_PATCH_SIZE
    merge_size: int = DEFAULT_MERGE_SIZE
    min_pixels: int = DEFAULT_MIN_PIXELS
    max_pixels: int = DEFAULT_MAX_PIXELS
    do_resize: bool = True
    token_merge_size: int = DEFAULT_MERGE_SIZE  # replace_image_token's image_processor.merge_size
    rope_merge_size: int = DEFAULT_MERGE_SIZE  # get_rope_index's vision_config.spatial_merge_size
    placeholder: str = PLACEHOLDER  # tokenizer.image_token

    @property
    def raw_image_prompt(self) -> str:
        """What the checkpoint's template writes for an image when image_token is not defined."""
        return f"{IMAGE_START}{self.placeholder}{IMAGE_END}"

    @property
    def factor(self) -> int:
        return self.patch_size * self.merge_size

    def images_kwargs(self) -> dict[str, Any]:
        """What the processor passes its image processor (so count_exact runs the same pipeline)."""
        return {
            "size": {"shortest_edge": self.min_pixels, "longest_edge": self.max_pixels},
            "patch_size": self.patch_size,
            "merge_size": self.merge_size,
            "do_resize": self.do_resize,
        }


def _edge(size: Any, name: str) -> Any:
    return size.get(name) if isinstance(size, dict) else getattr(size, name, None)


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> PaddleSettings:
    """The images kwargs `processor(text, images)` ends up with, and the tokenizer's image token."""
    tokenizer_kwargs = processor_config.get("tokenizer_init_kwargs") or {}

    def pipeline(key: str, default: Any) -> Any:
        if key in tokenizer_kwargs:  # _merge_kwargs step 5: tokenizer init kwargs
            return tokenizer_kwargs[key]
        value = getattr(image_processor, key, None)
        return default if value is None else value

    size = pipeline("size", None)
    min_pixels, max_pixels = _edge(size, "shortest_edge"), _edge(size, "longest_edge")
    # _standardize_kwargs: call-time min_pixels / max_pixels (here from the tokenizer) replace the edges
    if tokenizer_kwargs.get("min_pixels") is not None:
        min_pixels = tokenizer_kwargs["min_pixels"]
    if tokenizer_kwargs.get("max_pixels") is not None:
        max_pixels = tokenizer_kwargs["max_pixels"]
    if not min_pixels or not max_pixels:
        # PaddleOCRVLImageProcessorPil.resize raises the same on every image
        raise CountError(f"`size` dict must contain 'shortest_edge' and 'longest_edge' keys but got {size}.")
    placeholder = processor_config.get("tokenizer_image_token")
    if not placeholder:
        raise CountError(
            "the tokenizer has no image_token, so PaddleOCRVLProcessor cannot be built "
            "(its __init__ reads tokenizer.image_token)"
        )
    vision = model_config.get("vision_config") if isinstance(model_config.get("vision_config"), dict) else {}
    merge_size = positive_int(pipeline("merge_size", DEFAULT_MERGE_SIZE), "merge_size")
    return PaddleSettings(
        patch_size=positive_int(pipeline("patch_size", DEFAULT_PATCH_SIZE), "patch_size"),
        merge_size=merge_size,
        min_pixels=positive_int(min_pixels, "size.shortest_edge"),
        max_pixels=positive_int(max_pixels, "size.longest_edge"),
        do_resize=bool(pipeline("do_resize", True)),
        token_merge_size=positive_int(
            getattr(image_processor, "merge_size", None) or merge_size, "merge_size"
        ),
        rope_merge_size=positive_int(vision.get("spatial_merge_size") or merge_size, "spatial_merge_size"),
        placeholder=str(placeholder),
    )


def lift(height: int, width: int, factor: int) -> tuple[int, int]:
    """smart_resize's first lines: a side under factor becomes factor, the other scaled and rounded."""
    if height < factor:
        width = round((width * factor) / height)
        height = factor
    if width < factor:
        height = round((height * factor) / width)
        width = factor
    return height, width


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """image_processing_paddleocr_vl.smart_resize: the lift, then Qwen2-VL's function to the bit."""
    height, width = lift(height, width, factor)
    return qwen_vl.smart_resize(height, width, factor, min_pixels, max_pixels)


def count(height: int, width: int, settings: PaddleSettings, images_in_row: int = 1) -> ImageCount:
    """grid: (1, patch rows, patch columns) of the resized image, as image_grid_thw."""
    if height < 1 or width < 1:
        raise CountError(f"image of {width}x{height} pixels")
    patch = settings.patch_size
    if settings.do_resize:
        resized_height, resized_width = smart_resize(
            height, width, settings.factor, settings.min_pixels, settings.max_pixels
        )
    else:
        resized_height, resized_width = height, width
        if height % patch or width % patch:
            # patchify reshapes (C, H, W) into whole patches: numpy refuses the rest
            raise CountError(
                f"with do_resize off, an image of {width}x{height} is not whole {patch}-px patches: "
                "the image processor cannot cut it into patches"
            )
    grid_h, grid_w = resized_height // patch, resized_width // patch
    return ImageCount(
        resized_height, resized_width, (1, grid_h, grid_w), grid_h * grid_w // settings.token_merge_size**2
    )


def count_exact(image_processor: Any, images: list[Any], settings: PaddleSettings) -> list[ImageCount]:
    """Run the real image processor with the processor's images kwargs and read image_grid_thw."""
    return qwen_vl.counts_from_grid_thw(
        image_processor, images, settings.images_kwargs(), settings.patch_size, settings.token_merge_size
    )


def expand(count: ImageCount, settings: PaddleSettings) -> Expansion:
    """The placeholder once per merged patch; whatever surrounds it is the template's text."""
    return (Run(settings.placeholder, count.tokens),)


def position_span(count: ImageCount, settings: PaddleSettings) -> int:
    """How far one image moves the M-RoPE position: max(grid_h, grid_w) // spatial_merge_size."""
    _, grid_h, grid_w = count.grid
    return max(grid_h, grid_w) // settings.rope_merge_size


def size_knob(settings: PaddleSettings) -> Knob | str:
    """Qwen-VL's max_pixels knob, with each image's saturation taken after the lift."""
    knob = qwen_vl.size_knob(settings)
    if isinstance(knob, str):
        return knob
    factor = settings.factor

    def shape(height: int, width: int) -> tuple[tuple[int, ...], int]:
        lifted_h, lifted_w = lift(height, width, factor)
        saturation = qwen_vl.max_pixels_saturation(lifted_h, lifted_w, factor)
        return (saturation,), saturation

    return dataclasses.replace(knob, shape=shape)


def shrink_hint(height: int, width: int, limit: float, settings: Any) -> str | None:
    """The smallest max_pixels that keeps an image's shrink within `limit` (rule VLM208's fix), on the
    lifted image (Qwen-VL's search, with PaddleOCR-VL's resize)."""
    if not isinstance(settings, PaddleSettings) or not settings.do_resize:
        return None
    area = height * width
    unit = settings.factor**2
    pixels = max(unit, math.ceil(area / limit / unit) * unit)
    try:
        for _ in range(10_000):  # a few steps in practice; the bound only guards the loop
            resized_h, resized_w = smart_resize(height, width, settings.factor, settings.min_pixels, pixels)
            if resized_h * resized_w * limit >= area:
                break
            pixels += unit
    except CountError:
        return None
    return (
        f"set max_pixels >= {pixels} ({resized_h * resized_w // unit} image tokens for this image), "
        "or crop the region that matters"
    )


FAMILY = Family.define(
    __name__, name="paddleocr_vl", title="PaddleOCR-VL", processor_classes=("PaddleOCRVLProcessor",),
    image_processor_types=image_processor_types("PaddleOCRVL"), placeholder=PLACEHOLDER,
    raw_image_prompt=f"{IMAGE_START}{PLACEHOLDER}{IMAGE_END}", marker_tokens=(IMAGE_START, IMAGE_END, PLACEHOLDER),
)  # fmt: skip
