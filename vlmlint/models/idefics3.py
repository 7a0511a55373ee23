"""Idefics3 and SmolVLM: resize to size.longest_edge, split into max_image_size tiles plus a global image.

Image processor (transformers 5.x `Idefics3ImageProcessor` / `SmolVLMImageProcessor`, same code):
1. do_resize: the long side becomes size.longest_edge (small images are upscaled), the short side is
   int(long / aspect_ratio) made even and at least 1; then anything above 4096 is scaled below it.
2. do_image_splitting: both sides go up to multiples of M = max_image_size.longest_edge (the short side
   from int(new_long / aspect_ratio)); if either exceeds M the image is cut into rows x cols tiles of
   M x M plus one global image resized to M x M, else it stays one M x M image (rows = cols = 0).
   Without splitting every image is resized to M x M (rows = cols = 0).

Processor (`replace_image_token` in processing_idefics3.py / processing_smolvlm.py): the user's `<image>`
becomes, per tile, `<fake_token_around_image><row_r_col_c>` + `<image>` x image_seq_len, a "\\n" after
each row, then "\\n<fake_token_around_image><global-img>" + `<image>` x image_seq_len +
`<fake_token_around_image>`; with no tiles only the global part without its leading "\\n".
image_seq_len comes from the processor's own config (processor_config.json), never from the image size.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from vlmlint.models.base import CountError, Expansion, Family, ImageCount, Knob, Run, image_processor_types

PLACEHOLDER = "<image>"
FAKE_IMAGE_TOKEN = "<fake_token_around_image>"
GLOBAL_IMAGE_TOKEN = "<global-img>"
MAX_IMAGE_SIZE = 4096  # transformers' absolute cap on the resized long side
DEFAULT_IMAGE_SEQ_LEN = 169  # both processors' __init__ default


@dataclass(frozen=True)
class Idefics3Settings:
    image_seq_len: int  # <image> tokens per tile and for the global image (processor_config.json)
    max_image_size: int  # tile edge M (image processor max_image_size.longest_edge)
    longest_edge: int | None  # resize target of the long side (size.longest_edge)
    do_resize: bool = True
    do_image_splitting: bool = True
    size_height: int | None = None  # size {"height", "width"} instead of longest_edge: fixed resize
    size_width: int | None = None
    model_image_seq_len: int | None = (
        None  # (image_size // patch)^2 / scale^2 from config.json: what the model expects
    )


def _size_value(size: Any, key: str) -> int | None:
    value = size.get(key) if isinstance(size, dict) else getattr(size, key, None)
    return int(value) if value else None


def _model_image_seq_len(model_config: dict[str, Any]) -> int | None:
    vision = model_config.get("vision_config") or {}
    image_size, patch = vision.get("image_size"), vision.get("patch_size")
    scale = model_config.get("scale_factor")
    if not (isinstance(image_size, int) and isinstance(patch, int) and isinstance(scale, int)) or not patch:
        return None
    return int((image_size // patch) ** 2 / scale**2)


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> Idefics3Settings:
    size = image_processor.size
    longest_edge = _size_value(size, "longest_edge")
    height, width = _size_value(size, "height"), _size_value(size, "width")
    do_resize = bool(getattr(image_processor, "do_resize", True))
    if do_resize and not longest_edge and not (height and width):
        raise CountError(f"size must hold longest_edge or height and width, got {size}")
    max_image_size = _size_value(getattr(image_processor, "max_image_size", None) or {}, "longest_edge")
    if not max_image_size:
        raise CountError("max_image_size must hold longest_edge")
    image_seq_len = processor_config.get("image_seq_len") or DEFAULT_IMAGE_SEQ_LEN
    return Idefics3Settings(
        image_seq_len=int(image_seq_len),
        max_image_size=max_image_size,
        longest_edge=longest_edge,
        do_resize=do_resize,
        do_image_splitting=bool(getattr(image_processor, "do_image_splitting", True)),
        size_height=height,
        size_width=width,
        model_image_seq_len=_model_image_seq_len(model_config),
    )


def rescale_to_max_len(height: int, width: int, max_len: int) -> tuple[int, int]:
    """transformers' _resize_output_size_rescale_to_max_len: long side = max_len, short side even."""
    aspect_ratio = width / height
    if width >= height:
        width = max_len
        height = int(width / aspect_ratio)
        if height % 2 != 0:
            height += 1
    else:
        height = max_len
        width = int(height * aspect_ratio)
        if width % 2 != 0:
            width += 1
    return max(height, 1), max(width, 1)


def scale_below_upper_bound(height: int, width: int, max_len: int = MAX_IMAGE_SIZE) -> tuple[int, int]:
    """transformers' _resize_output_size_scale_below_upper_bound (the 4096 cap)."""
    aspect_ratio = width / height
    if width >= height and width > max_len:
        width = max_len
        height = int(width / aspect_ratio)
    elif height > width and height > max_len:
        height = max_len
        width = int(height * aspect_ratio)
    return max(height, 1), max(width, 1)


