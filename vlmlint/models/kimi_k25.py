"""Kimi K2.5: NaViT-style resize under a patch budget, padded to the merge grid; one <|media_pad|> per merge.

Processor (transformers 5.24 `Kimi_K25Processor.replace_image_token`): each image token (the tokenizer's
`image_token`, else "<|media_pad|>") becomes `image_token * (t * h * w // merge_size**2)` from the image
processor's image_grid_thw. The chat template writes "<|media_begin|>image<|media_content|><|media_pad|>
<|media_end|>" around it; those markers are plain template text the processor leaves alone.

Image processor (`Kimi_K25ImageProcessor`, torchvision only: no PIL backend): `navit_resize` scales the
image down (never up) so that (h // patch) * (w // patch) fits max_patches and each side fits
size.max_height patches, truncates with int(), then pads each side up to a multiple of
merge_size * patch_size. The grid is (1, padded_h / patch, padded_w / patch).

Kimi-VL (moonshotai/Kimi-VL-*) is not this processor: it ships remote code (KimiVLProcessor, auto_map)
that transformers 5.24 does not include, so it goes through the generic fallback with --trust-remote-code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from vlmlint.models.base import (
    CountError,
    Expansion,
    Family,
    ImageCount,
    Run,
    image_processor_types,
    no_knob,
    positive_int,
)

PLACEHOLDER = "<|media_pad|>"
# Kimi_K25ImageProcessor's class attributes in transformers 5.24.
DEFAULTS: dict[str, Any] = {
    "do_resize": True,
    "size": {"max_height": 512, "max_width": 512},
    "max_patches": 16384,
    "patch_size": 14,
    "merge_size": 2,
}
NEEDS_TORCHVISION = (
    "--verify for kimi_k25 needs torch and torchvision (pip install torch torchvision); the formula is "
    "proven against the recorded outputs in fixtures/reference/kimi_k25.json"
)


@dataclass(frozen=True)
class KimiK25Settings:
    patch_size: int = 14
    merge_size: int = 2
    max_patches: int = 16384
    max_size_per_side: int = 512  # size.max_height, in patches
    do_resize: bool = True
    image_token: str = PLACEHOLDER
    placeholder: str = PLACEHOLDER


def setting(image_processor: Any, key: str) -> Any:
    """One image processor setting: the object's attribute, or the raw config's key (no torchvision)."""
    if isinstance(image_processor, dict):
        value = image_processor.get(key)
    else:
        value = getattr(image_processor, key, None)
    return DEFAULTS.get(key) if value is None else value


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> KimiK25Settings:
    size = setting(image_processor, "size")
    side = size.get("max_height") if isinstance(size, dict) else getattr(size, "max_height", None)
    other = size.get("max_width") if isinstance(size, dict) else getattr(size, "max_width", None)
    if side is None or other is None or side != other:
        # Kimi_K25ImageProcessor._validate_preprocess_kwargs
        raise CountError(
            f"size must contain 'max_height' and 'max_width' keys with identical values but got {size}."
        )
    token = processor_config.get("tokenizer_image_token") or PLACEHOLDER
    return KimiK25Settings(
        patch_size=positive_int(setting(image_processor, "patch_size"), "patch_size"),
        merge_size=positive_int(setting(image_processor, "merge_size"), "merge_size"),
        max_patches=positive_int(setting(image_processor, "max_patches"), "max_patches"),
        max_size_per_side=positive_int(side, "size.max_height"),
        do_resize=bool(setting(image_processor, "do_resize")),
        image_token=str(token),
        placeholder=str(token),
    )


def navit_resize(height: int, width: int, s: KimiK25Settings) -> tuple[tuple[int, int], tuple[int, int]]:
    """((resized h, w), (padded h, w)): transformers' `navit_resize`, the same float steps in order."""
    patch = s.patch_size
    patches_h = max(1.0, height // patch)
    patches_w = max(1.0, width // patch)
    scale_total = math.sqrt(s.max_patches / (patches_h * patches_w))
    scale_h = (s.max_size_per_side * patch) / height
    scale_w = (s.max_size_per_side * patch) / width
    scale = min(1.0, scale_total, scale_h, scale_w)  # never upscale
    new_h, new_w = max(1, int(height * scale)), max(1, int(width * scale))
    new_h = min(new_h, s.max_size_per_side * patch)
    new_w = min(new_w, s.max_size_per_side * patch)
    factor = s.merge_size * patch
    return (new_h, new_w), (
        (factor - new_h % factor) % factor + new_h,
        (factor - new_w % factor) % factor + new_w,
    )


def count(height: int, width: int, settings: KimiK25Settings, images_in_row: int = 1) -> ImageCount:
    if height < 1 or width < 1:
        raise CountError(f"image of {width}x{height} pixels")
    patch = settings.patch_size
    if settings.do_resize:
        _, (padded_h, padded_w) = navit_resize(height, width, settings)
    else:
        if height % patch or width % patch:  # patchify's reshape refuses a side off the patch grid
            raise CountError(
                f"do_resize is off and the image ({width}x{height}) is not a multiple of patch_size {patch}"
            )
        padded_h, padded_w = height, width
    grid_h, grid_w = padded_h // patch, padded_w // patch
    tokens = grid_h * grid_w // settings.merge_size**2
    return ImageCount(padded_h, padded_w, (1, grid_h, grid_w), tokens)


def count_exact(image_processor: Any, images: list[Any], settings: KimiK25Settings) -> list[ImageCount]:
    """The real image processor's image_grid_thw (needs torchvision)."""
    if isinstance(image_processor, dict):
        raise CountError(NEEDS_TORCHVISION)
    try:
        output = image_processor(images=images)
    except (ValueError, RuntimeError) as exc:
        raise CountError(str(exc)) from None
    counts = []
    for t, h, w in output["image_grid_thw"].tolist():
        tokens = t * h * w // settings.merge_size**2
        counts.append(ImageCount(h * settings.patch_size, w * settings.patch_size, (t, h, w), tokens))
    return counts


def expand(count: ImageCount, settings: KimiK25Settings) -> Expansion:
    return (Run(settings.image_token, count.tokens),)


FAMILY = Family.define(
    __name__, name="kimi_k25", title="Kimi K2.5", processor_classes=("Kimi_K25Processor",),
    image_processor_types=image_processor_types("Kimi_K25"), placeholder=PLACEHOLDER,
    marker_tokens=("<|media_pad|>", "<|media_begin|>", "<|media_content|>", "<|media_end|>"),
    needs_torchvision=True,
    size_knob=no_knob(
        "max_patches bounds the patches per image, but vlmlint stats does not search it yet; "
        "only the max length is recommended"
    ),
)  # fmt: skip
