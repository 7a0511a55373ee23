"""GLM-4.1V / GLM-4.5V / GLM-OCR and GLM-4.6V: GLM's smart_resize, then one <|image|> per merged patch.

Processor (transformers 5.24 `Glm4vProcessor.replace_image_token`, the same in `Glm46VProcessor`, which
GLM-4.6V and GLM-OCR name; GLM-4.5V's glm4v_moe maps to Glm4vProcessor): each image token (the
tokenizer's `image_token` where it has one, else "<|image|>") becomes

    image_token x (image_grid_thw[i].prod() // image_processor.merge_size**2)

and nothing else: the chat template writes <|begin_of_image|> and <|end_of_image|> around it (GLM-4.1V's
hub template: `<|begin_of_image|><|image|><|end_of_image|>` for each image part). The processor's own
<|begin_of_image|>...<|end_of_image|> (`replace_frame_token_id`) is for video frames only.

Image processor (`Glm4vImageProcessorPil` / `Glm46VImageProcessorPil`, and their torchvision twins,
`smart_resize` of image_processing_glm4v.py): with factor = patch_size * merge_size and
T = temporal_patch_size (an image is resized as T frames, num_frames = temporal_factor = T),

1. a side under factor lifts the image: scale = max(factor / h, factor / w), h = int(h * scale),
   w = int(w * scale) (truncated, so 3 px can lift to 27 or 28);
2. the aspect ratio of the lifted image must be at most 200 (else ValueError, message kept);
3. h_bar, w_bar = round(h / factor) * factor, ... (Python's round: half to even);
4. if T * h_bar * w_bar > size.longest_edge: beta = sqrt(T * h * w / longest_edge), each side
   max(factor, floor(side / beta / factor) * factor); elif T * h_bar * w_bar < size.shortest_edge:
   beta = sqrt(shortest_edge / (T * h * w)), each side ceil(side * beta / factor) * factor.

So size.longest_edge / shortest_edge bound T times the image's pixels (the hub's 9633792 allows
4816896 pixels per image). grid = (1, h_bar / patch, w_bar / patch); tokens = grid_h * grid_w / merge^2.

This is not qwen_vl.smart_resize (ERNIE 4.5 VL's, which vlmlint.models.ernie_vl reuses): Qwen has no
lift (step 1) and compares h_bar * w_bar, not T * h_bar * w_bar, with the pixel bounds, and its beta
has no T inside the square root; dividing the bounds by T would round differently where they are
not multiples of T.

Settings `processor(text, images)` uses (`ProcessorMixin._merge_kwargs`): the processor has no
images_kwargs of its own, so the image processor's attributes (preprocessor_config.json, class defaults
where it says nothing), overridden by the tokenizer's init kwargs where they name size, patch_size,
merge_size, temporal_patch_size or do_resize. The token count divides by the image processor's own
merge_size (replace_image_token reads `self.image_processor.merge_size`, not the call's).

M-RoPE (`Glm4vModel.get_rope_index`, the same in Glm46V, GlmOcr and Glm4vMoe): an image's tokens take
positions on its (1, grid_h / m, grid_w / m) grid, m = config.vision_config.spatial_merge_size, and the
next text position moves on by max(grid_h, grid_w) // m, as Qwen2-VL's.
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

MAX_ASPECT_RATIO = 200
PLACEHOLDER = "<|image|>"
BEGIN_OF_IMAGE = "<|begin_of_image|>"
END_OF_IMAGE = "<|end_of_image|>"
# Glm4vImageProcessorPil's class defaults (transformers 5.24): size, patch, temporal patch, merge.
DEFAULT_MIN_PIXELS = 112 * 112
DEFAULT_MAX_PIXELS = 28 * 28 * 15000
DEFAULT_PATCH_SIZE = 14
DEFAULT_TEMPORAL_PATCH_SIZE = 2
DEFAULT_MERGE_SIZE = 2
# The image settings `_merge_kwargs` lets tokenizer_config.json override.
IMAGE_KWARGS = ("size", "patch_size", "merge_size", "temporal_patch_size", "do_resize")


@dataclass(frozen=True)
class GlmSettings:
    patch_size: int = DEFAULT_PATCH_SIZE
    merge_size: int = DEFAULT_MERGE_SIZE
    temporal_patch_size: int = DEFAULT_TEMPORAL_PATCH_SIZE
    # size.shortest_edge / size.longest_edge: bounds on T * height * width. Not named min_pixels /
    # max_pixels / factor: the rules' Qwen-VL hints (VLM204's min_pixels, the max_pixels cap) read those
    # names as bounds on height * width, which they are not here.
    shortest_edge: int = DEFAULT_MIN_PIXELS
    longest_edge: int = DEFAULT_MAX_PIXELS
    do_resize: bool = True
    # replace_image_token divides by the image processor's merge_size, whatever the call passed.
    token_merge_size: int = DEFAULT_MERGE_SIZE
    # get_rope_index's config.vision_config.spatial_merge_size.
    rope_merge_size: int = DEFAULT_MERGE_SIZE
    placeholder: str = PLACEHOLDER  # the processor's image_token (the tokenizer's, else <|image|>)

    @property
    def raw_image_prompt(self) -> str:
        return f"{BEGIN_OF_IMAGE}{self.placeholder}{END_OF_IMAGE}"

    @property
    def resize_factor(self) -> int:
        return self.patch_size * self.merge_size

    def images_kwargs(self) -> dict[str, Any]:
        """What the processor passes its image processor (so count_exact runs the same pipeline)."""
        return {
            "size": {"shortest_edge": self.shortest_edge, "longest_edge": self.longest_edge},
            "patch_size": self.patch_size,
            "merge_size": self.merge_size,
            "temporal_patch_size": self.temporal_patch_size,
            "do_resize": self.do_resize,
        }


def _edge(size: Any, name: str) -> Any:
    return size.get(name) if isinstance(size, dict) else getattr(size, name, None)


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> GlmSettings:
    """The images kwargs `processor(text, images)` ends up with, and the processor's image token."""
    tokenizer_kwargs = processor_config.get("tokenizer_init_kwargs") or {}

    def pipeline(key: str, default: Any) -> Any:
        if key in tokenizer_kwargs:  # _merge_kwargs step 5: tokenizer init kwargs
            return tokenizer_kwargs[key]
        value = getattr(image_processor, key, None)
        return default if value is None else value

    size = pipeline("size", None)
    min_pixels, max_pixels = _edge(size, "shortest_edge"), _edge(size, "longest_edge")
    if not min_pixels or not max_pixels:
        # Glm4vImageProcessorPil.resize raises the same on every image
        raise CountError(f"`size` dict must contain 'shortest_edge' and 'longest_edge' keys but got {size}.")
    vision = model_config.get("vision_config") if isinstance(model_config.get("vision_config"), dict) else {}
    merge_size = positive_int(pipeline("merge_size", DEFAULT_MERGE_SIZE), "merge_size")
    token_merge = getattr(image_processor, "merge_size", None) or DEFAULT_MERGE_SIZE
    placeholder = processor_config.get("tokenizer_image_token") or PLACEHOLDER
    return GlmSettings(
        patch_size=positive_int(pipeline("patch_size", DEFAULT_PATCH_SIZE), "patch_size"),
        merge_size=merge_size,
        temporal_patch_size=positive_int(
            pipeline("temporal_patch_size", DEFAULT_TEMPORAL_PATCH_SIZE), "temporal_patch_size"
        ),
        shortest_edge=positive_int(min_pixels, "size.shortest_edge"),
        longest_edge=positive_int(max_pixels, "size.longest_edge"),
        do_resize=bool(pipeline("do_resize", True)),
        token_merge_size=positive_int(token_merge, "merge_size"),
        rope_merge_size=positive_int(vision.get("spatial_merge_size") or merge_size, "spatial_merge_size"),
        placeholder=str(placeholder),
    )