def resize_for_vision_encoder(height: int, width: int, tile: int) -> tuple[int, int]:
    """transformers' resize_for_vision_encoder: the short side from int(new_long / aspect), both up to tiles."""
    aspect_ratio = width / height
    if width >= height:
        width = math.ceil(width / tile) * tile
        height = int(width / aspect_ratio)
        height = math.ceil(height / tile) * tile
    else:
        height = math.ceil(height / tile) * tile
        width = int(height * aspect_ratio)
        width = math.ceil(width / tile) * tile
    return height, width


def resized_size(height: int, width: int, settings: Idefics3Settings) -> tuple[int, int]:
    """Size after the image processor's resize step (before splitting)."""
    if not settings.do_resize:
        return height, width
    if settings.longest_edge:
        height, width = rescale_to_max_len(height, width, settings.longest_edge)
        return scale_below_upper_bound(height, width)
    return int(settings.size_height or 0), int(settings.size_width or 0)


def count(height: int, width: int, settings: Idefics3Settings, images_in_row: int = 1) -> ImageCount:
    """Tiles (rows, cols) and <image> tokens: image_seq_len per tile plus one global image."""
    del images_in_row  # every image is expanded on its own
    if height < 1 or width < 1:
        raise CountError(f"image size {width}x{height} is empty")
    tile = settings.max_image_size
    height, width = resized_size(height, width, settings)
    rows = cols = 0
    if settings.do_image_splitting:
        height, width = resize_for_vision_encoder(height, width, tile)
        if height < 1 or width < 1:
            raise CountError(f"resizing gives an empty {width}x{height} image")
        if height > tile or width > tile:
            rows, cols = (height - tile) // tile + 1, (width - tile) // tile + 1
        else:
            height = width = tile  # ceil to multiples of the tile: exactly one tile
    else:
        height = width = tile
    return ImageCount(height, width, (rows, cols), settings.image_seq_len * (rows * cols + 1))


def count_exact(image_processor: Any, images: list[Any], settings: Idefics3Settings) -> list[ImageCount]:
    """Run the real image processor on the row's decoded images and read its rows / cols."""
    try:
        output = image_processor(images=images, return_row_col_info=True)
    except ValueError as exc:
        raise CountError(str(exc)) from None
    tile = settings.max_image_size
    counts = []
    for rows, cols in zip(
        (r for batch in output["rows"] for r in batch),
        (c for batch in output["cols"] for c in batch),
        strict=True,
    ):
        rows, cols = int(rows), int(cols)
        counts.append(
            ImageCount(
                max(rows, 1) * tile,
                max(cols, 1) * tile,
                (rows, cols),
                settings.image_seq_len * (rows * cols + 1),
            )
        )
    return counts


def expand(count: ImageCount, settings: Idefics3Settings) -> Expansion:
    """The processor's text for one image: tiles row by row with "\\n" after each row, then the global image."""
    rows, cols = count.grid
    image = Run(PLACEHOLDER, settings.image_seq_len)
    segments: list[str | Run] = []
    for row in range(rows):
        for col in range(cols):
            segments += [f"{FAKE_IMAGE_TOKEN}<row_{row + 1}_col_{col + 1}>", image]
        segments.append("\n")
    segments += [
        "\n" if rows or cols else "",
        f"{FAKE_IMAGE_TOKEN}{GLOBAL_IMAGE_TOKEN}",
        image,
        FAKE_IMAGE_TOKEN,
    ]
    return tuple(segment for segment in segments if segment != "")


def size_knob(settings: Any) -> Knob | str:
    """size.longest_edge, on the grid of multiples of the tile up to the 4096-pixel cap (`vlmlint stats`)."""
    tile = settings.max_image_size
    fixed = f"every image is one {tile}x{tile} image of {settings.image_seq_len} tokens"
    if not settings.do_resize or not settings.longest_edge:
        return (
            "do_resize is off or size is a fixed height x width (not longest_edge): no image-size knob; "
            "only the max length is recommended"
        )
    if not settings.do_image_splitting:
        return f"do_image_splitting is off: {fixed}, so image tokens per image are fixed; only the max length is recommended"
    # The resize caps the long side at 4096 pixels: the grid ends at the first multiple of the tile above.
    high = -(-MAX_IMAGE_SIZE // tile) * tile
    return Knob(
        name="size.longest_edge",
        current=settings.longest_edge,
        step=tile,
        low=tile,
        settings_at=lambda value: dataclasses.replace(settings, longest_edge=value),
        shape=lambda height, width: ((), high),  # tiles never decrease as longest_edge grows
        open_ended=False,
        text_unchanged=False,
        grid=f"multiples of max_image_size.longest_edge = {tile}, up to {high} (the {MAX_IMAGE_SIZE}-pixel cap)",
    )


# Idefics3Processor.__call__ finds each image's text by its first and last character
# (char_to_token(end - 1)) and fails when a cut removes the last one.
FAMILY = Family.define(
    __name__, name="idefics3", title="Idefics3 / SmolVLM",
    processor_classes=("Idefics3Processor", "SmolVLMProcessor"),
    image_processor_types=image_processor_types("Idefics3") + image_processor_types("SmolVLM"),
    placeholder=PLACEHOLDER, checks_image_span=True,
)  # fmt: skip
