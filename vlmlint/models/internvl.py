"""InternVL (transformers-native InternVLProcessor + GotOcr2ImageProcessor): dynamic 448px tiles.

Image processor (transformers 5.x `GotOcr2ImageProcessor(Pil).crop_image_to_patches`): the image is
resized to the (columns x rows) grid of tiles whose aspect ratio is closest to the image's, among
all grids with min_patches <= columns*rows <= max_patches, and cut into those tiles; when there is
more than one tile a thumbnail (the whole image resized to one tile) is appended.

Processor (`InternVLProcessor.replace_image_token`): each `<IMG_CONTEXT>` the chat template writes
becomes `<img>` + `<IMG_CONTEXT>` x (image_seq_length * num_patches) + `</img>`. The processor
forces crop_to_patches=True through its class-level images_kwargs, whatever the image processor's
own crop_to_patches says (the hub checkpoints save false), so tiling is on unless a caller turns it
off at call time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from vlmlint.models.base import (
    CountError,
    Expansion,
    Family,
    ImageCount,
    Run,
    VideoCount,
    image_processor_types,
    no_knob,
    positive_int,
    stacked_videos,
)
from vlmlint.models.knobs import VideoKnob, frame_knobs
from vlmlint.records import VideoMeta

PLACEHOLDER = "<IMG_CONTEXT>"
START_IMAGE_TOKEN = "<img>"
END_IMAGE_TOKEN = "</img>"
DEFAULT_IMAGE_SEQ_LENGTH = 256  # InternVLProcessor.__init__ default
PROCESSOR_CLASS = "InternVLProcessor"
PROCESSOR_IMAGES_KWARGS = {"crop_to_patches": True}  # InternVLProcessor.images_kwargs in transformers 5.24


@dataclass(frozen=True)
class InternVLSettings:
    tile_height: int
    tile_width: int
    min_patches: int
    max_patches: int
    crop_to_patches: bool
    image_seq_length: int
    do_resize: bool = True


# Image-processor kwargs InternVLProcessor's call can set (ProcessorMixin._merge_kwargs): its class
# images_kwargs first, then any of these the tokenizer was initialised with (tokenizer_config.json).
CALL_KEYS = ("crop_to_patches", "min_patches", "max_patches", "size", "do_resize")


def _call_kwargs(processor_config: dict[str, Any]) -> dict[str, Any]:
    """The image-processor kwargs the processor's __call__ passes: they beat the image processor's own."""
    try:
        import transformers

        forced = getattr(getattr(transformers, PROCESSOR_CLASS, None), "images_kwargs", None)
        if forced is None:  # up to 5.20: the defaults of processing_internvl.py's InternVLProcessorKwargs
            from transformers.models.internvl import processing_internvl

            kwargs_class = getattr(processing_internvl, "InternVLProcessorKwargs", None)
            forced = getattr(kwargs_class, "_defaults", {}).get("images_kwargs")
    except ImportError:  # a transformers that cannot import the class: its 5.24 value
        forced = None
    if not isinstance(forced, dict):
        forced = PROCESSOR_IMAGES_KWARGS
    kwargs = {k: v for k, v in forced.items() if k in CALL_KEYS}
    tokenizer_kwargs = processor_config.get("tokenizer_init_kwargs") or {}
    kwargs.update({k: v for k, v in tokenizer_kwargs.items() if k in CALL_KEYS})
    return kwargs


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> InternVLSettings:
    processor_class = processor_config.get("processor_class")
    if processor_class not in (None, PROCESSOR_CLASS) or model_config.get("model_type") == "got_ocr2":
        raise CountError(
            f"GotOcr2ImageProcessor under {processor_class or model_config.get('model_type')} is not InternVL "
            "(GOT-OCR2 expands <imgpad>, not <IMG_CONTEXT>); vlmlint does not count it yet"
        )
    call = _call_kwargs(processor_config)
    size = call.get("size", image_processor.size)
    if isinstance(size, dict):
        height, width = size.get("height"), size.get("width")
    else:
        height, width = getattr(size, "height", None), getattr(size, "width", None)
    if not height or not width:
        raise CountError(f"size must hold height and width (the tile size), got {size}")
    return InternVLSettings(
        tile_height=positive_int(height, "size.height"),
        tile_width=positive_int(width, "size.width"),
        min_patches=positive_int(call.get("min_patches", image_processor.min_patches), "min_patches"),
        max_patches=positive_int(call.get("max_patches", image_processor.max_patches), "max_patches"),
        crop_to_patches=bool(call.get("crop_to_patches", getattr(image_processor, "crop_to_patches", False))),
        image_seq_length=int(processor_config.get("image_seq_length") or DEFAULT_IMAGE_SEQ_LENGTH),
        do_resize=bool(call.get("do_resize", getattr(image_processor, "do_resize", True))),
    )


@lru_cache(maxsize=16)
def supported_grids(min_tiles: int, max_tiles: int) -> tuple[tuple[int, int], ...]:
    """(columns, rows) with min <= columns*rows <= max, in GotOcr2's order: by tile count, a stable sort
    of the columns-major enumeration (that order decides ties)."""
    grids = [
        (columns, rows)
        for columns in range(1, max_tiles + 1)
        for rows in range(1, max_tiles + 1)
        if min_tiles <= columns * rows <= max_tiles
    ]
    return tuple(sorted(grids, key=lambda grid: grid[0] * grid[1]))


def optimal_tiled_canvas(
    height: int, width: int, tile_height: int, tile_width: int, min_tiles: int, max_tiles: int
) -> tuple[int, int]:
    """GotOcr2's get_optimal_tiled_canvas, float for float: the grid (columns, rows) whose aspect ratio is
    closest to width/height; on an exact tie a later (larger) grid wins while the image's area exceeds half
    the tiles' area. (1, 1) when no grid is allowed (min_patches > max_patches)."""
    aspect_ratio = width / height
    area = width * height
    best_diff = float("inf")
    best = (1, 1)
    for columns, rows in supported_grids(min_tiles, max_tiles):
        diff = abs(aspect_ratio - columns / rows)
        if diff < best_diff:
            best_diff = diff
            best = (columns, rows)
        elif diff == best_diff and area > 0.5 * tile_height * tile_width * columns * rows:
            best = (columns, rows)
    return best


