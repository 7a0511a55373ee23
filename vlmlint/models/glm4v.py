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
    VideoCount,
    image_processor_types,
    positive_int,
    refuse_channels_first_frames,
)
from vlmlint.models.knobs import (
    DURATION_GRID,
    DURATION_WORDS,
    FPS_GRID,
    FPS_WORDS,
    PATCHES_GRID,
    VideoKnob,
    grid_of,
    patches_words,
    settings_at,
)
from vlmlint.records import VideoMeta

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


# ---- videos: transformers 5.24 Glm4vVideoProcessor (GLM-4.1V / 4.5V) and Glm46VVideoProcessor (GLM-4.6V,
# GLM-OCR), with Glm4vProcessor's / Glm46VProcessor's replace_video_token -----------------------------

VIDEO_PLACEHOLDER = "<|video|>"  # the processor's video_token (the template writes it between
# <|begin_of_video|> and <|end_of_video|>); each frame pair becomes image tokens, not video tokens
VIDEO_PROCESSORS = ("Glm4vVideoProcessor", "Glm46VVideoProcessor")
# processor class -> how replace_frame_token_id writes a temporal group's timestamp after its image
TIMESTAMP_FORMATS = {"Glm4vProcessor": "integer", "Glm46VProcessor": "seconds"}
# Glm46VVideoProcessor.sample_frames' constants (not settings: the method's own locals)
GLM46V_FPS_STEPS = ((30, 3), (300, 1), (2400, 0.5))  # duration up to -> target fps
GLM46V_MAX_FRAMES = 640
GLM46V_MAX_DURATION = 2400


@dataclass(frozen=True)
class GlmVideoSettings:
    """The video processor's settings (video_config.py reads them as from_pretrained) and the processor's
    timestamp format. shortest_edge / longest_edge bound frames x height x width (the whole clip)."""

    processor: str  # Glm4vVideoProcessor or Glm46VVideoProcessor: the sampler
    timestamps: str  # "integer" (Glm4vProcessor: "0", "1") or "seconds" (Glm46VProcessor: "0.5 seconds")
    patch_size: int
    merge_size: int
    temporal_patch_size: int
    shortest_edge: int
    longest_edge: int
    do_resize: bool
    do_sample_frames: bool
    fps: float | None  # Glm4vVideoProcessor's requested fps (Glm46VVideoProcessor ignores it)
    max_duration: float  # Glm4vVideoProcessor's self.max_duration (a call's max_duration is ignored)
    placeholder: str = PLACEHOLDER  # the processor's image_token, which every frame pair repeats

    @property
    def factor(self) -> int:
        return self.patch_size * self.merge_size

    @property
    def glm46v(self) -> bool:
        return self.processor == "Glm46VVideoProcessor"


