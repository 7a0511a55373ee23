"""ERNIE 4.5 VL (Ernie4_5_VLMoeProcessor): Qwen-VL's smart_resize, then one <|IMAGE_PLACEHOLDER|> per merged patch.

Processor (transformers 5.24 `Ernie4_5_VLMoeProcessor`): `__init__` takes its tokens from the tokenizer
(`tokenizer.image_token`, `image_start_token`, `image_end_token`: <|IMAGE_PLACEHOLDER|>, <|IMAGE_START|>,
<|IMAGE_END|> on the hub; a tokenizer without them cannot build the processor at all), and
`replace_image_token` turns each image token into

    image_token x (image_grid_thw[i].prod() // image_processor.merge_size**2)

and nothing else. The chat template writes the rest: `Picture N:<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>`
per image part (N counting the row's images), as the checkpoint's template (transformers'
convert_ernie4_5_vl_moe_to_hf.py DEFAULT_CHAT_TEMPLATE) does. `__call__` adds moe_mm_token_type_ids, no text.

Image processor (`Ernie4_5_VLMoeImageProcessorPil` and the torchvision `Ernie4_5_VLMoeImageProcessor`,
`_preprocess` / `resize` / `patchify`): `smart_resize(height, width, factor=patch_size * merge_size,
min_pixels=size.shortest_edge, max_pixels=size.longest_edge)`, which is Qwen2-VL's function character
for character (the 200:1 refusal, round-half-even to the factor grid, the floor/ceil rescale into
[min_pixels, max_pixels] of height * width), so this module calls `qwen_vl.smart_resize` and reuses
Qwen-VL's max_pixels knob and shrink hint. temporal_patch_size (1) only repeats pixel values: the grid is
(1, h / patch, w / patch). With do_resize off, `patchify` reshapes the image into whole
patch_size * merge_size blocks, so other sides are refused (Qwen-VL's count only asks for whole merged
patches, hence ERNIE's own count).

Settings `processor(text, images)` uses (`ProcessorMixin._merge_kwargs`): the image processor's
attributes (preprocessor_config.json, else the class defaults: size 3136..4842768, patch 14, merge 2),
overridden by the tokenizer's init kwargs where they name size, patch_size, merge_size or do_resize;
the token count divides by the image processor's own merge_size.

M-RoPE (`Ernie4_5_VLMoeModel.get_rope_index`): an image (t_merge_size 1) moves the next text position by
max(grid_h, grid_w) // config.vision_config.spatial_merge_size; <|IMAGE_START|> / <|IMAGE_END|> are text
positions there (mm_token_type_ids marks only the placeholder tokens).
"""

from __future__ import annotations

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
# Ernie4_5_VLMoeImageProcessorPil's class defaults (transformers 5.24).
DEFAULT_MIN_PIXELS = 56 * 56
DEFAULT_MAX_PIXELS = 28 * 28 * 6177
DEFAULT_PATCH_SIZE = 14
DEFAULT_MERGE_SIZE = 2


@dataclass(frozen=True)
class ErnieSettings:
    # The field names are Qwen-VL's (min_pixels / max_pixels: size.shortest_edge / size.longest_edge,
    # bounds on height * width as there), so qwen_vl.size_knob, qwen_vl.shrink_hint and the rules'
    # Qwen-VL hints read them as they are.
    patch_size: int = DEFAULT_PATCH_SIZE
    merge_size: int = DEFAULT_MERGE_SIZE
    min_pixels: int = DEFAULT_MIN_PIXELS
    max_pixels: int = DEFAULT_MAX_PIXELS
    do_resize: bool = True
    token_merge_size: int = DEFAULT_MERGE_SIZE  # replace_image_token's image_processor.merge_size
    rope_merge_size: int = DEFAULT_MERGE_SIZE  # get_rope_index's vision_config.spatial_merge_size
    placeholder: str = PLACEHOLDER  # tokenizer.image_token
    image_start_token: str = IMAGE_START
    image_end_token: str = IMAGE_END

    @property
    def raw_image_prompt(self) -> str:
        return f"{self.image_start_token}{self.placeholder}{self.image_end_token}"

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


def _token(tokenizer_kwargs: dict[str, Any], name: str, default: str) -> str:
    """A token the processor reads as tokenizer.<name>: top level, else the extra special tokens."""
    for section in (tokenizer_kwargs, tokenizer_kwargs.get("extra_special_tokens")):
        if isinstance(section, dict) and section.get(name) is not None:
            value = getattr(section[name], "content", section[name])
            if isinstance(value, str) and value:
                return value
    return default