def count(height: int, width: int, settings: InternVLSettings, images_in_row: int = 1) -> ImageCount:
    """Tiles (+1 thumbnail when more than one), image_seq_length <IMG_CONTEXT> each."""
    del images_in_row  # every image is tiled on its own
    if height < 1 or width < 1:
        raise CountError(f"{width}x{height}: an image needs at least one pixel per side")
    if settings.crop_to_patches and settings.max_patches > 1:
        columns, rows = optimal_tiled_canvas(
            height,
            width,
            settings.tile_height,
            settings.tile_width,
            settings.min_patches,
            settings.max_patches,
        )
        tiles = columns * rows
        num_patches = tiles + 1 if tiles != 1 else 1
        resized = (settings.tile_height * rows, settings.tile_width * columns)
    else:
        rows = columns = num_patches = 1
        resized = (settings.tile_height, settings.tile_width) if settings.do_resize else (height, width)
    return ImageCount(resized[0], resized[1], (rows, columns), settings.image_seq_length * num_patches)


def count_exact(image_processor: Any, images: list[Any], settings: InternVLSettings) -> list[ImageCount]:
    """The real image processor's num_patches, called with the kwargs the processor passes it."""
    try:
        output = image_processor(
            images=images,
            crop_to_patches=settings.crop_to_patches,
            min_patches=settings.min_patches,
            max_patches=settings.max_patches,
            size={"height": settings.tile_height, "width": settings.tile_width},
            do_resize=settings.do_resize,
        )
    except ValueError as exc:
        raise CountError(str(exc)) from None
    counts = []
    for image, num_patches in zip(images, output["num_patches"], strict=True):
        num_patches = int(num_patches)
        width, height = image.size
        header = count(height, width, settings)
        counts.append(
            ImageCount(
                header.resized_height,
                header.resized_width,
                header.grid,
                settings.image_seq_length * num_patches,
            )
        )
    return counts


