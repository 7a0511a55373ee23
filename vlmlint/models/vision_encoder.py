"""Plain vision encoders (ViT, CLIP, SigLIP): no image token in any text, a fixed position table.

These are encoders, not chat models: the image never enters a text sequence, so there is no
placeholder to expand (`placeholder=""`), and the row's text (a caption) is tokenized on its own by
the model's tokenizer when it has one (CLIP's text tower holds 77 positions, SigLIP's 64).

What can break is the image side. The image processor resizes (size height/width, or the shortest
edge to size.shortest_edge then a center crop to crop_size) and the encoder cuts the result into
(H // patch) x (W // patch) patches, plus one CLS token for ViT and CLIP (SigLIP has none). The
position table of the vision model holds (image_size // patch)^2 (+1) entries; a processor that does
not resize to the model's image_size (do_resize false, or another size) yields more patches than
that, and the model refuses the input ("Input image size (H*W) doesn't match model (S*S)") unless
it is called with interpolate_pos_encoding=True. VLM403 reports it.

ImageCount.tokens here is the encoder sequence length of the image (patches + CLS), not a count of
text ids: nothing of the image is in input_ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vlmlint.models.base import CountError, Expansion, Family, ImageCount, no_knob

# image processor class name prefix -> (variant, CLS tokens in the encoder sequence)
_VARIANTS = {
    "ViT": ("vit", 1),
    "CLIP": ("clip", 1),
    "Siglip": ("siglip", 0),
}


@dataclass(frozen=True)
class EncoderSettings:
    variant: str  # "vit" | "clip" | "siglip"
    do_resize: bool
    resize_height: int | None  # size.height/width: a fixed output size
    resize_width: int | None
    shortest_edge: int | None  # size.shortest_edge: the short side, aspect kept (CLIP)
    do_center_crop: bool
    crop_height: int | None
    crop_width: int | None
    patch_size: int
    cls_tokens: int
    image_size: int  # the vision model's own input side (config.json)
    vision_max_positions: int  # (image_size // patch_size)^2 + cls_tokens: the position table

    @property
    def vision_image_size(self) -> int:
        return self.image_size


def _variant(image_processor: Any) -> tuple[str, int]:
    name = type(image_processor).__name__
    for prefix, variant in _VARIANTS.items():
        if name.startswith(prefix):
            return variant
    raise CountError(f"{name} is not a ViT, CLIP or SigLIP image processor")


def _vision_geometry(variant: str, model_config: dict[str, Any]) -> tuple[int, int]:
    """image_size and patch_size of the vision tower: config.json, else the config class's defaults."""
    import transformers

    if variant == "vit":
        section, defaults = model_config, transformers.ViTConfig()
    else:
        section = model_config.get("vision_config") or {}
        defaults = transformers.CLIPVisionConfig() if variant == "clip" else transformers.SiglipVisionConfig()
    values = []
    for key in ("image_size", "patch_size"):
        value = section.get(key, getattr(defaults, key))
        if isinstance(value, (list, tuple)):  # (height, width): these models are square
            if len(set(value)) != 1:
                raise CountError(f"non-square vision {key} {value} is not supported")
            value = value[0]
        values.append(int(value))
    return values[0], values[1]


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> EncoderSettings:
    """Resize and crop from the image processor; image_size and patch_size from config.json."""
    del processor_config  # CLIPProcessor / SiglipProcessor hold no image settings of their own
    variant, cls_tokens = _variant(image_processor)
    image_size, patch_size = _vision_geometry(variant, model_config)
    do_resize = bool(getattr(image_processor, "do_resize", False))
    size = getattr(image_processor, "size", None)
    height = getattr(size, "height", None)
    width = getattr(size, "width", None)
    shortest = getattr(size, "shortest_edge", None)
    if do_resize and not (height and width) and not shortest:
        raise CountError(f"size {size} is not a height/width or shortest_edge size")
    if do_resize and shortest and getattr(size, "longest_edge", None):
        raise CountError(f"size {size} (shortest and longest edge) is not supported for {variant}")
    do_center_crop = bool(getattr(image_processor, "do_center_crop", False))
    crop = getattr(image_processor, "crop_size", None)
    crop_height, crop_width = getattr(crop, "height", None), getattr(crop, "width", None)
    if do_center_crop and not (crop_height and crop_width):
        raise CountError(f"crop_size {crop} must hold height and width")
    if getattr(image_processor, "do_pad", False):
        raise CountError("do_pad (pad to the batch's largest image) is not supported for plain encoders")
    return EncoderSettings(
        variant=variant,
        do_resize=do_resize,
        resize_height=int(height) if height and width else None,
        resize_width=int(width) if height and width else None,
        shortest_edge=int(shortest) if shortest and not (height and width) else None,
        do_center_crop=do_center_crop,
        crop_height=int(crop_height) if crop_height else None,
        crop_width=int(crop_width) if crop_width else None,
        patch_size=patch_size,
        cls_tokens=cls_tokens,
        image_size=image_size,
        vision_max_positions=(image_size // patch_size) ** 2 + cls_tokens,
    )


def resized_size(height: int, width: int, settings: EncoderSettings) -> tuple[int, int]:
    """The processor's output size: resize (PilBackend.resize), then center crop (always the crop size)."""
    if settings.do_resize:
        if settings.shortest_edge:  # get_resize_output_image_size(default_to_square=False)
            short, long = (width, height) if width <= height else (height, width)
            new_short, new_long = settings.shortest_edge, int(settings.shortest_edge * long / short)
            height, width = (new_long, new_short) if width <= height else (new_short, new_long)
        else:
            height, width = settings.resize_height, settings.resize_width
    if settings.do_center_crop:  # pads with zeros where the image is smaller than the crop
        height, width = settings.crop_height, settings.crop_width
    return height, width


def count(height: int, width: int, settings: EncoderSettings, images_in_row: int = 1) -> ImageCount:
    if height < 1 or width < 1:
        raise CountError(f"{width}x{height} has no pixels")
    resized_height, resized_width = resized_size(height, width, settings)
    rows, cols = resized_height // settings.patch_size, resized_width // settings.patch_size
    return ImageCount(resized_height, resized_width, (rows, cols), rows * cols + settings.cls_tokens)


def count_exact(image_processor: Any, images: list[Any], settings: EncoderSettings) -> list[ImageCount]:
    """Run the real image processor and read each pixel_values' height and width."""
    try:
        output = image_processor(images=list(images))
    except ValueError as exc:
        raise CountError(str(exc)) from None
    counts = []
    for pixels in output["pixel_values"]:
        resized_height, resized_width = (int(v) for v in pixels.shape[-2:])
        rows, cols = resized_height // settings.patch_size, resized_width // settings.patch_size
        counts.append(
            ImageCount(resized_height, resized_width, (rows, cols), rows * cols + settings.cls_tokens)
        )
    return counts


def expand(count: ImageCount, settings: EncoderSettings) -> Expansion:
    """Nothing: the image is not part of any text sequence."""
    return ()


FAMILY = Family.define(
    __name__, name="vision-encoder", title="ViT / CLIP / SigLIP vision encoders",
    processor_classes=("CLIPProcessor", "SiglipProcessor"),
    image_processor_types=(
        "ViTImageProcessor",
        "ViTImageProcessorFast",
        "ViTImageProcessorPil",
        "ViTFeatureExtractor",
        "CLIPImageProcessor",
        "CLIPImageProcessorFast",
        "CLIPImageProcessorPil",
        "CLIPFeatureExtractor",
        "SiglipImageProcessor",
        "SiglipImageProcessorFast",
        "SiglipImageProcessorPil",
    ),
    placeholder="",
    size_knob=no_knob(
        "a plain vision encoder: the image goes to its own fixed-size input, not into the text "
        "sequence; only the max length (of the text) is recommended"
    ),
)  # fmt: skip
