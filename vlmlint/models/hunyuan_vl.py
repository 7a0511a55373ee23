"""HunyuanOCR (HunYuanVLProcessor): Qwen2-VL's smart_resize to 32-px blocks, one newline token per row.

Processor (transformers 5.24 `HunYuanVLProcessor`): `__init__` takes the tokenizer's `image_token`,
`image_start_token`, `image_end_token` and `pad_token` (it raises ValueError when one is missing), and
`replace_image_token` turns each image token into

    image_token x (patch_h * (patch_w + 1) + (2 if cat_extra_token else 0))
    patch_h = grid_h // image_processor.merge_size // image_processor.spatial_patch_size   (same for w)

where (1, grid_h, grid_w) is image_grid_thw: the merged grid plus one token per row (the vision merger's
newline) plus two extra tokens (begin/end of the image features). `validate_inputs` refuses a prompt in
which an image token is not written as image_start + image_token + image_end; the checkpoint's template
writes `<｜hy_place▁holder▁no▁100｜><｜hy_place▁holder▁no▁102｜><｜hy_place▁holder▁no▁101｜>`. Its call
tokenizes with add_special_tokens=False (text_kwargs): the template writes the BOS.

Image processor (`HunYuanVLImageProcessorPil`, and the torchvision `HunYuanVLImageProcessor`):
`smart_resize` of image_processing_pil_hunyuan_vl.py is Qwen2-VL's function character for character
(this module calls `qwen_vl.smart_resize`) with factor = patch_size * merge_size (16 * 2), bounds
size.shortest_edge / longest_edge (the hub file's legacy min_pixels 262144 / max_pixels 4194304, folded
into size by `__init__`); grid = (1, h / patch, w / patch). With do_resize off the patchify groups whole
merge blocks, so sides must be multiples of patch * merge. With the hub's settings:
N = (h / 32) * (w / 32 + 1) + 2 on the resized h x w.

Settings `processor(text, images)` uses (`ProcessorMixin._merge_kwargs`): the image processor's size,
patch_size, merge_size, do_resize; the tokenizer's init kwargs override them where they name them
(min_pixels / max_pixels too); cat_extra_token from processor_config.json (default True). The token count
divides by the image processor's own merge_size and spatial_patch_size (a class attribute, 1).

Positions (`HunYuanVLModel.get_rope_index`, XD-RoPE): the first rotary axis keeps the 1D sequence
position of every token, and the image's (width, height, image index) go on the last three axes only, so
text positions advance by one per token and the family has no position_span.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
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
    Segment,
    compose_default,
    image_processor_types,
    positive_int,
)

PLACEHOLDER = "<｜hy_place▁holder▁no▁102｜>"
IMAGE_START = "<｜hy_place▁holder▁no▁100｜>"
IMAGE_END = "<｜hy_place▁holder▁no▁101｜>"
# HunYuanVLImageProcessorPil's class defaults (transformers 5.24), where the files say nothing.
DEFAULT_MIN_PIXELS = 512 * 512
DEFAULT_MAX_PIXELS = 2048 * 2048
DEFAULT_PATCH_SIZE = 16
DEFAULT_MERGE_SIZE = 2
_TOKENIZER_ATTRIBUTES = ("image_token", "image_start_token", "image_end_token", "pad_token")


@dataclass(frozen=True)
class HunyuanSettings:
    # Qwen-VL's field names (min_pixels / max_pixels: size.shortest_edge / longest_edge), so qwen_vl's
    # count and knob read them as they are.
    patch_size: int = DEFAULT_PATCH_SIZE
    merge_size: int = DEFAULT_MERGE_SIZE
    min_pixels: int = DEFAULT_MIN_PIXELS
    max_pixels: int = DEFAULT_MAX_PIXELS
    do_resize: bool = True
    token_merge_size: int = DEFAULT_MERGE_SIZE  # replace_image_token's image_processor.merge_size
    spatial_patch_size: int = 1  # replace_image_token's image_processor.spatial_patch_size
    cat_extra_token: bool = True
    placeholder: str = PLACEHOLDER  # tokenizer.image_token
    image_start: str = IMAGE_START  # tokenizer.image_start_token
    image_end: str = IMAGE_END  # tokenizer.image_end_token

    @property
    def raw_image_prompt(self) -> str:
        """What the checkpoint's template writes for an image, and what validate_inputs requires."""
        return f"{self.image_start}{self.placeholder}{self.image_end}"

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


