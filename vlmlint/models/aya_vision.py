"""Aya Vision (AyaVisionProcessor): GotOcr2's tiles, a TILE_i tag and (img_size / patch)^2 patches per tile.

Image processor (`GotOcr2ImageProcessorPil.crop_image_to_patches`, the same as InternVL's, so this module
calls `internvl.count` for the tiling): the (columns x rows) grid of size.height x size.width tiles whose
aspect ratio is closest to the image's among min_patches <= columns * rows <= max_patches, plus a thumbnail
when there is more than one tile. The processor forces crop_to_patches=True (its images_kwargs); the
tokenizer's init kwargs override crop_to_patches / min_patches / max_patches / size / do_resize.

Processor (transformers 5.24 `AyaVisionProcessor.replace_image_token`): each `<image>` (its image_token)
becomes

    <|START_OF_IMG|>
    + for i in 1 .. num_patches - 1: "TILE_" + str(i) + <|IMG_PATCH|> x (img_size // patch_size)^2
    + TILE_GLOBAL + <|IMG_PATCH|> x (img_size // patch_size)^2
    + <|END_OF_IMG|>

with patch_size = processor patch_size * downsample_factor (processor_config.json; class defaults 28, 364,
1). The "TILE_i" / "TILE_GLOBAL" tags are text the tokenizer splits as it does any text. The count is the
<|IMG_PATCH|> tokens (the model's image_token_id): (img_size // patch_size)^2 * num_patches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vlmlint.models import internvl
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

PLACEHOLDER = "<image>"
PROCESSOR_CLASS = "AyaVisionProcessor"
# AyaVisionProcessor's class-level images_kwargs in transformers 5.24 (read from the class where it imports).
PROCESSOR_IMAGES_KWARGS = {"crop_to_patches": True}


@dataclass(frozen=True)
class AyaVisionSettings:
    tile_height: int
    tile_width: int
    min_patches: int
    max_patches: int
    crop_to_patches: bool
    patches_per_tile: int  # (img_size // (patch_size * downsample_factor)) ** 2
    do_resize: bool = True
    placeholder: str = PLACEHOLDER
    start_of_img: str = "<|START_OF_IMG|>"
    end_of_img: str = "<|END_OF_IMG|>"
    img_patch: str = "<|IMG_PATCH|>"
    tile: str = "TILE"
    tile_global: str = "TILE_GLOBAL"

    def tiling(self) -> internvl.InternVLSettings:
        """The same tiling as InternVL's GotOcr2 image processor, one 'token' per tile."""
        return internvl.InternVLSettings(
            tile_height=self.tile_height,
            tile_width=self.tile_width,
            min_patches=self.min_patches,
            max_patches=self.max_patches,
            crop_to_patches=self.crop_to_patches,
            image_seq_length=1,
            do_resize=self.do_resize,
        )


def _call_kwargs(processor_config: dict[str, Any]) -> dict[str, Any]:
    try:
        import transformers

        forced = getattr(getattr(transformers, PROCESSOR_CLASS, None), "images_kwargs", None)
    except ImportError:
        forced = None
    if not isinstance(forced, dict):
        forced = PROCESSOR_IMAGES_KWARGS
    kwargs = {k: v for k, v in forced.items() if k in internvl.CALL_KEYS}
    tokenizer_kwargs = processor_config.get("tokenizer_init_kwargs") or {}
    kwargs.update({k: v for k, v in tokenizer_kwargs.items() if k in internvl.CALL_KEYS})
    return kwargs


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> AyaVisionSettings:
    del model_config  # the processor's own settings decide the text
    call = _call_kwargs(processor_config)
    size = call.get("size", image_processor.size)
    height = size.get("height") if isinstance(size, dict) else getattr(size, "height", None)
    width = size.get("width") if isinstance(size, dict) else getattr(size, "width", None)
    if not height or not width:
        raise CountError(f"size must hold height and width (the tile size), got {size}")
    patch = positive_int(processor_config.get("patch_size", 28), "patch_size") * positive_int(
        processor_config.get("downsample_factor", 1), "downsample_factor"
    )
    img_size = positive_int(processor_config.get("img_size", 364), "img_size")
    return AyaVisionSettings(
        tile_height=positive_int(height, "size.height"),
        tile_width=positive_int(width, "size.width"),
        min_patches=positive_int(call.get("min_patches", image_processor.min_patches), "min_patches"),
        max_patches=positive_int(call.get("max_patches", image_processor.max_patches), "max_patches"),
        crop_to_patches=bool(call.get("crop_to_patches", getattr(image_processor, "crop_to_patches", False))),
        patches_per_tile=(img_size // patch) ** 2,
        do_resize=bool(call.get("do_resize", getattr(image_processor, "do_resize", True))),
        placeholder=str(processor_config.get("image_token") or PLACEHOLDER),
        start_of_img=str(processor_config.get("start_of_img_token") or "<|START_OF_IMG|>"),
        end_of_img=str(processor_config.get("end_of_img_token") or "<|END_OF_IMG|>"),
        img_patch=str(processor_config.get("img_patch_token") or "<|IMG_PATCH|>"),
        tile=str(processor_config.get("tile_token") or "TILE"),
        tile_global=str(processor_config.get("tile_global_token") or "TILE_GLOBAL"),
    )


def count(height: int, width: int, settings: AyaVisionSettings, images_in_row: int = 1) -> ImageCount:
    """grid = (rows, columns) of tiles; tokens = <|IMG_PATCH|> tokens (patches_per_tile per tile and thumbnail)."""
    tiles = internvl.count(height, width, settings.tiling())  # tokens: num_patches
    return ImageCount(
        tiles.resized_height, tiles.resized_width, tiles.grid, settings.patches_per_tile * tiles.tokens
    )


def count_exact(image_processor: Any, images: list[Any], settings: AyaVisionSettings) -> list[ImageCount]:
    """The real image processor's num_patches, with the kwargs the processor passes it."""
    tiles = internvl.count_exact(image_processor, images, settings.tiling())
    return [
        ImageCount(t.resized_height, t.resized_width, t.grid, settings.patches_per_tile * t.tokens)
        for t in tiles
    ]


def expand(count: ImageCount, settings: AyaVisionSettings) -> Expansion:
    """replace_image_token's string: start, TILE_i + patches per crop tile, TILE_GLOBAL + patches, end."""
    num_patches = count.tokens // settings.patches_per_tile if settings.patches_per_tile else 1
    segments: list[Segment] = [settings.start_of_img]
    for index in range(1, num_patches):
        segments += [f"{settings.tile}_{index}", Run(settings.img_patch, settings.patches_per_tile)]
    segments += [
        settings.tile_global,
        Run(settings.img_patch, settings.patches_per_tile),
        settings.end_of_img,
    ]
    return tuple(segments)


FAMILY = Family.define(
    __name__, name="aya_vision", title="Aya Vision", processor_classes=(PROCESSOR_CLASS,),
    image_processor_types=image_processor_types("GotOcr2"), placeholder=PLACEHOLDER,
    size_knob=no_knob(
        "max_patches bounds the tiles per image, but vlmlint stats does not search it yet; only the "
        "max length is recommended"
    ),
    marker_tokens=("<|START_OF_IMG|>", "<|END_OF_IMG|>", "<|IMG_PATCH|>"),
)  # fmt: skip