def expand(count: ImageCount, settings: InternVLSettings) -> Expansion:
    """<img> + <IMG_CONTEXT> x image_seq_length per tile + </img>."""
    return (START_IMAGE_TOKEN, Run(PLACEHOLDER, count.tokens), END_IMAGE_TOKEN)


# ---- videos: transformers 5.24 InternVLVideoProcessor and InternVLProcessor.replace_video_token ----------

VIDEO_PLACEHOLDER = "<video>"  # the tokenizer's video_token, which the template writes per video part
VIDEO_PROCESSOR = "InternVLVideoProcessor"


@dataclass(frozen=True)
class InternVLVideoSettings:
    """The video processor's settings (video_config.py reads them as from_pretrained) and the processor's
    image_seq_length, which every frame repeats."""

    frame_height: int  # size["height"]: every frame is resized to it
    frame_width: int
    do_resize: bool
    do_sample_frames: bool  # False by default (the class's backwards-compatible default)
    num_frames: int | None
    fps: float | None
    initial_shift: bool | float  # True: half a step, so frames come from each step's middle
    image_seq_length: int


def video_settings_from(
    config: dict[str, Any], image_settings: Any, processor_class: str | None
) -> InternVLVideoSettings:
    processor = config.get("video_processor_type")
    if processor != VIDEO_PROCESSOR:
        raise CountError(f"its video processor {processor} is not one vlmlint reproduces ({VIDEO_PROCESSOR})")
    if processor_class != PROCESSOR_CLASS:
        raise CountError(f"{processor_class} with a {processor} is not a pairing vlmlint reproduces")
    size = config.get("size") or {}
    if not isinstance(size, dict) or not size.get("height") or not size.get("width"):
        raise CountError(f"video size must hold height and width (every frame's size), got {size}")
    num_frames, fps = config.get("num_frames"), config.get("fps")
    if fps is not None and (isinstance(fps, bool) or not isinstance(fps, (int, float)) or not fps > 0):
        raise CountError(f"video processor fps must be a positive number, got {fps!r}")
    shift = config.get("initial_shift", True)
    if not isinstance(shift, (bool, int, float)):
        raise CountError(f"video processor initial_shift must be a bool or a number, got {shift!r}")
    return InternVLVideoSettings(
        frame_height=positive_int(size["height"], "size.height"),
        frame_width=positive_int(size["width"], "size.width"),
        do_resize=bool(config.get("do_resize", True)),
        do_sample_frames=bool(config.get("do_sample_frames", False)),
        num_frames=None if num_frames is None else positive_int(num_frames, "num_frames"),
        fps=fps,
        initial_shift=shift,
        image_seq_length=getattr(image_settings, "image_seq_length", None) or DEFAULT_IMAGE_SEQ_LENGTH,
    )


