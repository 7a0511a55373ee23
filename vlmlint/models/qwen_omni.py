"""Qwen2.5-Omni and Qwen3-Omni images: Qwen2-VL's smart_resize, one image token per merged patch.

Processors (transformers 5.24 `Qwen2_5OmniProcessor` and `Qwen3OmniMoeProcessor`, both
`OmniModalProcessorMixin`s): `__init__` takes `tokenizer.image_token` (and the video/audio tokens and
the vision/audio bos/eos markers; a tokenizer without them cannot build the processor), and
`replace_image_token` turns each image token of the text into

    image_token x (image_grid_thw[i].prod() // image_processor.merge_size**2)

and nothing else (`OmniModalProcessorMixin._process_images` / `get_text_with_replacements`). The
checkpoints' chat templates write the markers around it: Qwen2.5-Omni `<|vision_bos|><|IMAGE|><|vision_eos|>`,
Qwen3-Omni `<|vision_start|><|image_pad|><|vision_end|>`. Only images are this module's: a row with audio
or video is counted by neither formula here.

Image processor: both checkpoints name `Qwen2VLImageProcessor` (`Qwen2VLImageProcessorPil` without
torchvision): `smart_resize` of image_processing_pil_qwen2_vl.py with factor = patch_size * merge_size
(Qwen2.5-Omni 14 * 2, Qwen3-Omni 16 * 2), bounds size.shortest_edge / longest_edge (the hub files' legacy
min_pixels 3136 / max_pixels 12845056, folded into size by `__init__`); this module calls
`qwen_vl.smart_resize` (the same function) and Qwen-VL's count. grid = (1, h / patch, w / patch).

Settings `processor(text, images)` uses (`ProcessorMixin._merge_kwargs`): the image processor's size,
patch_size, merge_size, temporal_patch_size, do_resize; the tokenizer's init kwargs override them where
they name them (min_pixels / max_pixels too, which `_standardize_kwargs` writes into the size). The
processors define no images_kwargs defaults of their own (their size defaults are videos_kwargs only).
The token count divides by the image processor's own merge_size.

M-RoPE (`Qwen2_5OmniPreTrainedModelForConditionalGeneration.get_rope_index` and Qwen3-Omni's copy, "TMRoPE"):
the token before the image tokens and the one after take one position each (the template's vision
bos/eos), the image's tokens take start + (t * position_id_per_seconds, h, w) on its
(1, grid_h/merge, grid_w/merge) grid (an image has t = 0 only: time does not stretch it), and the next text
position is the largest plus one: an image moves it by max(grid_h, grid_w) // spatial_merge_size.

The text model's max length sits in config.json's thinker_config.text_config (the loader reads it there).
"""

from __future__ import annotations

import dataclasses
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

QWEN25_IMAGE = "<|IMAGE|>"
QWEN25_BOS, QWEN25_EOS = "<|vision_bos|>", "<|vision_eos|>"
QWEN3_IMAGE = "<|image_pad|>"
QWEN3_BOS, QWEN3_EOS = "<|vision_start|>", "<|vision_end|>"
# Qwen2VLImageProcessorPil's class defaults (transformers 5.24), where the files say nothing.
DEFAULT_MIN_PIXELS = 56 * 56
DEFAULT_MAX_PIXELS = 28 * 28 * 1280
DEFAULT_PATCH_SIZE = 14
DEFAULT_MERGE_SIZE = 2
DEFAULT_TEMPORAL_PATCH_SIZE = 2


