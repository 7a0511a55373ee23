"""Qwen2-VL, Qwen2.5-VL and Qwen3-VL: smart_resize, then one <|image_pad|> per merged patch.

Processor (transformers 5.x `Qwen2VLProcessor.replace_image_token`): each <|image_pad|> the chat
template writes between <|vision_start|> and <|vision_end|> becomes grid_t*grid_h*grid_w / merge^2
copies of itself; the start and end tokens stay.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vlmlint.models.base import (
    CountError,
    Expansion,
    Family,
    ImageCount,
    Knob,
    Run,
    VideoCount,
    VideoPositions,
    image_processor_types,
    positive_int,
    refuse_channels_first_frames,
)
from vlmlint.models.compat import installed_at_least
from vlmlint.models.knobs import (
    FPS_GRID,
    FPS_WORDS,
    FRAMES_GRID,
    FRAMES_WORDS,
    PATCHES_GRID,
    VideoKnob,
    grid_of,
    patches_words,
    settings_at,
)
from vlmlint.records import VideoMeta

MAX_ASPECT_RATIO = 200
PLACEHOLDER = "<|image_pad|>"
VIDEO_PLACEHOLDER = "<|video_pad|>"
# Qwen-VL's grounding format (the Qwen2-VL / Qwen2.5-VL model cards, ms-swift's grounding datasets):
# `<|object_ref_start|>a dog<|object_ref_end|><|box_start|>(10,20),(300,400)<|box_end|>`, quads for OCR.
GROUNDING_TOKENS = (
    "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
)  # fmt: skip


@dataclass(frozen=True)
class QwenSettings:
    patch_size: int
    merge_size: int
    temporal_patch_size: int
    min_pixels: int
    max_pixels: int
    do_resize: bool = True
    # The processor's image token: the tokenizer's image_token when it names one (Qwen2VLProcessor.__init__).
    placeholder: str = PLACEHOLDER
    # Qwen2.5-VL's vision_config.tokens_per_second (its video positions' time scale; video_position_span);
    # None for the other models, or with no config.json to read it from.
    tokens_per_second: float | None = None

    @property
    def raw_image_prompt(self) -> str:
        return f"<|vision_start|>{self.placeholder}<|vision_end|>"

    @property
    def factor(self) -> int:
        return self.patch_size * self.merge_size


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> QwenSettings:
    size = image_processor.size  # transformers folds legacy min_pixels/max_pixels keys into size
    # A SizeDict in the backend classes (5.8.0 on), a plain dict in the slow class of 5.0 and 5.2
    min_pixels = size.get("shortest_edge") if isinstance(size, dict) else getattr(size, "shortest_edge", None)
    max_pixels = size.get("longest_edge") if isinstance(size, dict) else getattr(size, "longest_edge", None)
    if not min_pixels or not max_pixels:
        raise CountError(f"size must hold shortest_edge and longest_edge (pixel counts), got {size}")
    placeholder = processor_config.get("tokenizer_image_token") or PLACEHOLDER
    return QwenSettings(
        patch_size=positive_int(image_processor.patch_size, "patch_size"),
        merge_size=positive_int(image_processor.merge_size, "merge_size"),
        temporal_patch_size=positive_int(image_processor.temporal_patch_size, "temporal_patch_size"),
        min_pixels=positive_int(min_pixels, "min_pixels"),
        max_pixels=positive_int(max_pixels, "max_pixels"),
        do_resize=bool(getattr(image_processor, "do_resize", True)),
        placeholder=str(placeholder),
        tokens_per_second=_tokens_per_second(model_config),
    )


# Qwen2_5_VLVisionConfig.tokens_per_second's class default (transformers 5.24.0; its docstring says 41),
# which a config.json without the key gets.
TOKENS_PER_SECOND_DEFAULT = 4


def _tokens_per_second(model_config: dict[str, Any]) -> float | None:
    """Qwen2_5_VLConfig's vision_config.tokens_per_second (model_type qwen2_5_vl only: the other
    models' get_rope_index does not scale time); None where the config does not say."""
    if model_config.get("model_type") != "qwen2_5_vl":
        return None
    vision = model_config.get("vision_config", {})
    if not isinstance(vision, dict):
        return None
    value = vision.get("tokens_per_second", TOKENS_PER_SECOND_DEFAULT)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        return None
    return value


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """transformers' smart_resize, to the bit: Python's round() is banker's rounding there too."""
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise CountError(
            f"absolute aspect ratio must be smaller than {MAX_ASPECT_RATIO}, got {max(height, width) / min(height, width)}"
        )
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def loader_size(height: int, width: int, sizing: Any, settings: QwenSettings) -> tuple[int, int]:
    """Family.loader_size: qwen-vl-utils' fetch_image size for a row's per-image settings."""
    return fetch_image_size(height, width, sizing, settings.factor)