def video_settings_from(
    config: dict[str, Any], image_settings: Any, processor_class: str | None
) -> GlmVideoSettings:
    """The video processor's settings. Where the file names no video processor class, AutoVideoProcessor
    infers it from its image_processor_type (Glm46VImageProcessor -> Glm46VVideoProcessor) before the
    model type; the class defaults then lie under the file's keys."""
    from vlmlint.models.video_config import class_defaults

    processor = config.get("video_processor_type")
    if processor is None:
        image_type = str(config.get("image_processor_type") or "")
        inferred = image_type.replace("ImageProcessorPil", "ImageProcessor").replace(
            "ImageProcessorFast", "ImageProcessor"
        )
        inferred = inferred.replace("ImageProcessor", "VideoProcessor")
        if inferred in VIDEO_PROCESSORS:
            processor = inferred
            config = {**class_defaults(inferred), **config}
    if processor not in VIDEO_PROCESSORS:
        raise CountError(
            f"its video processor {processor} is not one vlmlint reproduces ({', '.join(VIDEO_PROCESSORS)})"
        )
    if processor_class not in TIMESTAMP_FORMATS:
        raise CountError(f"{processor_class} with a {processor} is not a pairing vlmlint reproduces")
    size = config.get("size") or {}
    if not isinstance(size, dict) or not size.get("shortest_edge") or not size.get("longest_edge"):
        raise CountError(f"`size` dict must contain 'shortest_edge' and 'longest_edge' keys but got {size}.")
    fps = config.get("fps")
    if fps is not None and (isinstance(fps, bool) or not isinstance(fps, (int, float)) or not fps > 0):
        raise CountError(f"video processor fps must be a positive number, got {fps!r}")
    max_duration = config.get("max_duration", 300)
    if isinstance(max_duration, bool) or not isinstance(max_duration, (int, float)):
        raise CountError(f"video processor max_duration must be a number, got {max_duration!r}")
    return GlmVideoSettings(
        processor=processor,
        timestamps=TIMESTAMP_FORMATS[processor_class],
        patch_size=positive_int(config.get("patch_size", DEFAULT_PATCH_SIZE), "patch_size"),
        merge_size=positive_int(config.get("merge_size", DEFAULT_MERGE_SIZE), "merge_size"),
        temporal_patch_size=positive_int(
            config.get("temporal_patch_size", DEFAULT_TEMPORAL_PATCH_SIZE), "temporal_patch_size"
        ),
        shortest_edge=positive_int(size["shortest_edge"], "size.shortest_edge"),
        longest_edge=positive_int(size["longest_edge"], "size.longest_edge"),
        do_resize=bool(config.get("do_resize", True)),
        do_sample_frames=bool(config.get("do_sample_frames", True)),
        fps=fps,
        max_duration=max_duration,
        placeholder=getattr(image_settings, "placeholder", None) or PLACEHOLDER,
    )


def _unique_even(indices: list[int]) -> list[int]:
    """sample_frames' ending: duplicates dropped (first kept), the last repeated to an even count."""
    unique = list(dict.fromkeys(indices))
    if len(unique) & 1:
        unique.append(unique[-1])
    return unique


def glm4v_sampled_indices(meta: VideoMeta, settings: GlmVideoSettings) -> tuple[list[int], str]:
    """Glm4vVideoProcessor.sample_frames: `fps` frames a second (ceil of i * fps_video / fps) up to
    max_duration seconds; a longer clip gets int(max_duration * fps) frames spread over it."""
    fps = settings.fps
    if fps is None:
        raise CountError("the video processor has no fps to sample with (fps is None)")
    total = meta.frames
    last = total - 1
    duration = meta.duration or round(last / meta.fps) + 1
    if duration <= settings.max_duration:
        n = max(math.floor(duration * fps), 1)
        indices = [min(last, math.ceil(i * meta.fps / fps)) for i in range(n)]
        mode = f"fps {fps:g} (clips up to max_duration {settings.max_duration:g} s)"
    else:
        samples = int(settings.max_duration * fps)
        mode = f"{samples} frames over the clip: longer than max_duration {settings.max_duration:g} s"
        if samples >= total:
            indices = list(range(total))
        else:
            import numpy as np  # the processor's own np.linspace: the same seconds, bit for bit

            seconds = np.linspace(0, duration, samples, endpoint=True)
            indices = [min(last, math.ceil(t * meta.fps)) for t in seconds]
    return _unique_even(indices), mode