def _edge(size: Any, name: str) -> Any:
    return size.get(name) if isinstance(size, dict) else getattr(size, name, None)


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> ErnieSettings:
    """The images kwargs `processor(text, images)` ends up with, and the tokenizer's image tokens."""
    tokenizer_kwargs = processor_config.get("tokenizer_init_kwargs") or {}

    def pipeline(key: str, default: Any) -> Any:
        if key in tokenizer_kwargs:  # _merge_kwargs step 5: tokenizer init kwargs
            return tokenizer_kwargs[key]
        value = getattr(image_processor, key, None)
        return default if value is None else value

    size = pipeline("size", None)
    min_pixels, max_pixels = _edge(size, "shortest_edge"), _edge(size, "longest_edge")
    if not min_pixels or not max_pixels:
        # Ernie4_5_VLMoeImageProcessorPil.resize raises the same on every image
        raise CountError(f"`size` dict must contain 'shortest_edge' and 'longest_edge' keys but got {size}.")
    vision = model_config.get("vision_config") if isinstance(model_config.get("vision_config"), dict) else {}
    merge_size = positive_int(pipeline("merge_size", DEFAULT_MERGE_SIZE), "merge_size")
    placeholder = processor_config.get("tokenizer_image_token") or _token(tokenizer_kwargs, "image_token", "")
    if not placeholder:
        raise CountError(
            "the tokenizer has no image_token, so Ernie4_5_VLMoeProcessor cannot be built "
            "(its __init__ reads tokenizer.image_token, image_start_token, image_end_token)"
        )
    return ErnieSettings(
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
        image_start_token=_token(tokenizer_kwargs, "image_start_token", IMAGE_START),
        image_end_token=_token(tokenizer_kwargs, "image_end_token", IMAGE_END),
    )


def count(height: int, width: int, settings: ErnieSettings, images_in_row: int = 1) -> ImageCount:
    """grid: (1, patch rows, patch columns) of the resized image, as image_grid_thw."""
    if height < 1 or width < 1:
        raise CountError(f"image of {width}x{height} pixels")
    factor = settings.factor
    if settings.do_resize:
        resized_height, resized_width = qwen_vl.smart_resize(
            height, width, factor, settings.min_pixels, settings.max_pixels
        )
    else:
        resized_height, resized_width = height, width
        if height % factor or width % factor:
            # patchify reshapes (C, H, W) into whole merge blocks of patches: numpy refuses the rest
            raise CountError(
                f"with do_resize off, an image of {width}x{height} is not whole blocks of "
                f"patch_size*merge_size = {factor} px: the image processor cannot cut it into patches"
            )
    grid_h, grid_w = resized_height // settings.patch_size, resized_width // settings.patch_size
    return ImageCount(
        resized_height, resized_width, (1, grid_h, grid_w), grid_h * grid_w // settings.token_merge_size**2
    )


def count_exact(image_processor: Any, images: list[Any], settings: ErnieSettings) -> list[ImageCount]:
    """Run the real image processor with the processor's images kwargs and read image_grid_thw."""
    return qwen_vl.counts_from_grid_thw(
        image_processor, images, settings.images_kwargs(), settings.patch_size, settings.token_merge_size
    )


def expand(count: ImageCount, settings: ErnieSettings) -> Expansion:
    """The placeholder once per merged patch; "Picture N:", <|IMAGE_START|> and <|IMAGE_END|> are the template's."""
    return (Run(settings.placeholder, count.tokens),)


def position_span(count: ImageCount, settings: ErnieSettings) -> int:
    """How far one image moves the M-RoPE position: max(grid_h, grid_w) // spatial_merge_size."""
    _, grid_h, grid_w = count.grid
    return max(grid_h, grid_w) // settings.rope_merge_size


def size_knob(settings: ErnieSettings) -> Knob | str:
    """Qwen-VL's max_pixels knob: the resize is Qwen-VL's, so are its grid and saturation."""
    return qwen_vl.size_knob(settings)


def shrink_hint(height: int, width: int, limit: float, settings: Any) -> str | None:
    """Qwen-VL's max_pixels fix (rule VLM208); ERNIE writes max_pixels as size.longest_edge."""
    return qwen_vl.shrink_hint(height, width, limit, settings)


FAMILY = Family.define(
    __name__, name="ernie_vl", title="ERNIE 4.5 VL", processor_classes=("Ernie4_5_VLMoeProcessor",),
    image_processor_types=image_processor_types("Ernie4_5_VLMoe"), placeholder=PLACEHOLDER,
    raw_image_prompt=f"{IMAGE_START}{PLACEHOLDER}{IMAGE_END}", marker_tokens=(IMAGE_START, IMAGE_END, PLACEHOLDER),
    trainer_templates={"llamafactory": ("ernie_vl",)},
)  # fmt: skip