def _tokenizer_token(kwargs: dict[str, Any], name: str) -> Any:
    """A token the tokenizer names: its init kwargs (an AddedToken's content), or the extra special tokens
    transformers keeps as model_specific_special_tokens."""
    value = kwargs.get(name)
    for section in ("extra_special_tokens", "model_specific_special_tokens"):
        extra = kwargs.get(section)
        if value is None and isinstance(extra, dict):
            value = extra.get(name)
    return getattr(value, "content", value)


def _one_bound_applies(image_processor: Any) -> bool:
    """Whether the installed image processor's _standardize_kwargs takes min_pixels or max_pixels alone
    (5.20.0 on); 5.16.1's replaces size only when both are given, so one alone changes nothing there.
    Read from the class itself, on a copy of its own size."""
    import warnings

    standardize = getattr(image_processor, "_standardize_kwargs", None)
    size = getattr(image_processor, "size", None)
    if standardize is None or size is None:
        return True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # 5.2x's deprecation of the two keys
            probe = standardize(size=dict(size), min_pixels=1)
    except Exception:  # noqa: BLE001 (a class that cannot be probed: the newer behaviour)
        return True
    return _edge(probe.get("size"), "shortest_edge") == 1


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> HunyuanSettings:
    """The images kwargs `processor(text, images)` ends up with, and the tokenizer's image tokens."""
    del model_config  # the count's settings all live in the image processor and the tokenizer
    tokenizer_kwargs = processor_config.get("tokenizer_init_kwargs") or {}

    def pipeline(key: str, default: Any) -> Any:
        if key in tokenizer_kwargs:  # _merge_kwargs step 5: tokenizer init kwargs
            return tokenizer_kwargs[key]
        value = getattr(image_processor, key, None)
        return default if value is None else value

    size = pipeline("size", None)
    min_pixels, max_pixels = _edge(size, "shortest_edge"), _edge(size, "longest_edge")
    low, high = tokenizer_kwargs.get("min_pixels"), tokenizer_kwargs.get("max_pixels")
    if (low is not None and high is not None) or _one_bound_applies(image_processor):
        if low is not None:
            min_pixels = low
        if high is not None:
            max_pixels = high
    if not min_pixels or not max_pixels:
        # HunYuanVLImageProcessorPil.resize raises the same on every image
        raise CountError(f"`size` dict must contain 'shortest_edge' and 'longest_edge' keys but got {size}.")
    tokens = {name: _tokenizer_token(tokenizer_kwargs, name) for name in _TOKENIZER_ATTRIBUTES}
    tokens["image_token"] = processor_config.get("tokenizer_image_token") or tokens["image_token"]
    for name in _TOKENIZER_ATTRIBUTES:
        if not isinstance(tokens[name], str) or not tokens[name]:
            # HunYuanVLProcessor.__init__'s own message
            raise CountError(
                f"Tokenizer is missing required attribute '{name}'. Add the corresponding mapping to "
                "`extra_special_tokens` in `tokenizer_config.json` or set the attribute manually before "
                "constructing the processor."
            )
    merge_size = positive_int(pipeline("merge_size", DEFAULT_MERGE_SIZE), "merge_size")
    return HunyuanSettings(
        patch_size=positive_int(pipeline("patch_size", DEFAULT_PATCH_SIZE), "patch_size"),
        merge_size=merge_size,
        min_pixels=positive_int(min_pixels, "size.shortest_edge"),
        max_pixels=positive_int(max_pixels, "size.longest_edge"),
        do_resize=bool(pipeline("do_resize", True)),
        token_merge_size=positive_int(
            getattr(image_processor, "merge_size", None) or merge_size, "merge_size"
        ),
        spatial_patch_size=positive_int(
            getattr(image_processor, "spatial_patch_size", None) or 1, "spatial_patch_size"
        ),
        cat_extra_token=bool(processor_config.get("cat_extra_token", True)),
        placeholder=tokens["image_token"],
        image_start=tokens["image_start_token"],
        image_end=tokens["image_end_token"],
    )


