"""Llama 3.2 Vision (Mllama): one <|image|> token per image; the tiles go to cross-attention.

Processor (transformers 5.x `MllamaProcessor`): the <|image|> the chat template writes is NOT
expanded (`replace_image_token` returns the token itself): the vision features reach the language
model through cross-attention layers, so each image costs exactly one id in input_ids however many
tiles it is cut into. Before tokenizing, `build_string_from_input` puts <|begin_of_text|> in front
of a prompt that holds none (after any <|image|> tokens it starts with); the tokenizer then adds its
own <|begin_of_text|> as well, so a chat-template prompt starts with two BOS ids.

Image processor (`MllamaImageProcessor`): picks a canvas of rows x cols tiles of size x size
(rows * cols <= max_image_tiles) by `get_optimal_tiled_canvas`, resizes the image to fit it keeping
the aspect ratio (`get_image_size_fit_to_canvas`) and pads it to the canvas. The grid is what the
processor reports as aspect_ratio_ids / num_tiles; it does not change the sequence length.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from vlmlint.models.base import (
    CountError,
    Expansion,
    Family,
    ImageCount,
    Segment,
    compose_default,
    image_processor_types,
    no_knob,
)

PLACEHOLDER = "<|image|>"
# MllamaProcessor takes its BOS from the tokenizer (read at load); Llama 3.2 Vision checkpoints use this one.
BOS_TOKEN = "<|begin_of_text|>"


@dataclass(frozen=True)
class MllamaSettings:
    tile_size: int
    max_image_tiles: int
    bos_token: str = BOS_TOKEN


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> MllamaSettings:
    """Tile size and tile budget from the image processor (it refuses do_resize/do_pad false itself)."""
    del model_config  # MllamaProcessor's `image_kwargs` default is never merged (typo)
    bos = processor_config.get("tokenizer_bos_token")
    size = image_processor.size
    height, width = getattr(size, "height", None), getattr(size, "width", None)
    if not height or height != width:
        raise CountError(f"size must be a square height/width tile, got {size}")
    tiles = int(image_processor.max_image_tiles)
    if tiles <= 0:
        raise CountError(f"max_image_tiles must be positive, got {tiles}")
    return MllamaSettings(
        tile_size=int(height),
        max_image_tiles=tiles,
        bos_token=bos if isinstance(bos, str) and bos else BOS_TOKEN,
    )


@lru_cache(maxsize=16)
def supported_aspect_ratios(max_image_tiles: int) -> tuple[tuple[int, int], ...]:
    """Every (rows, cols) with rows * cols <= max_image_tiles, in transformers' order (aspect_ratio_ids - 1)."""
    return tuple(
        (a, b)
        for a in range(1, max_image_tiles + 1)
        for b in range(1, max_image_tiles + 1)
        if a * b <= max_image_tiles
    )


def optimal_canvas(height: int, width: int, max_image_tiles: int, tile_size: int) -> tuple[int, int]:
    """`get_optimal_tiled_canvas`: the least upscaling that fits, else the least downscaling; ties -> least area."""
    canvases = [(a * tile_size, b * tile_size) for a, b in supported_aspect_ratios(max_image_tiles)]
    scales = [min(ch / height, cw / width) for ch, cw in canvases]
    upscaling = [s for s in scales if s >= 1]
    selected = min(upscaling) if upscaling else max(scales)
    chosen = [canvas for canvas, scale in zip(canvases, scales, strict=True) if scale == selected]
    return min(chosen, key=lambda canvas: canvas[0] * canvas[1])  # first of the least area, as np.argmin


def fit_to_canvas(
    height: int, width: int, canvas_height: int, canvas_width: int, tile_size: int
) -> tuple[int, int]:
    """`get_image_size_fit_to_canvas`: each side clipped to [tile_size, canvas], the other side scaled."""
    target_width = min(max(width, tile_size), canvas_width)
    target_height = min(max(height, tile_size), canvas_height)
    scale_h = target_height / height
    scale_w = target_width / width
    if scale_w < scale_h:
        return min(math.floor(height * scale_w) or 1, target_height), target_width
    return target_height, min(math.floor(width * scale_h) or 1, target_width)


def count(height: int, width: int, settings: MllamaSettings, images_in_row: int = 1) -> ImageCount:
    if height < 1 or width < 1:
        raise CountError(f"{width}x{height} has no pixels")
    canvas_height, canvas_width = optimal_canvas(height, width, settings.max_image_tiles, settings.tile_size)
    resized_height, resized_width = fit_to_canvas(
        height, width, canvas_height, canvas_width, settings.tile_size
    )
    grid = (canvas_height // settings.tile_size, canvas_width // settings.tile_size)
    return ImageCount(resized_height, resized_width, grid, 1)


def count_exact(image_processor: Any, images: list[Any], settings: MllamaSettings) -> list[ImageCount]:
    """Run the real image processor on the row's images (one sample) and read aspect_ratio_ids / num_tiles."""
    try:
        output = image_processor(images=[list(images)])
    except ValueError as exc:
        raise CountError(str(exc)) from None
    ratios = supported_aspect_ratios(settings.max_image_tiles)
    counts = []
    for image, ratio_id, tiles in zip(
        images, output["aspect_ratio_ids"][0], output["num_tiles"][0], strict=True
    ):
        rows, cols = ratios[int(ratio_id) - 1]
        if rows * cols != int(tiles):
            raise CountError(
                f"aspect ratio id {int(ratio_id)} is {rows}x{cols} tiles but num_tiles is {tiles}"
            )
        width, height = image.size
        resized_height, resized_width = fit_to_canvas(
            height, width, rows * settings.tile_size, cols * settings.tile_size, settings.tile_size
        )
        counts.append(ImageCount(resized_height, resized_width, (rows, cols), 1))
    return counts


def expand(count: ImageCount, settings: MllamaSettings) -> Expansion:
    """The <|image|> stays as it is: one token, whatever the tiles."""
    return (PLACEHOLDER,)


def compose(rendered: str, expansions: Sequence[Expansion], settings: MllamaSettings) -> list[Segment]:
    """`build_string_from_input`: without a BOS in the text, put one after the leading <|image|> tokens."""
    if settings.bos_token not in rendered:
        leading = 0
        while rendered.startswith(PLACEHOLDER):
            rendered = rendered[len(PLACEHOLDER) :]
            leading += 1
        rendered = PLACEHOLDER * leading + settings.bos_token + rendered
    return compose_default(rendered, PLACEHOLDER, expansions)


FAMILY = Family.define(
    __name__, name="mllama", title="Llama 3.2 Vision (Mllama)", processor_classes=("MllamaProcessor",),
    image_processor_types=image_processor_types("Mllama"), placeholder=PLACEHOLDER,
    size_knob=no_knob(
        "every image is one <|image|> token in the text (its tiles go to cross-attention): no image "
        "setting changes the sequence length; only the max length is recommended"
    ),
    marker_tokens=("<|image|>",),
)  # fmt: skip