def smart_resize(
    height: int, width: int, factor: int, min_pixels: int, max_pixels: int, temporal_factor: int
) -> tuple[int, int]:
    """image_processing_glm4v.smart_resize for one image (num_frames = temporal_factor), to the bit."""
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height = int(height * scale)
        width = int(width * scale)
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise CountError(
            f"absolute aspect ratio must be smaller than {MAX_ASPECT_RATIO}, got {max(height, width) / min(height, width)}"
        )
    num_frames = temporal_factor
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    t_bar = round(num_frames / temporal_factor) * temporal_factor
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt((num_frames * height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (num_frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def resized(height: int, width: int, settings: GlmSettings) -> tuple[int, int]:
    return smart_resize(
        height,
        width,
        settings.resize_factor,
        settings.shortest_edge,
        settings.longest_edge,
        settings.temporal_patch_size,
    )


def count(height: int, width: int, settings: GlmSettings, images_in_row: int = 1) -> ImageCount:
    """grid: (1, patch rows, patch columns) of the resized image, as image_grid_thw."""
    if height < 1 or width < 1:
        raise CountError(f"image of {width}x{height} pixels")
    if settings.do_resize:
        resized_height, resized_width = resized(height, width, settings)
    else:
        resized_height, resized_width = height, width
    grid_h, grid_w = resized_height // settings.patch_size, resized_width // settings.patch_size
    if resized_height % settings.resize_factor or resized_width % settings.resize_factor:
        # patchify reshapes (C, H, W) into whole merge blocks of patches: numpy refuses the rest
        raise CountError(
            f"with do_resize off, an image of {width}x{height} is not whole blocks of "
            f"patch_size*merge_size = {settings.resize_factor} px: the image processor cannot cut it into patches"
        )
    return ImageCount(
        resized_height, resized_width, (1, grid_h, grid_w), grid_h * grid_w // settings.token_merge_size**2
    )


def count_exact(image_processor: Any, images: list[Any], settings: GlmSettings) -> list[ImageCount]:
    """Run the real image processor with the processor's images kwargs and read image_grid_thw."""
    return qwen_vl.counts_from_grid_thw(
        image_processor, images, settings.images_kwargs(), settings.patch_size, settings.token_merge_size
    )


def expand(count: ImageCount, settings: GlmSettings) -> Expansion:
    """<|image|> once per merged patch; <|begin_of_image|> / <|end_of_image|> are the template's."""
    return (Run(settings.placeholder, count.tokens),)


def position_span(count: ImageCount, settings: GlmSettings) -> int:
    """How far one image moves the M-RoPE position: max(grid_h, grid_w) // spatial_merge_size."""
    _, grid_h, grid_w = count.grid
    return max(grid_h, grid_w) // settings.rope_merge_size


def max_pixels_saturation(height: int, width: int, settings: GlmSettings) -> int:
    """The size.longest_edge from which smart_resize no longer shrinks this image: T times its
    rounded area (of the lifted image, where a side is under factor)."""
    factor = settings.resize_factor
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    return settings.temporal_patch_size * (round(height / factor) * factor) * (round(width / factor) * factor)


def size_knob(settings: GlmSettings) -> Knob | str:
    """size.longest_edge, on the grid of multiples of T * factor^2 from size.shortest_edge."""
    factor = settings.resize_factor
    if not settings.do_resize:
        return (
            "do_resize is false: size.longest_edge has no effect and every image keeps its size "
            f"(sides must be multiples of {factor}); only the max length is recommended"
        )
    step = settings.temporal_patch_size * factor * factor

    def shape(height: int, width: int) -> tuple[tuple[int, ...], int]:
        # As Qwen-VL's: below the saturation the image is shrunk and its sides never shrink as the
        # bound grows; at the saturation the shrink (and its one-row clamp) stops.
        saturation = max_pixels_saturation(height, width, settings)
        return (saturation,), saturation

    return Knob(
        name="size.longest_edge",
        current=settings.longest_edge,
        step=step,
        low=-(-settings.shortest_edge // step) * step,
        settings_at=lambda value: dataclasses.replace(settings, longest_edge=value),
        shape=shape,
        open_ended=True,
        text_unchanged=True,
        grid=(
            f"multiples of temporal_patch_size*(patch_size*merge_size)^2 = {step}, "
            f"from size.shortest_edge {settings.shortest_edge}"
        ),
    )


def shrink_hint(height: int, width: int, limit: float, settings: Any) -> str | None:
    """The smallest size.longest_edge that keeps an image's shrink within `limit` (rule VLM208's fix)."""
    if not isinstance(settings, GlmSettings) or not settings.do_resize:
        return None
    area = height * width
    unit = settings.temporal_patch_size * settings.resize_factor**2
    pixels = max(unit, math.ceil(settings.temporal_patch_size * area / limit / unit) * unit)
    try:
        for _ in range(10_000):  # a few steps in practice; the bound only guards the loop
            resized_h, resized_w = resized(height, width, dataclasses.replace(settings, longest_edge=pixels))
            if resized_h * resized_w * limit >= area:
                break
            pixels += unit
    except CountError:
        return None
    tokens = resized_h * resized_w // settings.resize_factor**2
    return (
        f"set size.longest_edge >= {pixels} (the bound is on temporal_patch_size x the pixels; "
        f"{tokens} image tokens for this image), or crop the region that matters"
    )


def trainer_template(pipeline: str, model: Any) -> str | None:
    """LLaMA-Factory registers its templates by checkpoint name: glm_ocr for GLM-OCR, glm4_5v for GLM-4.5V and
    GLM-4.6V (Glm46VProcessor), glm4v for GLM-4.1V; glm4v and glm4_5v count the same (tool formats aside)."""
    del pipeline
    names = f"{model.checkpoint or ''} {model.name}".lower()
    if "glm-ocr" in names or "glm_ocr" in names:
        return "glm_ocr"
    if model.processor_class == "Glm46VProcessor" or "4.5v" in names or "4.6v" in names:
        return "glm4_5v"
    return "glm4v"


FAMILY = Family.define(
    __name__, name="glm4v", title="GLM-4.1V / GLM-4.5V / GLM-4.6V / GLM-OCR",
    processor_classes=("Glm4vProcessor", "Glm46VProcessor"),
    image_processor_types=image_processor_types("Glm4v") + image_processor_types("Glm46V"),
    placeholder=PLACEHOLDER, raw_image_prompt=f"{BEGIN_OF_IMAGE}{PLACEHOLDER}{END_OF_IMAGE}",
    marker_tokens=(BEGIN_OF_IMAGE, END_OF_IMAGE, PLACEHOLDER),
    trainer_templates={"llamafactory": ("glm4v", "glm4_5v", "glm_ocr")}, choose_trainer_template=trainer_template,
)  # fmt: skip
