"""Idefics3 and SmolVLM: resize to size.longest_edge, split into max_image_size tiles plus a global image.

Image processor (transformers 5.x `Idefics3ImageProcessor` / `SmolVLMImageProcessor`, same code):
1. do_resize: the long side becomes size.longest_edge (small images are upscaled), the short side is
   int(long / aspect_ratio) made even and at least 1; then anything above 4096 is scaled below it.
2. do_image_splitting: both sides go up to multiples of M = max_image_size.longest_edge (the short side
   from int(new_long / aspect_ratio)); if either exceeds M the image is cut into rows x cols tiles of
   M x M plus one global image resized to M x M, else it stays one M x M image (rows = cols = 0).
   Without splitting every image is resized to M x M (rows = cols = 0).

Processor (`replace_image_token` in processing_idefics3.py / processing_smolvlm.py): the user's `<image>`
becomes, per tile, `<fake_token_around_image><row_r_col_c>` + `<image>` x image_seq_len, a "\\n" after
each row, then "\\n<fake_token_around_image><global-img>" + `<image>` x image_seq_len +
`<fake_token_around_image>`; with no tiles only the global part without its leading "\\n".
image_seq_len comes from the processor's own config (processor_config.json), never from the image size.

Videos (SmolVLM2 only: transformers 5.24 `SmolVLMVideoProcessor` in video_processing_smolvlm.py and
`SmolVLMProcessor.replace_video_token` in processing_smolvlm.py; Idefics3Processor has no video path):
- settings: `video_sampling` {fps, max_frames} of the file (SmolVLMVideoProcessor.__init__ takes them
  as its fps and num_frames), else top-level fps / num_frames; do_sample_frames False by default (the
  class's "for BC" value): every frame is kept.
- do_sample_frames: refused without fps (a frame list); n = min(int(round(fps x duration)), num_frames),
  at least 1; when duration - 2 s > num_frames x fps the first and last second are skipped; indices
  np.linspace(start, end, n, dtype=int), de-duplicated (np.unique).
- every kept frame is resized to max_image_size x max_image_size (no splitting): image_seq_len <image>
  tokens each, whatever the clip's size.
- the template's `<video>` becomes "You are provided the following series of {N in words} frames from a
  {H:MM:SS} [H:MM:SS] video.\n", per frame "\nFrame from MM:SS:" + the single-image block, then "\n\n".
  N is pixel_values.shape[1] up to transformers 5.24: the most frames of any video in the processor call
  (do_pad pads the others), so every intro of a row with two clips names the longer one's count
  (`row_videos`); from 5.25 it is the clip's own count (len(timestamps)). The
  duration is int(metadata.duration) (a frame list: int(last timestamp)); timestamps are index / fps,
  24 fps where the video has none (a frame list).
"""

from __future__ import annotations

import dataclasses
import math
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
    image_processor_types,
    positive_int,
)
from vlmlint.models.compat import installed_at_least
from vlmlint.models.knobs import VideoKnob, frame_knobs
from vlmlint.records import VideoMeta

PLACEHOLDER = "<image>"
FAKE_IMAGE_TOKEN = "<fake_token_around_image>"
GLOBAL_IMAGE_TOKEN = "<global-img>"
MAX_IMAGE_SIZE = 4096  # transformers' absolute cap on the resized long side
DEFAULT_IMAGE_SEQ_LEN = 169  # both processors' __init__ default


@dataclass(frozen=True)
class Idefics3Settings:
    image_seq_len: int  # <image> tokens per tile and for the global image (processor_config.json)
    max_image_size: int  # tile edge M (image processor max_image_size.longest_edge)
    longest_edge: int | None  # resize target of the long side (size.longest_edge)
    do_resize: bool = True
    do_image_splitting: bool = True
    size_height: int | None = None  # size {"height", "width"} instead of longest_edge: fixed resize
    size_width: int | None = None
    model_image_seq_len: int | None = (
        None  # (image_size // patch)^2 / scale^2 from config.json: what the model expects
    )


def _size_value(size: Any, key: str) -> int | None:
    value = size.get(key) if isinstance(size, dict) else getattr(size, key, None)
    return int(value) if value else None