@dataclass(frozen=True)
class OmniSettings:
    # Qwen-VL's field names (min_pixels / max_pixels: size.shortest_edge / longest_edge), so qwen_vl's
    # count, knob and shrink hint read them as they are.
    patch_size: int = DEFAULT_PATCH_SIZE
    merge_size: int = DEFAULT_MERGE_SIZE
    temporal_patch_size: int = DEFAULT_TEMPORAL_PATCH_SIZE
    min_pixels: int = DEFAULT_MIN_PIXELS
    max_pixels: int = DEFAULT_MAX_PIXELS
    do_resize: bool = True
    token_merge_size: int = DEFAULT_MERGE_SIZE  # replace_image_token's image_processor.merge_size
    rope_merge_size: int = DEFAULT_MERGE_SIZE  # get_rope_index's thinker vision_config.spatial_merge_size
    placeholder: str = QWEN25_IMAGE  # tokenizer.image_token
    vision_bos: str = QWEN25_BOS  # tokenizer.vision_bos_token
    vision_eos: str = QWEN25_EOS  # tokenizer.vision_eos_token

    @property
    def raw_image_prompt(self) -> str:
        """What the checkpoints' templates write for an image: the markers around the image token."""
        return f"{self.vision_bos}{self.placeholder}{self.vision_eos}"

    @property
    def factor(self) -> int:
        return self.patch_size * self.merge_size

    def images_kwargs(self) -> dict[str, Any]:
        """What the processor passes its image processor (so count_exact runs the same pipeline)."""
        return {
            "size": {"shortest_edge": self.min_pixels, "longest_edge": self.max_pixels},
            "patch_size": self.patch_size,
            "merge_size": self.merge_size,
            "temporal_patch_size": self.temporal_patch_size,
            "do_resize": self.do_resize,
        }


def _edge(size: Any, name: str) -> Any:
    return size.get(name) if isinstance(size, dict) else getattr(size, name, None)


def _tokenizer_token(kwargs: dict[str, Any], name: str, default: str) -> str:
    """A marker the tokenizer names (init kwargs or extra_special_tokens), else the family's default."""
    extra = kwargs.get("extra_special_tokens")
    value = kwargs.get(name) or (extra.get(name) if isinstance(extra, dict) else None)
    return value if isinstance(value, str) and value else default


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> OmniSettings:
    """The images kwargs `processor(text, images)` ends up with, and the tokenizer's image token."""
    tokenizer_kwargs = processor_config.get("tokenizer_init_kwargs") or {}

    def pipeline(key: str, default: Any) -> Any:
        if key in tokenizer_kwargs:  # _merge_kwargs step 5: tokenizer init kwargs
            return tokenizer_kwargs[key]
        value = getattr(image_processor, key, None)
        return default if value is None else value

    size = pipeline("size", None)
    min_pixels, max_pixels = _edge(size, "shortest_edge"), _edge(size, "longest_edge")
    # _standardize_kwargs: call-time min_pixels / max_pixels (here from the tokenizer) replace the edges
    if tokenizer_kwargs.get("min_pixels") is not None:
        min_pixels = tokenizer_kwargs["min_pixels"]
    if tokenizer_kwargs.get("max_pixels") is not None:
        max_pixels = tokenizer_kwargs["max_pixels"]
    if not min_pixels or not max_pixels:
        # Qwen2VLImageProcessorPil.resize raises the same on every image
        raise CountError(f"`size` dict must contain 'shortest_edge' and 'longest_edge' keys but got {size}.")
    placeholder = processor_config.get("tokenizer_image_token")
    if not placeholder:
        raise CountError(
            "the tokenizer has no image_token, so the Omni processor cannot be built "
            "(its __init__ reads tokenizer.image_token)"
        )
    qwen3 = placeholder == QWEN3_IMAGE
    thinker = (
        model_config.get("thinker_config") if isinstance(model_config.get("thinker_config"), dict) else {}
    )
    vision = thinker.get("vision_config") if isinstance(thinker.get("vision_config"), dict) else {}
    merge_size = positive_int(pipeline("merge_size", DEFAULT_MERGE_SIZE), "merge_size")
    return OmniSettings(
        patch_size=positive_int(pipeline("patch_size", DEFAULT_PATCH_SIZE), "patch_size"),
        merge_size=merge_size,
        temporal_patch_size=positive_int(
            pipeline("temporal_patch_size", DEFAULT_TEMPORAL_PATCH_SIZE), "temporal_patch_size"
        ),
        min_pixels=positive_int(min_pixels, "size.shortest_edge"),
        max_pixels=positive_int(max_pixels, "size.longest_edge"),
        do_resize=bool(pipeline("do_resize", True)),
        token_merge_size=positive_int(
            getattr(image_processor, "merge_size", None) or merge_size, "merge_size"
        ),
        rope_merge_size=positive_int(vision.get("spatial_merge_size") or merge_size, "spatial_merge_size"),
        placeholder=str(placeholder),
        vision_bos=_tokenizer_token(tokenizer_kwargs, "vision_bos_token", QWEN3_BOS if qwen3 else QWEN25_BOS),
        vision_eos=_tokenizer_token(tokenizer_kwargs, "vision_eos_token", QWEN3_EOS if qwen3 else QWEN25_EOS),
    )