def glm46v_sampled_indices(meta: VideoMeta, settings: GlmVideoSettings) -> tuple[list[int], str]:
    """Glm46VVideoProcessor.sample_frames: a target fps by duration (3 up to 30 s, 1 up to 300 s, else
    0.5), temporal_patch_size frames per target step, at most 640 frames and 2400 s; its fps setting and
    max_duration are not read."""
    import numpy as np  # the processor's own np.linspace(..., dtype=int)

    total = meta.frames
    duration = meta.duration or round((total - 1) / meta.fps) + 1
    effective = min(duration, GLM46V_MAX_DURATION)
    target = next(
        (fps for limit, fps in GLM46V_FPS_STEPS[:-1] if effective <= limit), GLM46V_FPS_STEPS[-1][1]
    )
    extract = min(int(effective * target * settings.temporal_patch_size), GLM46V_MAX_FRAMES)
    if total < extract:
        indices = np.linspace(0, total - 1, extract, dtype=int).tolist()
    else:
        indices = []
        current = 0.0
        step = 1 / (settings.temporal_patch_size * target)
        max_second = int(duration)
        per_frame = 1 / meta.fps
        for index in range(total):
            if index * per_frame >= current:
                current += step
                indices.append(index)
                if current >= max_second:
                    break
    if len(indices) < extract:
        start, end = (indices[0], indices[-1]) if indices else (0, max(total - 1, 0))
        indices = np.linspace(start, end, extract, dtype=int).tolist()
    elif len(indices) > extract:
        indices = np.linspace(0, total - 1, extract, dtype=int).tolist()
    mode = f"{target:g} fps x temporal_patch_size {settings.temporal_patch_size} (duration-based, at most {GLM46V_MAX_FRAMES} frames)"
    return _unique_even(indices), mode


def sampled_indices(meta: VideoMeta, settings: GlmVideoSettings) -> tuple[list[int], str]:
    """The frame indices the video processor keeps, and the mode in words."""
    if meta.frames < 1:
        raise CountError("the video has no frames")
    if not settings.do_sample_frames:
        return list(range(meta.frames)), "every frame (do_sample_frames is false)"
    if meta.frames_from == "frame list":
        raise CountError(
            "Sampling frames from a list of images is not supported! Set `do_sample_frames=False`."
        )
    if meta.fps is None:
        raise CountError(
            "Asked to sample frames per second but no video metadata was provided which is required when "
            "sampling in GLM4V. Please pass in `VideoMetadata` object or set `do_sample_frames=False`"
        )
    if settings.glm46v:
        return glm46v_sampled_indices(meta, settings)
    return glm4v_sampled_indices(meta, settings)