def _model_image_seq_len(model_config: dict[str, Any]) -> int | None:
    vision = model_config.get("vision_config") or {}
    image_size, patch = vision.get("image_size"), vision.get("patch_size")
    scale = model_config.get("scale_factor")
    if not (isinstance(image_size, int) and isinstance(patch, int) and isinstance(scale, int)) or not patch:
        return None
    return int((image_size // patch) ** 2 / scale**2)


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> Idefics3Settings:
    size = image_processor.size
    longest_edge = _size_value(size, "longest_edge")
    height, width = _size_value(size, "height"), _size_value(size, "width")
    do_resize = bool(getattr(image_processor, "do_resize", True))
    if do_resize and not longest_edge and not (height and width):
        raise CountError(f"size must hold longest_edge or height and width, got {size}")
    max_image_size = _size_value(getattr(image_processor, "max_image_size", None) or {}, "longest_edge")
    if not max_image_size:
        raise CountError("max_image_size must hold longest_edge")
    image_seq_len = processor_config.get("image_seq_len") or DEFAULT_IMAGE_SEQ_LEN
    return Idefics3Settings(
        image_seq_len=int(image_seq_len),
        max_image_size=max_image_size,
        longest_edge=longest_edge,
        do_resize=do_resize,
        do_image_splitting=bool(getattr(image_processor, "do_image_splitting", True)),
        size_height=height,
        size_width=width,
        model_image_seq_len=_model_image_seq_len(model_config),
    )


def rescale_to_max_len(height: int, width: int, max_len: int) -> tuple[int, int]:
    """transformers' _resize_output_size_rescale_to_max_len: long side = max_len, short side even."""
    aspect_ratio = width / height
    if width >= height:
        width = max_len
        height = int(width / aspect_ratio)
        if height % 2 != 0:
            height += 1
    else:
        height = max_len
        width = int(height * aspect_ratio)
        if width % 2 != 0:
            width += 1
    return max(height, 1), max(width, 1)


def scale_below_upper_bound(height: int, width: int, max_len: int = MAX_IMAGE_SIZE) -> tuple[int, int]:
    """transformers' _resize_output_size_scale_below_upper_bound (the 4096 cap)."""
    aspect_ratio = width / height
    if width >= height and width > max_len:
        width = max_len
        height = int(width / aspect_ratio)
    elif height > width and height > max_len:
        height = max_len
        width = int(height * aspect_ratio)
    return max(height, 1), max(width, 1)


def resize_for_vision_encoder(height: int, width: int, tile: int) -> tuple[int, int]:
    """transformers' resize_for_vision_encoder: the short side from int(new_long / aspect), both up to tiles."""
    aspect_ratio = width / height
    if width >= height:
        width = math.ceil(width / tile) * tile
        height = int(width / aspect_ratio)
        height = math.ceil(height / tile) * tile
    else:
        height = math.ceil(height / tile) * tile
        width = int(height * aspect_ratio)
        width = math.ceil(width / tile) * tile
    return height, width


def resized_size(height: int, width: int, settings: Idefics3Settings) -> tuple[int, int]:
    """Size after the image processor's resize step (before splitting)."""
    if not settings.do_resize:
        return height, width
    if settings.longest_edge:
        height, width = rescale_to_max_len(height, width, settings.longest_edge)
        return scale_below_upper_bound(height, width)
    return int(settings.size_height or 0), int(settings.size_width or 0)


def count(height: int, width: int, settings: Idefics3Settings, images_in_row: int = 1) -> ImageCount:
    """Tiles (rows, cols) and <image> tokens: image_seq_len per tile plus one global image."""
    del images_in_row  # every image is expanded on its own
    if height < 1 or width < 1:
        raise CountError(f"image size {width}x{height} is empty")
    tile = settings.max_image_size
    height, width = resized_size(height, width, settings)
    rows = cols = 0
    if settings.do_image_splitting:
        height, width = resize_for_vision_encoder(height, width, tile)
        if height < 1 or width < 1:
            raise CountError(f"resizing gives an empty {width}x{height} image")
        if height > tile or width > tile:
            rows, cols = (height - tile) // tile + 1, (width - tile) // tile + 1
        else:
            height = width = tile  # ceil to multiples of the tile: exactly one tile
    else:
        height = width = tile
    return ImageCount(height, width, (rows, cols), settings.image_seq_len * (rows * cols + 1))


def count_exact(image_processor: Any, images: list[Any], settings: Idefics3Settings) -> list[ImageCount]:
    """Run the real image processor on the row's decoded images and read its rows / cols."""
    try:
        output = image_processor(images=images, return_row_col_info=True)
    except ValueError as exc:
        raise CountError(str(exc)) from None
    tile = settings.max_image_size
    counts = []
    for rows, cols in zip(
        (r for batch in output["rows"] for r in batch),
        (c for batch in output["cols"] for c in batch),
        strict=True,
    ):
        rows, cols = int(rows), int(cols)
        counts.append(
            ImageCount(
                max(rows, 1) * tile,
                max(cols, 1) * tile,
                (rows, cols),
                settings.image_seq_len * (rows * cols + 1),
            )
        )
    return counts


def expand(count: ImageCount, settings: Idefics3Settings) -> Expansion:
    """The processor's text for one image: tiles row by row with "\\n" after each row, then the global image."""
    rows, cols = count.grid
    image = Run(PLACEHOLDER, settings.image_seq_len)
    segments: list[str | Run] = []
    for row in range(rows):
        for col in range(cols):
            segments += [f"{FAKE_IMAGE_TOKEN}<row_{row + 1}_col_{col + 1}>", image]
        segments.append("\n")
    segments += [
        "\n" if rows or cols else "",
        f"{FAKE_IMAGE_TOKEN}{GLOBAL_IMAGE_TOKEN}",
        image,
        FAKE_IMAGE_TOKEN,
    ]
    return tuple(segment for segment in segments if segment != "")


def size_knob(settings: Any) -> Knob | str:
    """size.longest_edge, on the grid of multiples of the tile up to the 4096-pixel cap (`vlmlint stats`)."""
    tile = settings.max_image_size
    fixed = f"every image is one {tile}x{tile} image of {settings.image_seq_len} tokens"
    if not settings.do_resize or not settings.longest_edge:
        return (
            "do_resize is off or size is a fixed height x width (not longest_edge): no image-size knob; "
            "only the max length is recommended"
        )
    if not settings.do_image_splitting:
        return f"do_image_splitting is off: {fixed}, so image tokens per image are fixed; only the max length is recommended"
    # The resize caps the long side at 4096 pixels: the grid ends at the first multiple of the tile above.
    high = -(-MAX_IMAGE_SIZE // tile) * tile
    return Knob(
        name="size.longest_edge",
        current=settings.longest_edge,
        step=tile,
        low=tile,
        settings_at=lambda value: dataclasses.replace(settings, longest_edge=value),
        shape=lambda height, width: ((), high),  # tiles never decrease as longest_edge grows
        open_ended=False,
        text_unchanged=False,
        grid=f"multiples of max_image_size.longest_edge = {tile}, up to {high} (the {MAX_IMAGE_SIZE}-pixel cap)",
    )


# ---- videos: transformers 5.24 SmolVLMVideoProcessor through SmolVLMProcessor ---------------------

VIDEO_PROCESSOR = "SmolVLMVideoProcessor"
VIDEO_PLACEHOLDER = "<video>"  # SmolVLMProcessor.video_token (the tokenizer's video_token, else "<video>")
VIDEO_INTRO = (
    "You are provided the following series of {frame_count} frames from a {video_duration} [H:MM:SS] video.\n"
)
FRAME_TIMESTAMP = "\nFrame from {timestamp}:"
MEDIA_OUTTRO = "\n\n"
DEFAULT_VIDEO_FPS = 24  # replace_video_token's stand-in for a video without fps
SKIP_SECS = 1  # sample_frames' skip_secs default (not a processor kwarg)


# The first release whose SmolVLMProcessor intro names each video's own frame count.
OWN_FRAMES_SINCE = "5.25.0"


@dataclass(frozen=True)
class SmolVLMVideoSettings:
    """SmolVLMVideoProcessor's sampling settings and the processor's per-frame image block."""

    image_seq_len: int
    do_sample_frames: bool = False
    num_frames: int | None = 64  # video_sampling.max_frames
    fps: float | None = 1  # video_sampling.fps
    do_pad: bool = True
    do_resize: bool = True
    max_image_size: int = 512  # every frame's side after the resize (max_image_size.longest_edge)
    video_sampling: bool = True  # fps / num_frames came from the file's video_sampling (fps, max_frames)
    # The intro names the clip's own frame count (transformers 5.25+: len(timestamps)), not
    # pixel_values.shape[1], the most frames of any video in the call (5.24 and before)
    intro_names_own_frames: bool = field(default_factory=lambda: installed_at_least(OWN_FRAMES_SINCE))


def video_settings_from(
    config: dict[str, Any], image_settings: Any, processor_class: str | None
) -> SmolVLMVideoSettings:
    """SmolVLMVideoProcessor's settings as its __init__ takes them (video_sampling wins)."""
    if processor_class != "SmolVLMProcessor":
        raise CountError(f"{processor_class} has no video path (only SmolVLMProcessor takes videos)")
    processor = config.get("video_processor_type")
    if processor != VIDEO_PROCESSOR:
        raise CountError(f"its video processor {processor} is not one vlmlint reproduces ({VIDEO_PROCESSOR})")
    num_frames, fps = config.get("num_frames"), config.get("fps")
    sampling = config.get("video_sampling")
    if sampling is not None:
        if not isinstance(sampling, dict) or "max_frames" not in sampling or "fps" not in sampling:
            raise CountError(f"video_sampling must hold max_frames and fps (the video processor's __init__ reads both), got {sampling!r}")  # fmt: skip
        num_frames, fps = sampling["max_frames"], sampling["fps"]
    if fps is not None and (isinstance(fps, bool) or not isinstance(fps, (int, float))):
        raise CountError(f"video processor fps must be a number, got {fps!r}")
    return SmolVLMVideoSettings(
        image_seq_len=image_settings.image_seq_len,
        do_sample_frames=bool(config.get("do_sample_frames")),
        num_frames=None if num_frames is None else positive_int(num_frames, "num_frames"),
        fps=fps,
        do_pad=bool(config.get("do_pad", True)),
        do_resize=bool(config.get("do_resize", True)),
        max_image_size=positive_int(
            _size_value(config.get("max_image_size") or {}, "longest_edge"), "max_image_size.longest_edge"
        ),
        video_sampling=sampling is not None,
    )


def sampled_indices(meta: VideoMeta, settings: SmolVLMVideoSettings) -> tuple[list[int], str, str | None]:
    """The frame indices SmolVLMVideoProcessor.sample_frames keeps, the mode and any max_frames cap in words."""
    import numpy as np

    total = meta.frames
    if not settings.do_sample_frames:
        return list(range(total)), "every frame (do_sample_frames is false)", None
    if meta.fps is None:
        raise CountError(
            "Asked to sample frames per second but no video metadata was provided which is required when "
            f"sampling in SmolVLM (a {meta.frames_from} has no fps): set do_sample_frames=False"
        )
    num_frames, fps = settings.num_frames, settings.fps
    if num_frames is None or fps is None:
        raise CountError(
            "SmolVLM's sampler needs both fps and num_frames (video_sampling fps and max_frames)"
        )
    duration = meta.duration if meta.duration is not None else total / meta.fps
    estimated = int(round(fps * duration))
    desired = max(min(estimated, num_frames), 1)
    start, end = 0, total - 1
    skipped = SKIP_SECS > 0 and (duration - 2 * SKIP_SECS) > (num_frames * fps)
    if skipped:
        start, end = int(SKIP_SECS * meta.fps), int(total - SKIP_SECS * meta.fps)
    start, end = max(0, start), min(end, total - 1)
    if start >= end:
        start, end = 0, total - 1
    indices = [int(i) for i in np.unique(np.linspace(start, end, desired, dtype=int))]
    mode = f"fps {fps:g}, at most {num_frames} frames" + (", 1 s skipped at each end" if skipped else "")
    capped = None
    if estimated > num_frames:
        capped = (
            f"fps {fps:g} over {duration:.1f} s asks for {estimated} frames; max_frames {num_frames} keeps "
            f"{len(indices)} (one every {duration / len(indices):.2f} s)"
        )
    return indices, mode, capped


def count_video(meta: VideoMeta, settings: SmolVLMVideoSettings) -> VideoCount:
    """The kept frames, each one max_image_size square image of image_seq_len <image> tokens.

    grid: (the frame count the intro names - this clip's own until `row_videos` sets the row's most -,
    the whole seconds of its duration as the intro writes them); timestamps: each kept frame's seconds.
    """
    if meta.frames < 1:
        raise CountError("the video has no frames")
    indices, mode, capped = sampled_indices(meta, settings)
    fps = meta.fps if meta.fps is not None else DEFAULT_VIDEO_FPS
    timestamps = tuple(index / fps for index in indices)
    # int(metadata.duration); a frame list has none: int(the last timestamp)
    duration = int(meta.duration) if meta.duration is not None else int(timestamps[-1])
    tokens = settings.image_seq_len * len(indices)
    # every frame becomes one max_image_size square (do_resize), else keeps its size: the tokens are the same
    height, width = (settings.max_image_size,) * 2 if settings.do_resize else (meta.height, meta.width)
    return VideoCount(len(indices), height, width, (len(indices), duration), tokens, mode, timestamps, capped)


def row_videos(counts: list[VideoCount], settings: SmolVLMVideoSettings) -> list[VideoCount]:
    """One processor call's videos together: pixel_values.shape[1] (the intro's frame count up to
    transformers 5.24) is the most frames of any of them (do_pad); without do_pad, clips of other lengths
    or sizes cannot be stacked."""
    if not counts:
        return counts
    most = max(count.frames for count in counts)
    shapes = {(count.frames, count.resized_height, count.resized_width) for count in counts}
    if not settings.do_pad and len(shapes) > 1:
        raise CountError(
            "do_pad is off and the row's videos differ in frame count or frame size: the processor cannot "
            "stack them into one pixel_values tensor"
        )
    if settings.intro_names_own_frames:
        return counts
    return [dataclasses.replace(count, grid=(most, *count.grid[1:])) for count in counts]


def _number_words(number: int) -> str:
    from num2words import num2words  # (LGPL-2.1, pure Python: what SmolVLMProcessor spells numbers with)

    return num2words(number)


def expand_video(count: VideoCount, settings: SmolVLMVideoSettings) -> Expansion:
    """`replace_video_token`: the intro, per frame its MM:SS line and single-image block, the outro."""
    from datetime import timedelta

    frame_count, duration = count.grid
    segments: list[str | Run] = [
        VIDEO_INTRO.format(
            frame_count=_number_words(frame_count), video_duration=str(timedelta(seconds=duration))
        )
    ]
    image = Run(PLACEHOLDER, settings.image_seq_len)
    for seconds in count.timestamps:
        stamp = f"{int(seconds // 60):02d}:{int(seconds % 60):02d}"
        segments += [
            FRAME_TIMESTAMP.format(timestamp=stamp) + FAKE_IMAGE_TOKEN + GLOBAL_IMAGE_TOKEN,
            image,
            FAKE_IMAGE_TOKEN,
        ]
    segments.append(MEDIA_OUTTRO)
    return tuple(segments)


def video_knobs(settings: SmolVLMVideoSettings, pipeline: Any) -> tuple[list[VideoKnob], list[str]]:
    """`vlmlint stats` under transformers' own video processor: SmolVLMVideoProcessor's fps and frame cap
    (video_sampling's fps / max_frames, only with do_sample_frames: with it false, the frame cap written
    with do_sample_frames: true). No frame-size knob: every frame is one image_seq_len block."""
    keys = (
        ("video_sampling.fps", "video_sampling.max_frames")
        if settings.video_sampling
        else ("fps", "num_frames")
    )
    knobs, notes = frame_knobs(
        settings, pipeline, VIDEO_PROCESSOR, "both", fps_key=keys[0], frames_key=keys[1]
    )
    notes.append(
        f"frame size: {VIDEO_PROCESSOR} resizes every frame to one {settings.max_image_size}x"
        f"{settings.max_image_size} image of image_seq_len {settings.image_seq_len} tokens, so no size "
        "setting changes the count"
    )
    return knobs, notes


# Idefics3Processor.__call__ finds each image's text by its first and last character
# (char_to_token(end - 1)) and fails when a cut removes the last one.
FAMILY = Family.define(
    __name__, name="idefics3", title="Idefics3 / SmolVLM",
    processor_classes=("Idefics3Processor", "SmolVLMProcessor"),
    image_processor_types=image_processor_types("Idefics3") + image_processor_types("SmolVLM"),
    placeholder=PLACEHOLDER, checks_image_span=True, video_placeholder=VIDEO_PLACEHOLDER,
)  # fmt: skip