def fetch_image_size(height: int, width: int, sizing: Any, factor: int) -> tuple[int, int]:
    """(height, width) qwen-vl-utils 0.0.14 resizes an image to before the processor sees it, from a
    row's per-image settings (vision_process.py fetch_image with image_patch_size * 2 = `factor`):
    resized_height and resized_width when both are given, else min_pixels / max_pixels (defaults 4 and
    16384 factor-sized tokens), through its own smart_resize (a side is at least `factor`; no floor
    on the downscale branch). Its ValueError (aspect ratio above 200) and AssertionError (max_pixels
    below min_pixels) are CountErrors."""
    if sizing.resized_height is not None and sizing.resized_width is not None:
        height, width = sizing.resized_height, sizing.resized_width
        min_pixels, max_pixels = 4 * factor**2, 16384 * factor**2
    else:
        min_pixels = sizing.min_pixels if sizing.min_pixels is not None else 4 * factor**2
        max_pixels = sizing.max_pixels if sizing.max_pixels is not None else 16384 * factor**2
    if max_pixels < min_pixels:
        raise CountError("qwen-vl-utils: the max_pixels of image must be greater than or equal to min_pixels")
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise CountError(
            f"qwen-vl-utils: absolute aspect ratio must be smaller than {MAX_ASPECT_RATIO}, "
            f"got {max(height, width) / min(height, width)}"
        )
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = math.floor(height / beta / factor) * factor
        w_bar = math.floor(width / beta / factor) * factor
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    if not h_bar or not w_bar:
        raise CountError(
            f"qwen-vl-utils resizes the {width}x{height} image to {w_bar}x{h_bar}: PIL refuses it"
        )
    return h_bar, w_bar


def max_pixels_saturation(height: int, width: int, factor: int) -> int:
    """The max_pixels from which smart_resize no longer shrinks this image: its rounded area.

    At max_pixels >= round(h/factor)*factor * round(w/factor)*factor the downscale branch is never
    taken, so every larger max_pixels gives the same size. Below it the image is shrunk and its sides
    never decrease as max_pixels grows; but the shrink keeps at least one factor-sized row, which can
    give more tokens just below this point than at it (vlmlint stats cuts its search here).
    """
    return round(height / factor) * factor * (round(width / factor) * factor)


def count(height: int, width: int, settings: QwenSettings, images_in_row: int = 1) -> ImageCount:
    if settings.do_resize:
        resized_height, resized_width = smart_resize(
            height, width, settings.factor, settings.min_pixels, settings.max_pixels
        )
    else:
        resized_height, resized_width = height, width
    grid_h, grid_w = resized_height // settings.patch_size, resized_width // settings.patch_size
    if grid_h % settings.merge_size or grid_w % settings.merge_size or not grid_h or not grid_w:
        raise CountError(
            f"{width}x{height} is not a multiple of patch*merge={settings.factor} and do_resize is off"
        )
    return ImageCount(
        resized_height, resized_width, (1, grid_h, grid_w), grid_h * grid_w // settings.merge_size**2
    )


def count_exact(image_processor: Any, images: list[Any], settings: QwenSettings) -> list[ImageCount]:
    """Run the model's real image processor on the row's decoded images and read image_grid_thw."""
    return counts_from_grid_thw(image_processor, images, {}, settings.patch_size, settings.merge_size)


def counts_from_grid_thw(
    image_processor: Any, images: list[Any], kwargs: dict[str, Any], patch_size: int, merge_size: int
) -> list[ImageCount]:
    """Run a Qwen-style image processor and read each image's count from its image_grid_thw (one token
    per merge_size x merge_size patches); the families whose processors return that grid share it."""
    try:
        output = image_processor(images=images, **kwargs)
    except ValueError as exc:
        raise CountError(str(exc)) from None
    counts = []
    for grid in output["image_grid_thw"]:
        grid_t, grid_h, grid_w = (int(v) for v in grid)
        tokens = grid_t * grid_h * grid_w // merge_size**2
        counts.append(ImageCount(grid_h * patch_size, grid_w * patch_size, (grid_t, grid_h, grid_w), tokens))
    return counts