def count_video(meta: VideoMeta, settings: GlmVideoSettings) -> VideoCount:
    """Frames sampled (de-duplicated, even), resized together by GLM's smart_resize with the clip's
    frame count (the bounds are on frames x height x width; Qwen3-VL's copy of it is reused), padded to
    temporal_patch_size, grid_h * grid_w / merge^2 <|image|> per temporal group. `timestamps`: each
    group's first frame's time (index / fps, fps 24 where unknown), as replace_video_token reads them."""
    refuse_channels_first_frames(meta, settings.processor)
    indices, mode = sampled_indices(meta, settings)
    frames = len(indices)
    if frames < 1:
        raise CountError(f"a {meta.frames}-frame video samples no frame: the processor cannot resize it")
    height, width = meta.height, meta.width
    if settings.do_resize:
        height, width = qwen_vl.qwen3_smart_resize(
            frames,
            height,
            width,
            settings.temporal_patch_size,
            settings.factor,
            settings.shortest_edge,
            settings.longest_edge,
        )
    elif height % settings.factor or width % settings.factor:
        raise CountError(
            f"with do_resize off, {meta.width}x{meta.height} frames are not whole blocks of "
            f"patch_size*merge_size = {settings.factor} px: the video processor cannot cut them into patches"
        )
    grid_t = -(-frames // settings.temporal_patch_size)
    grid_h, grid_w = height // settings.patch_size, width // settings.patch_size
    tokens = grid_t * (grid_h * grid_w // settings.merge_size**2)
    fps = 24 if meta.fps is None else meta.fps
    times = [index / fps for index in indices][::2]  # replace_video_token's timestamps[::2]
    times = (times + [times[-1]] * grid_t)[:grid_t]
    return VideoCount(frames, height, width, (grid_t, grid_h, grid_w), tokens, mode, tuple(times))


def expand_video(count: VideoCount, settings: GlmVideoSettings) -> Expansion:
    """replace_frame_token_id per temporal group: <|begin_of_image|>, its <|image|> tokens,
    <|end_of_image|>, then its timestamp: int(t) (Glm4vProcessor) or f"{t:.1f} seconds" (Glm46VProcessor).
    The template's <|begin_of_video|> / <|end_of_video|> stay around the whole."""
    grid_t = count.grid[0]
    per_group = count.tokens // grid_t
    segments: list[str | Run] = []
    for time in count.timestamps[:grid_t]:
        stamp = str(int(time)) if settings.timestamps == "integer" else f"{time:.1f} seconds"
        segments += [BEGIN_OF_IMAGE, Run(settings.placeholder, per_group), END_OF_IMAGE + stamp]
    return tuple(segments)


def video_knobs(settings: GlmVideoSettings, pipeline: Any) -> tuple[list[VideoKnob], list[str]]:
    """`vlmlint stats` under transformers' own video processor: Glm4vVideoProcessor's fps and max_duration
    (it samples fps frames a second of clips up to max_duration s, int(max_duration * fps) frames of a longer
    one; only with do_sample_frames), and size.longest_edge, the pixel budget over the whole clip (frames x
    height x width). Glm46VVideoProcessor reads neither fps nor max_duration."""
    processor = settings.processor
    mode = f"transformers ({processor})"
    knobs: list[VideoKnob] = []
    notes: list[str] = []
    if not settings.do_sample_frames:
        notes.append(
            f"fps, max_duration: {processor} keeps every frame (do_sample_frames is false), so neither applies; "
            "set do_sample_frames: true in video_preprocessor_config.json to sample"
        )
    elif settings.glm46v:
        steps = ", ".join(f"{fps:g} fps up to {limit} s" for limit, fps in GLM46V_FPS_STEPS[:-1])
        notes.append(
            f"fps, max_duration: {processor} does not read them: it picks its rate from the clip's duration "
            f"({steps}, else {GLM46V_FPS_STEPS[-1][1]:g}; at most {GLM46V_MAX_FRAMES} frames)"
        )
    elif settings.fps is None:  # its sampler refuses every clip then: no row to search
        notes.append(f"fps, max_duration: {processor} has no fps to sample with")
    else:
        knobs.append(
            VideoKnob("fps", mode, settings.fps, grid_of(FPS_GRID, settings.fps), FPS_WORDS, settings_at(settings, pipeline, "fps"))
        )  # fmt: skip
        knobs.append(
            VideoKnob(
                "max_duration", mode, settings.max_duration, grid_of(DURATION_GRID, settings.max_duration),
                f"{DURATION_WORDS}: a longer clip gets int(max_duration x fps) frames spread over it",
                settings_at(settings, pipeline, "max_duration"),
            )
        )  # fmt: skip
    if not settings.do_resize:
        notes.append(f"size.longest_edge: {processor} does not resize (do_resize is false)")
    else:
        step = settings.factor**2
        knobs.append(
            VideoKnob(
                "size.longest_edge", mode, settings.longest_edge,
                grid_of((n * step for n in PATCHES_GRID), settings.longest_edge, settings.shortest_edge),
                f"pixels over all frames: {patches_words(settings.factor)}, from size.shortest_edge "
                f"{settings.shortest_edge}",
                settings_at(settings, pipeline, "longest_edge"),
            )
        )  # fmt: skip
    return knobs, notes


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
    video_placeholder=VIDEO_PLACEHOLDER, raw_video_prompt=f"<|begin_of_video|>{VIDEO_PLACEHOLDER}<|end_of_video|>",
    trainer_templates={"llamafactory": ("glm4v", "glm4_5v", "glm_ocr")}, choose_trainer_template=trainer_template,
)  # fmt: skip