def sampled_frames(meta: VideoMeta, settings: InternVLVideoSettings) -> tuple[int, str]:
    """How many frames InternVLVideoProcessor.sample_frames keeps: num_frames (or int(duration * fps))
    indices torch.arange(shift, total, total / num_frames), shift total / num_frames / 2 when
    initial_shift is True; num_frames wins over fps (this override has no mutual-exclusion check)."""
    total = meta.frames
    if total < 1:
        raise CountError("the video has no frames")
    if not settings.do_sample_frames:
        return total, "every frame (do_sample_frames is false)"
    if meta.frames_from == "frame list":
        raise CountError(
            "Sampling frames from a list of images is not supported! Set `do_sample_frames=False`."
        )
    num_frames = settings.num_frames
    if num_frames is None and settings.fps is not None:
        if meta.fps is None:
            raise CountError("Asked to sample `fps` frames per second but no video metadata was provided")
        num_frames = int(total / meta.fps * settings.fps)
        mode = f"fps {settings.fps:g}"
    else:
        mode = f"num_frames {num_frames}"
    if num_frames is None:
        raise CountError("do_sample_frames is on with neither num_frames nor fps: the video processor fails")
    if num_frames == 0:
        raise CountError(
            f"a {total}-frame clip samples 0 frames at fps {settings.fps:g}: the processor divides by zero"
        )
    if num_frames > total:
        raise CountError(
            f"Video can't be sampled. The `num_frames={num_frames}` exceeds `total_num_frames={total}`."
        )
    step = total / num_frames
    shift = step / 2 if settings.initial_shift is True else float(settings.initial_shift)
    frames = max(0, math.ceil((total - shift) / step))  # len(torch.arange(shift, total, step)), in doubles
    if frames < 1:
        raise CountError(f"initial_shift {settings.initial_shift} leaves no frame of a {total}-frame clip")
    return frames, mode


def count_video(meta: VideoMeta, settings: InternVLVideoSettings) -> VideoCount:
    """Every kept frame is one tile (resized to size, whatever the clip's size): image_seq_length
    <IMG_CONTEXT> each. grid: (frames,)."""
    frames, mode = sampled_frames(meta, settings)
    if settings.do_resize:
        height, width = settings.frame_height, settings.frame_width
    else:
        height, width = meta.height, meta.width
    return VideoCount(frames, height, width, (frames,), frames * settings.image_seq_length, mode)


def check_videos(counts: list[VideoCount], settings: InternVLVideoSettings) -> None:
    """InternVLProcessor stacks a row's videos into one tensor (base.stacked_videos)."""
    del settings
    stacked_videos(counts, "InternVLProcessor")


def expand_video(count: VideoCount, settings: InternVLVideoSettings) -> Expansion:
    """InternVLProcessor.replace_video_token: "Frame{i}: <img>" + image_seq_length <IMG_CONTEXT> +
    "</img>" per frame, joined by newlines (the template's own newline follows the video token)."""
    segments: list[str | Run] = []
    for i in range(count.frames):
        segments += [
            ("\n" if i else "") + f"Frame{i + 1}: {START_IMAGE_TOKEN}",
            Run(PLACEHOLDER, settings.image_seq_length),
            END_IMAGE_TOKEN,
        ]
    return tuple(segments)


def video_knobs(settings: InternVLVideoSettings, pipeline: Any) -> tuple[list[VideoKnob], list[str]]:
    """`vlmlint stats` under transformers' own video processor: num_frames (over fps, which it replaces),
    with do_sample_frames: true where every frame is kept now. No frame-size knob: every frame is one
    image_seq_length tile."""
    knobs, notes = frame_knobs(settings, pipeline, VIDEO_PROCESSOR, "frames first")
    notes.append(
        f"size: {VIDEO_PROCESSOR} resizes every frame to one {settings.frame_width}x{settings.frame_height} "
        f"tile of image_seq_length {settings.image_seq_length} tokens, so no size setting changes the count"
    )
    return knobs, notes


FAMILY = Family.define(
    __name__, name="internvl", title="InternVL (transformers-native)",
    processor_classes=(PROCESSOR_CLASS,), image_processor_types=image_processor_types("GotOcr2"),
    placeholder=PLACEHOLDER, raw_image_prompt=PLACEHOLDER + "\n",
    size_knob=no_knob(
        "max_patches bounds the tiles per image, but vlmlint stats does not search it yet; only the "
        "max length is recommended"
    ),
    marker_tokens=("<IMG_CONTEXT>", "<img>"),
    video_placeholder=VIDEO_PLACEHOLDER, raw_video_prompt=VIDEO_PLACEHOLDER + "\n",
    trainer_templates={"internvl": ("internvl_chat_finetune",)},  # --pipeline internvl reproduces it
)  # fmt: skip