def tokens_for_grid(grid_h: int, grid_w: int, settings: HunyuanSettings) -> int:
    """replace_image_token: patch_h rows of patch_w merged tokens plus a newline each, plus two."""
    patch_h = grid_h // settings.token_merge_size // settings.spatial_patch_size
    patch_w = grid_w // settings.token_merge_size // settings.spatial_patch_size
    return patch_h * (patch_w + 1) + (2 if settings.cat_extra_token else 0)


def count(height: int, width: int, settings: HunyuanSettings, images_in_row: int = 1) -> ImageCount:
    """grid: (1, patch rows, patch columns) of the resized image, as image_grid_thw."""
    if height < 1 or width < 1:
        raise CountError(f"image of {width}x{height} pixels")
    got = qwen_vl.count(height, width, settings)  # smart_resize, or whole blocks with do_resize off
    _, grid_h, grid_w = got.grid
    return dataclasses.replace(got, tokens=tokens_for_grid(grid_h, grid_w, settings))


def count_exact(image_processor: Any, images: list[Any], settings: HunyuanSettings) -> list[ImageCount]:
    """Run the real image processor with the processor's images kwargs and read image_grid_thw."""
    try:
        output = image_processor(images=images, **settings.images_kwargs())
    except ValueError as exc:
        raise CountError(str(exc)) from None
    counts = []
    for grid in output["image_grid_thw"]:
        grid_t, grid_h, grid_w = (int(v) for v in grid)
        counts.append(
            ImageCount(
                grid_h * settings.patch_size,
                grid_w * settings.patch_size,
                (grid_t, grid_h, grid_w),
                tokens_for_grid(grid_h, grid_w, settings),
            )
        )
    return counts


def expand(count: ImageCount, settings: HunyuanSettings) -> Expansion:
    """The image token repeated; the start/end tokens around it are the template's text."""
    return (Run(settings.placeholder, count.tokens),)


def compose(rendered: str, expansions: Sequence[Expansion], settings: HunyuanSettings) -> list[Segment]:
    """validate_inputs first: every image token must sit between the start and end tokens."""
    start, token, end = settings.image_start, settings.placeholder, settings.image_end
    for match in re.finditer(re.escape(token), rendered):
        at = match.start()
        if not (
            at >= len(start)
            and rendered[at - len(start) : at] == start
            and rendered[at + len(token) : at + len(token) + len(end)] == end
        ):
            raise CountError(
                f"HunYuanVL image placeholders must be formatted as {start}{token}{end}: an image token of "
                "this row is not (the processor refuses the row; format prompts with the chat template)"
            )
    return compose_default(rendered, token, expansions)


def size_knob(settings: HunyuanSettings) -> Knob | str:
    """Qwen-VL's max_pixels knob: the resized sides never shrink as max_pixels grows, and the count is
    monotone in them; at the rounded area the shrinking (and its one-row clamp) stops."""
    return qwen_vl.size_knob(settings)


def shrink_hint(height: int, width: int, limit: float, settings: Any) -> str | None:
    """The smallest max_pixels that keeps an image's shrink within `limit` (rule VLM208's fix)."""
    if not isinstance(settings, HunyuanSettings) or not settings.do_resize:
        return None
    area = height * width
    unit = settings.factor**2
    pixels = max(unit, math.ceil(area / limit / unit) * unit)
    try:
        for _ in range(10_000):  # a few steps in practice; the bound only guards the loop
            resized_h, resized_w = qwen_vl.smart_resize(
                height, width, settings.factor, settings.min_pixels, pixels
            )
            if resized_h * resized_w * limit >= area:
                break
            pixels += unit
    except CountError:
        return None
    tokens = tokens_for_grid(resized_h // settings.patch_size, resized_w // settings.patch_size, settings)
    return (
        f"set max_pixels >= {pixels} ({tokens} image tokens for this image), or crop the region that matters"
    )


FAMILY = Family.define(
    __name__, name="hunyuan_vl", title="HunyuanOCR", processor_classes=("HunYuanVLProcessor",),
    image_processor_types=image_processor_types("HunYuanVL"), placeholder=PLACEHOLDER,
    raw_image_prompt=f"{IMAGE_START}{PLACEHOLDER}{IMAGE_END}", add_special_tokens=False,
    marker_tokens=(IMAGE_START, IMAGE_END, PLACEHOLDER),
)  # fmt: skip
