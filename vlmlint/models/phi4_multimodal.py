"""Phi-4-multimodal: dynamic HD crops of 448 px plus a global view; <|image|> repeated num_img_tokens times.

Processor (transformers 5.24 `Phi4MultimodalProcessor.replace_image_token`): each image token (the
tokenizer's `image_token`) becomes `image_token * num_img_tokens`, the count the image processor returns.
The processor also takes audio (<|audio|>); vlmlint counts images only.

Image processor (`Phi4MultimodalImageProcessor`, torchvision only: no PIL backend), `dynamic_preprocess`:
- crops = (ceil(w / 448), ceil(h / 448)); when their product exceeds dynamic_hd (36), the (i, j) with
  i * j <= dynamic_hd whose ratio i / j is closest to w / h (`find_closest_aspect_ratio`: on a tie, a later
  one wins when w * h > 0.5 * 448^2 * i * j);
- the image is scaled to fit the (448 i) x (448 j) canvas, its other side truncated by int(), and padded;
  the attention mask (32 per crop side) loses the last floor(pad / 14) columns or rows;
  a side under 10 px is refused ("the aspect ratio is very extreme");
- num_img_tokens = 256 + 1 + (valid rows x valid columns of the mask at every second position of each
  crop) + (valid rows again: the mask's first column) + 16.
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

PLACEHOLDER = "<|image|>"
# Phi4MultimodalImageProcessor's class attributes in transformers 5.24.
DEFAULTS: dict[str, Any] = {"size": {"height": 448, "width": 448}, "patch_size": 14, "dynamic_hd": 36}
NEEDS_TORCHVISION = (
    "--verify for phi4_multimodal needs torch and torchvision (pip install torch torchvision); the formula "
    "is proven against the recorded outputs in fixtures/reference/phi4_multimodal.json"
)


@dataclass(frozen=True)
class Phi4MultimodalSettings:
    crop_size: int = 448  # size.height == size.width
    patch_size: int = 14
    dynamic_hd: int = 36  # the most crops per image
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
) -> Phi4MultimodalSettings:
    size = setting(image_processor, "size")
    height = size.get("height") if isinstance(size, dict) else getattr(size, "height", None)
    width = size.get("width") if isinstance(size, dict) else getattr(size, "width", None)
    if height is None or height != width:
        raise CountError("Phi4MultimodalImageProcessor only supports square sizes.")
    token = processor_config.get("tokenizer_image_token")
    if not token:  # Phi4MultimodalProcessor reads tokenizer.image_token and fails without one
        raise CountError("Phi4MultimodalProcessor needs the tokenizer's image_token (extra_special_tokens)")
    s = Phi4MultimodalSettings(
        crop_size=positive_int(height, "size.height"),
        patch_size=positive_int(setting(image_processor, "patch_size"), "patch_size"),
        dynamic_hd=positive_int(setting(image_processor, "dynamic_hd"), "dynamic_hd"),
        image_token=str(token),
        placeholder=str(token),
    )
    if s.crop_size // s.patch_size < 1:
        raise CountError(f"size {s.crop_size} is smaller than patch_size {s.patch_size}")
    return s


def _closest_ratio(width: int, height: int, s: Phi4MultimodalSettings) -> tuple[int, int]:
    """`find_closest_aspect_ratio` over the (i, j) candidates, built and ordered as transformers does."""
    max_num, size = s.dynamic_hd, s.crop_size
    # The same set, sorted by product alone (ties keep the set's order, as in transformers).
    ratios = {
        (i, j)
        for n in range(1, max_num + 1)
        for i in range(1, n + 1)
        for j in range(1, n + 1)
        if i * j <= max_num and i * j >= 1
    }
    aspect_ratio = width / height
    best_diff = float("inf")
    best = (1, 1)
    area = width * height
    for ratio in sorted(ratios, key=lambda x: x[0] * x[1]):
        diff = abs(aspect_ratio - ratio[0] / ratio[1])
        if diff < best_diff:
            best_diff, best = diff, ratio
        elif diff == best_diff and area > 0.5 * size * size * ratio[0] * ratio[1]:
            best = ratio
    return best


def _kept_at_even(valid: int, per_crop: int) -> int:
    """How many of the first `valid` mask lines sit at an even position within their crop ([0::2])."""
    full, rest = divmod(max(valid, 0), per_crop)
    return full * ((per_crop + 1) // 2) + (rest + 1) // 2


def count(height: int, width: int, settings: Phi4MultimodalSettings, images_in_row: int = 1) -> ImageCount:
    if height < 1 or width < 1:
        raise CountError(f"image of {width}x{height} pixels")
    s = settings
    size, patch = s.crop_size, s.patch_size
    mask_size = size // patch
    w_crops, h_crops = math.ceil(width / float(size)), math.ceil(height / float(size))
    if w_crops * h_crops > s.dynamic_hd:
        w_crops, h_crops = _closest_ratio(width, height, s)
    target_w, target_h = size * w_crops, size * h_crops
    ratio_w, ratio_h = target_w / width, target_h / height
    if ratio_w < ratio_h:
        new_w, new_h = target_w, int(height * ratio_w)
        pad_w, pad_h = 0, target_h - new_h
    else:
        new_w, new_h = int(width * ratio_h), target_h
        pad_w, pad_h = target_w - new_w, 0
    if min(new_h, target_h) < 10 or min(new_w, target_w) < 10:
        raise CountError(f"the aspect ratio is very extreme {(new_w, new_h)}")
    rows = mask_size * h_crops - (math.floor(pad_h / patch) if pad_h >= patch else 0)
    cols = mask_size * w_crops - (math.floor(pad_w / patch) if pad_w >= patch else 0)
    kept_rows, kept_cols = _kept_at_even(rows, mask_size), _kept_at_even(cols, mask_size)
    first_column = kept_rows if cols > 0 else 0
    tokens = 256 + 1 + kept_rows * kept_cols + first_column + 16
    return ImageCount(target_h, target_w, (h_crops, w_crops), tokens)


def count_exact(
    image_processor: Any, images: list[Any], settings: Phi4MultimodalSettings
) -> list[ImageCount]:
    """The real image processor's num_img_tokens and image_sizes (needs torchvision)."""
    if isinstance(image_processor, dict):
        raise CountError(NEEDS_TORCHVISION)
    counts = []
    for image in images:  # one at a time: a batch pads every image to the most crops
        try:
            output = image_processor(images=[image])
        except (ValueError, RuntimeError) as exc:
            raise CountError(str(exc)) from None
        height, width = (int(v) for v in output["image_sizes"][0])
        grid = (height // settings.crop_size, width // settings.crop_size)
        counts.append(ImageCount(height, width, grid, int(output["num_img_tokens"][0])))
    return counts


def expand(count: ImageCount, settings: Phi4MultimodalSettings) -> Expansion:
    return (Run(settings.image_token, count.tokens),)


FAMILY = Family.define(
    __name__, name="phi4_multimodal", title="Phi-4-multimodal",
    processor_classes=("Phi4MultimodalProcessor",),
    image_processor_types=image_processor_types("Phi4Multimodal"), placeholder=PLACEHOLDER,
    marker_tokens=("<|image|>",), needs_torchvision=True,
    size_knob=no_knob(
        "dynamic_hd bounds the crops per image, but vlmlint stats does not search it yet; "
        "only the max length is recommended"
    ),
)  # fmt: skip