def expand(count: ImageCount, settings: QwenSettings) -> Expansion:
    """<|image_pad|> repeated once per merged patch; <|vision_start|>/<|vision_end|> are the template's."""
    return (Run(settings.placeholder, count.tokens),)


def position_span(count: ImageCount, settings: QwenSettings) -> int:
    """How far one image moves the M-RoPE position, as get_rope_index does for images (transformers 5.24.0).

    Qwen2VLModel.get_rope_index (and the Qwen2.5-VL / Qwen3-VL copies) gives an image's tokens the
    positions start + (t, h, w) on its (grid_t, grid_h/merge, grid_w/merge) grid, then moves the next
    text position on by max(grid_h, grid_w) // merge. An image has grid_t = 1, so this is also
    max(t, h/merge, w/merge), the image's largest position minus its start, plus one.
    """
    _, grid_h, grid_w = count.grid
    return max(grid_h, grid_w) // settings.merge_size


def size_knob(settings: QwenSettings) -> Knob | str:
    """max_pixels, on the grid of multiples of factor^2 from min_pixels (`vlmlint stats`)."""
    factor = settings.factor
    if not settings.do_resize:
        return (
            "do_resize is false: max_pixels has no effect and every image keeps its size "
            f"(sides must be multiples of {factor}); only the max length is recommended"
        )
    step = factor * factor

    def shape(height: int, width: int) -> tuple[tuple[int, ...], int]:
        # Below its rounded area an image is shrunk, and its sides never shrink as max_pixels grows;
        # at the rounded area the shrinking (and its one-row clamp) stops: the count may drop there.
        saturation = max_pixels_saturation(height, width, factor)
        return (saturation,), saturation

    return Knob(
        name="max_pixels",
        current=settings.max_pixels,
        step=step,
        low=-(-settings.min_pixels // step) * step,
        settings_at=lambda value: dataclasses.replace(settings, max_pixels=value),
        shape=shape,
        open_ended=True,
        text_unchanged=True,
        grid=f"multiples of (patch_size*merge_size)^2 = {step}, from min_pixels {settings.min_pixels}",
    )


def _positive(settings: Any, name: str) -> int | None:
    value = getattr(settings, name, None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def shrink_hint(height: int, width: int, limit: float, settings: Any) -> str | None:
    """The smallest max_pixels that keeps an image's shrink within `limit` (rule VLM208's fix)."""
    factor = _positive(settings, "factor")
    if not factor or not _positive(settings, "max_pixels"):
        return None
    # The smallest max_pixels (a multiple of factor^2) whose smart_resize, which floors each side
    # to the factor grid, keeps the shrink within the limit.
    area = height * width
    unit = factor * factor
    min_pixels = _positive(settings, "min_pixels") or unit
    pixels = math.ceil(area / limit / unit) * unit
    resized_h, resized_w = smart_resize(height, width, factor, min_pixels, pixels)
    for _ in range(10_000):  # a few steps in practice; the bound only guards the loop
        if resized_h * resized_w * limit >= area:
            break
        pixels += unit
        resized_h, resized_w = smart_resize(height, width, factor, min_pixels, pixels)
    return (
        f"set max_pixels >= {pixels} ({resized_h * resized_w // unit} image tokens for this image), "
        "or crop the region that matters"
    )


# ---- videos: transformers 5.24 Qwen2VLVideoProcessor (Qwen2-VL, Qwen2.5-VL) and Qwen3VLVideoProcessor
# with Qwen3VLProcessor's timestamps (Qwen3-VL) ------------------------------------------------------

VIDEO_PROCESSORS = {
    # video processor class -> the processor classes whose video expansion vlmlint reproduces with it
    "Qwen2VLVideoProcessor": ("Qwen2VLProcessor", "Qwen2_5_VLProcessor"),
    "Qwen3VLVideoProcessor": ("Qwen3VLProcessor",),
}


# The first release whose Qwen3VLProcessor collapses the template's pair around a video.
WRAPPER_COLLAPSED_SINCE = "5.25.0"


@dataclass(frozen=True)
class QwenVideoSettings:
    """The video processor's settings (vlmlint/models/video_config.py reads them as from_pretrained)."""

    processor: str
    patch_size: int
    merge_size: int
    temporal_patch_size: int
    min_pixels: int  # size["shortest_edge"]
    max_pixels: int  # size["longest_edge"]
    do_resize: bool
    do_sample_frames: bool
    fps: float | None
    num_frames: int | None
    min_frames: int
    max_frames: int
    cap_pixels_per_frame: bool
    max_video_tokens: int
    placeholder: str = VIDEO_PLACEHOLDER
    # Qwen2_5_VLProcessor: it hands the model second_per_grid_ts, whose get_rope_index steps a video's
    # temporal positions by tokens_per_second (the model config's; None: not known) times it.
    time_scaled: bool = False
    tokens_per_second: float | None = None
    # Qwen3VLProcessor.get_text_with_replacements (transformers 5.25+) turns the template's
    # <|vision_start|><|video_pad|><|vision_end|> into a bare <|video_pad|> before expanding it
    wrapper_collapsed: bool = field(default_factory=lambda: installed_at_least(WRAPPER_COLLAPSED_SINCE))

    @property
    def factor(self) -> int:
        return self.patch_size * self.merge_size

    @property
    def qwen3(self) -> bool:
        """Qwen3VLVideoProcessor: its own sampling, a 3-D pixel budget, and timestamps in the text."""
        return self.processor == "Qwen3VLVideoProcessor"


def _optional_number(config: dict[str, Any], key: str) -> float | None:
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise CountError(f"video processor {key} must be a positive number, got {value!r}")
    return value


def video_settings_from(
    config: dict[str, Any], image_settings: Any, processor_class: str | None
) -> QwenVideoSettings:
    """The video processor's settings; Qwen2VLVideoProcessor.__init__ lets min_pixels / max_pixels keys
    override its size (Qwen3VLVideoProcessor reads size only)."""
    # (the video processor has its own file, or reads the image processor's; the model config's time
    # scale comes with the image settings)
    processor = config.get("video_processor_type")
    if processor not in VIDEO_PROCESSORS:
        raise CountError(
            f"its video processor {processor} is not one vlmlint reproduces ({', '.join(VIDEO_PROCESSORS)})"
        )
    if processor_class not in VIDEO_PROCESSORS[processor]:
        raise CountError(f"{processor_class} with a {processor} is not a pairing vlmlint reproduces")
    size = dict(config.get("size") or {})
    if processor == "Qwen2VLVideoProcessor":
        if config.get("min_pixels") is not None:
            size["shortest_edge"] = config["min_pixels"]
        if config.get("max_pixels") is not None:
            size["longest_edge"] = config["max_pixels"]
    if not size.get("shortest_edge") or not size.get("longest_edge"):
        raise CountError(f"`size` dict must contain 'shortest_edge' and 'longest_edge' keys but got {size}.")
    num_frames = config.get("num_frames")
    return QwenVideoSettings(
        processor=processor,
        patch_size=positive_int(config.get("patch_size", 14), "patch_size"),
        merge_size=positive_int(config.get("merge_size", 2), "merge_size"),
        temporal_patch_size=positive_int(config.get("temporal_patch_size", 2), "temporal_patch_size"),
        min_pixels=positive_int(size["shortest_edge"], "size.shortest_edge"),
        max_pixels=positive_int(size["longest_edge"], "size.longest_edge"),
        do_resize=bool(config.get("do_resize", True)),
        do_sample_frames=bool(config.get("do_sample_frames")),
        fps=_optional_number(config, "fps"),
        num_frames=None if num_frames is None else positive_int(num_frames, "num_frames"),
        min_frames=positive_int(config.get("min_frames", 4), "min_frames"),
        max_frames=positive_int(config.get("max_frames", 768), "max_frames"),
        cap_pixels_per_frame=bool(config.get("cap_pixels_per_frame")),
        max_video_tokens=positive_int(config.get("max_video_tokens", 128000), "max_video_tokens"),
        time_scaled=processor_class == "Qwen2_5_VLProcessor",
        tokens_per_second=getattr(image_settings, "tokens_per_second", None),
    )


def video_wrapper(settings: QwenVideoSettings) -> str:
    """The text the processor turns into the bare placeholder before expanding it (Family.video_wrapper):
    Qwen3VLProcessor's, from transformers 5.25 (Qwen2VLProcessor keeps the template's pair)."""
    if settings.qwen3 and settings.wrapper_collapsed:
        return f"<|vision_start|>{settings.placeholder}<|vision_end|>"
    return ""


def arange_length(stop: float, step: float) -> int:
    """len(torch.arange(0, stop, step)): ceil(stop / step) in double precision, as torch sizes it."""
    return max(0, math.ceil(stop / step))


def _capped(wanted: float, kept: int, meta: VideoMeta, fps: float, max_frames: int) -> str | None:
    """The words for a sampler that keeps max_frames where its rate asks for more frames."""
    if kept >= max_frames and wanted > max_frames and meta.fps:
        seconds = meta.frames / meta.fps
        return (
            f"fps {fps:g} over {seconds:.1f} s asks for {wanted:.0f} frames; max_frames {max_frames} keeps "
            f"{kept} (one every {seconds / kept:.2f} s)"
        )
    return None


def sampled_frames(meta: VideoMeta, settings: QwenVideoSettings) -> tuple[int, str]:
    """How many frames Qwen2VLVideoProcessor keeps (sample_frames), and the mode in words."""
    total = meta.frames
    if not settings.do_sample_frames:
        return total, "every frame (do_sample_frames is false)"
    if meta.frames_from == "frame list":
        raise CountError(
            "Sampling frames from a list of images is not supported! Set `do_sample_frames=False`."
        )
    tp = settings.temporal_patch_size
    num_frames, fps = settings.num_frames, settings.fps
    if num_frames is not None and fps is not None:
        raise CountError("`num_frames` and `fps` are mutually exclusive arguments, please use only one!")
    if num_frames is not None:
        wanted = round(num_frames / tp) * tp
        mode = f"num_frames {num_frames}"
    elif fps is not None:
        if meta.fps is None:
            raise CountError("Asked to sample `fps` frames per second but no video metadata was provided")
        max_frames = math.floor(min(settings.max_frames, total) / tp) * tp
        wanted = total / meta.fps * fps
        wanted = min(max(wanted, settings.min_frames), max_frames, total)
        wanted = math.floor(wanted / tp) * tp
        mode = f"fps {fps:g} (min_frames {settings.min_frames}, max_frames {settings.max_frames})"
    else:
        return total, "every frame (no fps or num_frames)"
    if wanted > total:
        raise CountError(
            f"Video can't be sampled. The inferred `num_frames={wanted}` exceeds `total_num_frames={total}`."
        )
    if wanted == 0:
        raise CountError(f"a {total}-frame video samples 0 frames: the processor divides by zero")
    return arange_length(total, total / wanted), mode


def qwen3_sampled_indices(meta: VideoMeta, settings: QwenVideoSettings) -> tuple[list[int], str]:
    """Qwen3VLVideoProcessor.sample_frames: the frame indices it keeps, and the mode in words."""
    total = meta.frames
    if not settings.do_sample_frames:
        return list(range(total)), "every frame (do_sample_frames is false)"
    if meta.frames_from == "frame list":
        raise CountError(
            "Sampling frames from a list of images is not supported! Set `do_sample_frames=False`."
        )
    num_frames, fps = settings.num_frames, settings.fps
    if num_frames is not None and fps is not None:
        raise CountError("`num_frames` and `fps` are mutually exclusive arguments, please use only one!")
    if num_frames is None and fps is not None:
        video_fps = meta.fps if meta.fps is not None else 24  # the processor's own default
        num_frames = int(total / video_fps * fps)
        num_frames = min(max(num_frames, settings.min_frames), settings.max_frames, total)
        mode = f"fps {fps:g} (min_frames {settings.min_frames}, max_frames {settings.max_frames})"
    elif num_frames is None:
        num_frames = min(max(total, settings.min_frames), settings.max_frames)
        mode = f"every frame up to max_frames {settings.max_frames}"
    else:
        mode = f"num_frames {num_frames}"
    import numpy as np  # the processor's own np.linspace(...).round(): the same indices, bit for bit

    indices = np.linspace(0, total - 1, num_frames).round().astype(int).tolist()
    return indices, mode


def qwen3_smart_resize(
    num_frames: int,
    height: int,
    width: int,
    temporal_factor: int,
    factor: int,
    min_pixels: int,
    max_pixels: int,
) -> tuple[int, int]:
    """transformers' Qwen3-VL video smart_resize: the pixel budget counts every frame."""
    if num_frames < temporal_factor:
        raise CountError(f"t:{num_frames} must be larger than temporal_factor:{temporal_factor}")
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise CountError(
            f"absolute aspect ratio must be smaller than {MAX_ASPECT_RATIO}, got {max(height, width) / min(height, width)}"
        )
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


def _qwen3_timestamps(indices: list[int], fps: float | None, temporal_patch_size: int) -> tuple[float, ...]:
    """Qwen3VLProcessor._calculate_timestamps: each temporal group's mean time (fps 24 when unknown)."""
    indices = list(indices)
    if len(indices) % temporal_patch_size:
        indices.extend(indices[-1] for _ in range(temporal_patch_size - len(indices) % temporal_patch_size))
    video_fps = 24 if fps is None else fps
    times = [index / video_fps for index in indices]
    return tuple(
        (times[i] + times[i + temporal_patch_size - 1]) / 2 for i in range(0, len(times), temporal_patch_size)
    )


def _count_video_qwen3(meta: VideoMeta, settings: QwenVideoSettings) -> VideoCount:
    indices, mode = qwen3_sampled_indices(meta, settings)
    frames = len(indices)
    height, width = meta.height, meta.width
    if settings.do_resize:
        max_pixels = settings.max_pixels
        if settings.cap_pixels_per_frame:
            frame_cap = settings.max_video_tokens * settings.factor * settings.factor
            per_frame = max(min(frame_cap, settings.max_pixels // frames), int(settings.min_pixels * 1.05))
            max_pixels = per_frame * frames
        height, width = qwen3_smart_resize(
            frames,
            height,
            width,
            settings.temporal_patch_size,
            settings.factor,
            settings.min_pixels,
            max_pixels,
        )
    elif height % settings.factor or width % settings.factor:
        raise CountError(
            f"{meta.width}x{meta.height} frames are not a multiple of {settings.factor} and do_resize is off"
        )
    grid_t = -(-frames // settings.temporal_patch_size)
    grid_h, grid_w = height // settings.patch_size, width // settings.patch_size
    tokens = grid_t * grid_h * grid_w // settings.merge_size**2
    timestamps = _qwen3_timestamps(indices, meta.fps, settings.temporal_patch_size)
    capped = None
    if settings.do_sample_frames and settings.num_frames is None and settings.fps is not None and meta.fps:
        capped = _capped(
            meta.frames / meta.fps * settings.fps, frames, meta, settings.fps, settings.max_frames
        )
    return VideoCount(frames, height, width, (grid_t, grid_h, grid_w), tokens, mode, timestamps, capped)


def count_video(meta: VideoMeta, settings: QwenVideoSettings) -> VideoCount:
    """Qwen2VLVideoProcessor: frames sampled, each resized by smart_resize, padded to temporal_patch_size
    by repeating the last, one <|video_pad|> per merged patch of each temporal group. Qwen3VLVideoProcessor:
    its own sampling (np.linspace indices) and a budget over every frame's pixels."""
    refuse_channels_first_frames(meta, settings.processor)
    if settings.qwen3:
        return _count_video_qwen3(meta, settings)
    frames, mode = sampled_frames(meta, settings)
    if frames < 1:
        raise CountError("the video has no frames")
    capped = None
    if settings.do_sample_frames and settings.num_frames is None and settings.fps is not None and meta.fps:
        max_frames = (
            math.floor(settings.max_frames / settings.temporal_patch_size) * settings.temporal_patch_size
        )
        capped = _capped(meta.frames / meta.fps * settings.fps, frames, meta, settings.fps, max_frames)
    height, width = meta.height, meta.width
    if settings.do_resize:
        max_pixels = settings.max_pixels
        if settings.cap_pixels_per_frame:  # qwen-vl-utils' total budget, shared out between frames
            total_pixels = int(settings.max_video_tokens * settings.factor * settings.factor * 0.9)
            max_pixels = max(
                min(max_pixels, total_pixels * settings.temporal_patch_size // frames),
                int(settings.min_pixels * 1.05),
            )
        height, width = smart_resize(height, width, settings.factor, settings.min_pixels, max_pixels)
    grid_h, grid_w = height // settings.patch_size, width // settings.patch_size
    if height % settings.factor or width % settings.factor:
        raise CountError(
            f"{meta.width}x{meta.height} frames are not a multiple of {settings.factor} and do_resize is off"
        )
    grid_t = -(-frames // settings.temporal_patch_size)
    tokens = grid_t * grid_h * grid_w // settings.merge_size**2
    # VideoMetadata.sampled_fps: len(frames_indices) / total_num_frames * fps, `fps or 24` without one
    # (a frame list's metadata is the caller's: not known)
    sampled_fps = None
    if meta.frames_from != "frame list":
        sampled_fps = frames / meta.frames * meta.fps if meta.fps else 24.0
    return VideoCount(
        frames, height, width, (grid_t, grid_h, grid_w), tokens, mode, capped=capped, sampled_fps=sampled_fps
    )


def expand_video(count: VideoCount, settings: QwenVideoSettings) -> Expansion:
    """Qwen2VLProcessor.replace_video_token: <|video_pad|> once per merged patch (the template writes the
    <|vision_start|> and <|vision_end|> around it). Qwen3VLProcessor: per temporal group, its timestamp
    `<t seconds>` (one decimal) then <|vision_start|>, its <|video_pad|> tokens and <|vision_end|>,
    inside the template's own pair (up to 5.24; from 5.25 in place of it: video_wrapper)."""
    if not settings.qwen3:
        return (Run(settings.placeholder, count.tokens),)
    grid_t = count.grid[0]
    per_group = count.tokens // grid_t
    segments: list[str | Run] = []
    for time in count.timestamps[:grid_t]:
        segments += [
            f"<{time:.1f} seconds>",
            "<|vision_start|>",
            Run(settings.placeholder, per_group),
            "<|vision_end|>",
        ]
    return tuple(segments)


def _float32(value: float) -> float:
    """`value` rounded to float32, as a torch float tensor holds it."""
    return struct.unpack("f", struct.pack("f", value))[0]


def temporal_reach(grid_t: int, settings: QwenVideoSettings, sampled_fps: float | None) -> int | None:
    """The largest temporal position id of a video above its start, as get_vision_position_ids gives it
    (transformers 5.24.0): `(torch.arange(grid_t) * time_interval).long()`. Qwen2-VL: time_interval 1.0.
    Qwen2.5-VL: tokens_per_second * second_per_grid_ts, the processor's temporal_patch_size /
    sampled_fps as a float32 tensor, so the product and each step are float32 and truncated. None: the
    time scale or the frame rate is not known."""
    if not settings.time_scaled:
        return grid_t - 1
    if settings.tokens_per_second is None or not sampled_fps:
        return None
    second_per_grid = _float32(settings.temporal_patch_size / sampled_fps)
    interval = _float32(_float32(settings.tokens_per_second) * second_per_grid)
    return int(_float32(_float32(grid_t - 1) * interval))  # the arange is increasing: its last is the max


def video_position_span(count: VideoCount, settings: QwenVideoSettings) -> VideoPositions:
    """How one video takes M-RoPE positions, as get_rope_index does for videos (transformers 5.24.0).

    Qwen2-VL / Qwen2.5-VL: the video's tokens get start + (t, h, w) on its (grid_t, grid_h/merge,
    grid_w/merge) grid, t scaled by time (temporal_reach), and the text after it starts at start +
    max(grid_h, grid_w) // merge: the temporal extent does not move the text on, so a long video's
    last frame groups can hold the row's largest position id. Qwen3-VL splits the grid per temporal
    group (its timestamps are text between them): each group is placed as an image of grid (1, h, w).
    """
    grid_t, grid_h, grid_w = count.grid
    merge = settings.merge_size
    advance = max(grid_h, grid_w) // merge
    spatial = max(grid_h // merge, grid_w // merge) - 1  # the largest height / width step
    if settings.qwen3:
        return VideoPositions(grid_t * advance, spatial - advance)
    reach = temporal_reach(grid_t, settings, count.sampled_fps)
    return VideoPositions(advance, None if reach is None else max(reach, spatial) - advance)


def trainer_template(pipeline: str, model: Any) -> str | None:
    """LLaMA-Factory registers qwen3_vl for the Qwen3-VL Thinking checkpoints, qwen3_vl_nothink for the
    other Qwen3-VL ones, and qwen2_vl for Qwen2-VL / Qwen2.5-VL (extras/constants.py, by name)."""
    del pipeline
    if model.processor_class != "Qwen3VLProcessor":
        return "qwen2_vl"
    names = f"{model.checkpoint or ''} {model.name}".lower()
    return "qwen3_vl" if "thinking" in names else "qwen3_vl_nothink"


# Qwen2VLImageProcessorPil's class attributes (image_processing_pil_qwen2_vl.py, transformers 5.24.0).
_PIL_DEFAULTS: dict[str, Any] = {
    "size": {"shortest_edge": 56 * 56, "longest_edge": 28 * 28 * 1280},
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "do_resize": True,
}


def light_image_attributes(image_config: Mapping[str, Any]) -> Any:
    """What Qwen2VLImageProcessorPil(**file) holds that settings_from reads (transformers 5.24.0, for the
    built-in profiles loaded without transformers, models/light.py): its size with the file's min_pixels
    / max_pixels written over it (its __init__'s backward compatibility), the rest the file's value or
    the class's."""
    from types import SimpleNamespace

    size = image_config.get("size")
    size = dict(_PIL_DEFAULTS["size"]) if size is None else dict(size)
    if image_config.get("min_pixels") is not None:
        size["shortest_edge"] = image_config["min_pixels"]
        size.pop("min_pixels", None)
    if image_config.get("max_pixels") is not None:
        size["longest_edge"] = image_config["max_pixels"]
        size.pop("max_pixels", None)
    values = {key: image_config.get(key, default) for key, default in _PIL_DEFAULTS.items() if key != "size"}
    return SimpleNamespace(size=size, **values)


def video_knobs(settings: QwenVideoSettings, pipeline: Any) -> tuple[list[VideoKnob], list[str]]:
    """`vlmlint stats` under transformers' own video processor: Qwen2VLVideoProcessor's fps / max_frames
    (only with do_sample_frames) and max_pixels; Qwen3VLVideoProcessor's fps / max_frames and
    size.longest_edge (its budget over all frames); a sentence for each that does not apply."""
    processor = settings.processor
    mode = f"transformers ({processor})"
    knobs: list[VideoKnob] = []
    notes: list[str] = []

    if not settings.do_sample_frames:
        notes.append(
            f"fps, max_frames: {processor} keeps every frame (do_sample_frames is false), so neither applies; "
            "set do_sample_frames: true (with fps) in video_preprocessor_config.json to sample"
        )
    elif settings.num_frames is not None:
        notes.append(f"fps, max_frames: {processor} samples num_frames={settings.num_frames} frames a clip")
    elif settings.fps is None:
        notes.append(f"fps, max_frames: {processor} has no fps to sample with")
    else:
        knobs.append(
            VideoKnob(
                "fps",
                mode,
                settings.fps,
                grid_of(FPS_GRID, settings.fps),
                FPS_WORDS,
                settings_at(settings, pipeline, "fps"),
            )
        )
        low = max(settings.min_frames, 1)
        knobs.append(
            VideoKnob(
                "max_frames", mode, settings.max_frames, grid_of(FRAMES_GRID, settings.max_frames, low),
                f"{FRAMES_WORDS}, from min_frames {low}", settings_at(settings, pipeline, "max_frames"),
            )
        )  # fmt: skip
    if not settings.do_resize:
        notes.append(f"max_pixels: {processor} does not resize (do_resize is false)")
    else:
        step = settings.factor**2
        pixel_name = "size.longest_edge" if settings.qwen3 else "max_pixels"
        what = "pixels over all frames" if settings.qwen3 else "pixels per frame"
        knobs.append(
            VideoKnob(
                pixel_name, mode, settings.max_pixels,
                grid_of((n * step for n in PATCHES_GRID), settings.max_pixels, settings.min_pixels),
                f"{what}: {patches_words(settings.factor)}, from min_pixels {settings.min_pixels}",
                settings_at(settings, pipeline, "max_pixels"),
            )
        )  # fmt: skip
    return knobs, notes


FAMILY = Family.define(
    __name__, name="qwen-vl", title="Qwen2-VL / Qwen2.5-VL / Qwen3-VL",
    processor_classes=("Qwen2VLProcessor", "Qwen2_5_VLProcessor", "Qwen3VLProcessor"),
    image_processor_types=image_processor_types("Qwen2VL"), placeholder=PLACEHOLDER,
    raw_image_prompt="<|vision_start|><|image_pad|><|vision_end|>", marker_tokens=("<|vision_start|>",),
    video_placeholder=VIDEO_PLACEHOLDER, raw_video_prompt="<|vision_start|><|video_pad|><|vision_end|>",
    data_tokens=GROUNDING_TOKENS,
    # --pipeline qwen-vl-finetune reproduces Qwen's own fine-tune scripts for these checkpoints
    trainer_templates={"llamafactory": ("qwen2_vl", "qwen3_vl_nothink", "qwen3_vl"), "qwen-vl-finetune": ("qwen_vl_finetune",)},
    choose_trainer_template=trainer_template,
)  # fmt: skip
