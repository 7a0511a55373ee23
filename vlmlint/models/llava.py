"""LLaVA-1.5 (LlavaProcessor): `<image>` becomes one `<image>` per vision feature the projector keeps.

Processor (transformers 5.x `LlavaProcessor.replace_image_token`): the image processor (usually
CLIPImageProcessor: shortest-edge resize, then a center crop) gives pixel_values of H x W, and the i-th
`<image>` becomes (H // patch_size) * (W // patch_size) + num_additional_image_tokens copies of itself,
one fewer when vision_feature_select_strategy is "default" (the model drops the CLS feature). Nothing
else is added: no start, end or newline tokens. 336/14 with CLS dropped: 576.

The image processor's output size is computed here from the header size with the backend's own
integer arithmetic (`get_resize_output_image_size`, `get_size_with_aspect_ratio`, center crop that pads
small images), so resize-only configs (do_center_crop false) are counted too. The helpers are shared
with llava_next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vlmlint.models.base import (
    FIXED_SIZE,
    CountError,
    Expansion,
    Family,
    ImageCount,
    Run,
    image_processor_types,
    no_knob,
)

PLACEHOLDER = "<image>"


@dataclass(frozen=True)
class Size:
    """An image processor's `size` / `crop_size` / `pad_size` (transformers' SizeDict), hashable."""

    height: int | None = None
    width: int | None = None
    shortest_edge: int | None = None
    longest_edge: int | None = None
    max_height: int | None = None
    max_width: int | None = None

    @classmethod
    def of(cls, value: Any) -> Size | None:
        """From a SizeDict, a dict, or an int (an int `size` is a shortest edge for CLIP-like processors)."""
        if value is None:
            return None
        if isinstance(value, int):
            return cls(shortest_edge=value)
        get = value.get if isinstance(value, dict) else lambda key: getattr(value, key, None)
        fields = ("height", "width", "shortest_edge", "longest_edge", "max_height", "max_width")
        return cls(**{name: int(get(name)) if get(name) is not None else None for name in fields})


def _shortest_edge(height: int, width: int, shortest_edge: int) -> tuple[int, int]:
    """transformers' get_resize_output_image_size(default_to_square=False, max_size=None)."""
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = shortest_edge, int(shortest_edge * long / short)
    return (new_long, new_short) if width <= height else (new_short, new_long)


def _with_aspect_ratio(height: int, width: int, size: int, max_size: int) -> tuple[int, int]:
    """transformers' get_size_with_aspect_ratio: the short edge to `size` unless the long one passes max_size."""
    raw_size = None
    min_original, max_original = float(min(height, width)), float(max(height, width))
    if max_original / min_original * size > max_size:
        raw_size = max_size * min_original / max_original
        size = int(round(raw_size))
    if (height <= width and height == size) or (width <= height and width == size):
        return height, width
    if width < height:
        return (int(raw_size * height / width) if raw_size is not None else int(size * height / width)), size
    return size, (int(raw_size * width / height) if raw_size is not None else int(size * width / height))


def resize_output(height: int, width: int, size: Size | None) -> tuple[int, int]:
    """The (height, width) the image processor's `resize` produces for `size` (PIL and torchvision alike)."""
    if size is None:
        raise CountError("the image processor resizes but has no size")
    if size.shortest_edge and size.longest_edge:
        return _with_aspect_ratio(height, width, size.shortest_edge, size.longest_edge)
    if size.shortest_edge:
        return _shortest_edge(height, width, size.shortest_edge)
    if size.max_height and size.max_width:
        scale = min(size.max_height / height, size.max_width / width)
        return int(height * scale), int(width * scale)
    if size.height and size.width:
        return size.height, size.width
    raise CountError(
        f"the image processor's size {size} has neither height/width, max_height/max_width nor shortest_edge"
    )


def processed_size(height: int, width: int, settings: Any) -> tuple[int, int]:
    """pixel_values' height and width after pad-to-square, resize, center crop and fixed padding."""
    if settings.pad_to_square:  # LlavaImageProcessor: pad to a square before anything else
        height = width = max(height, width)
    if settings.do_resize:
        height, width = resize_output(height, width, settings.size)
        if height <= 0 or width <= 0:
            raise CountError(f"the image processor would resize this image to {width}x{height}")
    if settings.do_center_crop:
        crop = settings.crop_size
        if crop is None or not crop.height or not crop.width:
            raise CountError(f"center crop needs crop_size height and width, got {crop}")
        height, width = crop.height, crop.width  # smaller images are padded up to the crop
    pad = settings.pad_size
    if pad is not None:
        if height > pad.height or width > pad.width:
            raise CountError(
                f"pad_size {pad.height}x{pad.width} is smaller than the processed {height}x{width}"
            )
        height, width = pad.height, pad.width
    return height, width