def count(height: int, width: int, settings: OmniSettings, images_in_row: int = 1) -> ImageCount:
    """Qwen-VL's count (smart_resize, or whole patch*merge blocks with do_resize off), divided by the image
    processor's own merge_size as replace_image_token divides."""
    if height < 1 or width < 1:
        raise CountError(f"image of {width}x{height} pixels")
    got = qwen_vl.count(height, width, settings)
    _, grid_h, grid_w = got.grid
    return dataclasses.replace(got, tokens=grid_h * grid_w // settings.token_merge_size**2)


def count_exact(image_processor: Any, images: list[Any], settings: OmniSettings) -> list[ImageCount]:
    """Run the real image processor with the processor's images kwargs and read image_grid_thw."""
    return qwen_vl.counts_from_grid_thw(
        image_processor, images, settings.images_kwargs(), settings.patch_size, settings.token_merge_size
    )


def expand(count: ImageCount, settings: OmniSettings) -> Expansion:
    """The image token once per merged patch; the vision bos/eos markers are the template's text."""
    return (Run(settings.placeholder, count.tokens),)


def position_span(count: ImageCount, settings: OmniSettings) -> int:
    """How far one image moves the M-RoPE position: max(grid_h, grid_w) // spatial_merge_size."""
    _, grid_h, grid_w = count.grid
    return max(grid_h, grid_w) // settings.rope_merge_size


def size_knob(settings: OmniSettings) -> Knob | str:
    """Qwen-VL's max_pixels knob (multiples of factor^2 from min_pixels)."""
    return qwen_vl.size_knob(settings)


def shrink_hint(height: int, width: int, limit: float, settings: Any) -> str | None:
    """Qwen-VL's max_pixels search (rule VLM208's fix): the same resize."""
    return qwen_vl.shrink_hint(height, width, limit, settings)


def trainer_template(pipeline: str, model: Any) -> str | None:
    """LLaMA-Factory registers qwen2_omni for Qwen2.5-Omni, qwen3_omni (a ReasoningTemplate) for
    Qwen3-Omni Thinking and qwen3_omni_nothink for the other Qwen3-Omni checkpoints, by name."""
    del pipeline
    if model.processor_class != "Qwen3OmniMoeProcessor":
        return "qwen2_omni"
    return (
        "qwen3_omni"
        if "thinking" in f"{model.checkpoint or ''} {model.name}".lower()
        else "qwen3_omni_nothink"
    )


FAMILY = Family.define(
    __name__, name="qwen_omni", title="Qwen2.5-Omni / Qwen3-Omni (images)",
    processor_classes=("Qwen2_5OmniProcessor", "Qwen3OmniMoeProcessor"),
    image_processor_types=image_processor_types("Qwen2VL"), placeholder=QWEN25_IMAGE,
    raw_image_prompt=f"{QWEN25_BOS}{QWEN25_IMAGE}{QWEN25_EOS}",
    marker_tokens=(QWEN25_BOS, QWEN25_EOS, QWEN25_IMAGE, "<|AUDIO|>", "<|VIDEO|>", "<|audio_bos|>", "<|audio_eos|>"),
    trainer_templates={"llamafactory": ("qwen2_omni", "qwen3_omni_nothink", "qwen3_omni")},
    choose_trainer_template=trainer_template, data_tokens=qwen_vl.GROUNDING_TOKENS,
)  # fmt: skip