@dataclass(frozen=True)
class LlavaSettings:
    patch_size: int
    num_additional_image_tokens: int = 0
    vision_feature_select_strategy: str | None = None  # the processor's (what input_ids get)
    do_resize: bool = True
    size: Size | None = Size(shortest_edge=336)
    do_center_crop: bool = True
    crop_size: Size | None = Size(height=336, width=336)
    pad_to_square: bool = False  # LlavaImageProcessor with do_pad
    pad_size: Size | None = None  # a fixed pad_size with do_pad (CLIP-style processors)
    # What the model's config.json says; the model computes its features from these.
    model_vision_feature_select_strategy: str | None = None
    model_patch_size: int | None = None

    @property
    def dropped(self) -> int:
        return 1 if self.vision_feature_select_strategy == "default" else 0


def _strategy(model_config: dict[str, Any]) -> str | None:
    value = model_config.get("vision_feature_select_strategy")
    return value if isinstance(value, str) else None


def _model_patch_size(model_config: dict[str, Any]) -> int | None:
    vision = model_config.get("vision_config") or {}
    value = vision.get("patch_size") if isinstance(vision, dict) else None
    return value if isinstance(value, int) else None


def processor_settings(processor_config: dict[str, Any], model_config: dict[str, Any]) -> dict[str, Any]:
    """patch_size, num_additional_image_tokens and strategy as the processor holds them.

    transformers reads them from processor_config.json only (class defaults: None, 0, None); the model
    reads its own config.json. A processor without patch_size cannot expand `<image>` at all
    (`None // ...` raises TypeError in replace_image_token), so vlmlint refuses the model.
    """
    patch_size = processor_config.get("patch_size")
    if not isinstance(patch_size, int) or patch_size <= 0:
        hint = _model_patch_size(model_config)
        raise CountError(
            f"processor_config.json has no patch_size (got {patch_size!r}): transformers' processor cannot expand "
            f'{PLACEHOLDER}; add "patch_size": {hint or "the vision tower patch size"}'
            + (
                f' and "vision_feature_select_strategy": "{_strategy(model_config)}"'
                if _strategy(model_config) and processor_config.get("vision_feature_select_strategy") is None
                else ""
            )
        )
    return {
        "patch_size": patch_size,
        "num_additional_image_tokens": int(processor_config.get("num_additional_image_tokens") or 0),
        "vision_feature_select_strategy": processor_config.get("vision_feature_select_strategy"),
        "model_vision_feature_select_strategy": _strategy(model_config),
        "model_patch_size": _model_patch_size(model_config),
    }


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> LlavaSettings:
    do_pad = bool(getattr(image_processor, "do_pad", False))
    pad_to_square = do_pad and type(image_processor).__name__.startswith("LlavaImageProcessor")
    pad_size = Size.of(getattr(image_processor, "pad_size", None)) if do_pad and not pad_to_square else None
    return LlavaSettings(
        **processor_settings(processor_config, model_config),
        do_resize=bool(getattr(image_processor, "do_resize", True)),
        size=Size.of(image_processor.size),
        do_center_crop=bool(getattr(image_processor, "do_center_crop", False)),
        crop_size=Size.of(getattr(image_processor, "crop_size", None)),
        pad_to_square=pad_to_square,
        pad_size=pad_size if pad_size is not None and pad_size.height and pad_size.width else None,
    )


def _count_for(height: int, width: int, settings: LlavaSettings) -> ImageCount:
    grid_h, grid_w = height // settings.patch_size, width // settings.patch_size
    tokens = grid_h * grid_w + settings.num_additional_image_tokens - settings.dropped
    # A negative count repeats "<image>" -1 times: the processor writes nothing.
    return ImageCount(height, width, (grid_h, grid_w), max(tokens, 0))


def count(height: int, width: int, settings: LlavaSettings, images_in_row: int = 1) -> ImageCount:
    """The processed size (a constant crop for CLIP-style configs) and its feature count."""
    if height <= 0 or width <= 0:
        raise CountError(f"{width}x{height} image")
    return _count_for(*processed_size(height, width, settings), settings)


def count_exact(image_processor: Any, images: list[Any], settings: LlavaSettings) -> list[ImageCount]:
    """Run the real image processor and count from the pixel_values size, as replace_image_token does."""
    try:
        output = image_processor(images=images)
    except ValueError as exc:
        raise CountError(str(exc)) from None
    return [_count_for(*(int(v) for v in pixels.shape[-2:]), settings) for pixels in output["pixel_values"]]


def expand(count: ImageCount, settings: LlavaSettings) -> Expansion:
    """`<image>` repeated once per kept vision feature; nothing around it."""
    return (Run(PLACEHOLDER, count.tokens),)


# CLIPImageProcessor / SiglipImageProcessor belong to plain vision encoders too: a LLaVA folder is
# found by its processor_class; LlavaImageProcessor (pad-to-square) is LLaVA's own.
FAMILY = Family.define(
    __name__, name="llava", title="LLaVA-1.5", processor_classes=("LlavaProcessor",),
    image_processor_types=image_processor_types("Llava"), placeholder=PLACEHOLDER,
    size_knob=no_knob(f"LLaVA-1.5 resizes and crops every image to one size: {FIXED_SIZE}"),
    trainer_templates={"llamafactory": ("llava",)},
)  # fmt: skip
