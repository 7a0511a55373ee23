"""LLaVA-NeXT-Video (LlavaNextVideoProcessor): LLaVA-NeXT's anyres images, per-frame pooled video grids.

Images (transformers 5.24 `LlavaNextVideoProcessor.replace_image_token` / `_get_number_of_features`, copied
from LlavaNextProcessor): exactly LLaVA-NeXT's count, so vlmlint/models/llava_next.py's settings, count,
count_exact and expand are this family's (imported, not repeated).

Videos (transformers 5.24 `LlavaNextVideoVideoProcessor`, BaseVideoProcessor's sample_frames / _preprocess
in video_processing_utils.py, video_utils.default_sample_indices_fn; `LlavaNextVideoProcessor.
replace_video_token`): the template's `<video>` becomes
    (H // patch_size) * (W // patch_size) // 4 * frames
copies of `<video>` (the model average-pools each frame's patch grid 2x2), where H x W is the processed
frame: every frame resized (shortest_edge 336 on the hub: the short side to 336, the long one
int(336 * long / short)), then center-cropped (336 x 336: smaller frames padded up). The hub
checkpoint gives 24 * 24 // 4 = 144 per frame whatever the clip's size. No newline, start or timestamp
text is added. Frames: every frame (do_sample_frames is off by default), or with do_sample_frames the
num_frames / fps sampling of BaseVideoProcessor (llava_onevision.sampled_frames: the same base class).
The processor stacks a row's videos into one pixel_values_videos tensor (return_tensors="pt"): clips
that keep different frame counts or frame sizes make it raise, which check_videos predicts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vlmlint.models.base import (
    CountError,
    Expansion,
    Family,
    Run,
    VideoCount,
    frames_as_read,
    image_processor_types,
    no_knob,
    positive_int,
    stacked_videos,
)
from vlmlint.models.knobs import VideoKnob, frame_knobs
from vlmlint.models.llava import PLACEHOLDER, Size, resize_output
from vlmlint.models.llava_next import count, count_exact, expand, settings_from
from vlmlint.models.llava_onevision import sampled_frames  # BaseVideoProcessor.sample_frames, shared
from vlmlint.records import VideoMeta

__all__ = ["count", "count_exact", "expand", "settings_from"]  # LLaVA-NeXT's image hooks, found by name

VIDEO_PLACEHOLDER = "<video>"
VIDEO_PROCESSOR = "LlavaNextVideoVideoProcessor"
PROCESSOR_CLASS = "LlavaNextVideoProcessor"


@dataclass(frozen=True)
class LlavaNextVideoSettings:
    """The video processor's settings (as vlmlint/models/video_config.py reads them) and the processor's
    patch_size, which divides the processed frame."""

    patch_size: int
    do_sample_frames: bool
    fps: float | None
    num_frames: int | None
    do_resize: bool
    size: Size | None
    do_center_crop: bool
    crop_size: Size | None


def video_settings_from(
    config: dict[str, Any], image_settings: Any, processor_class: str | None
) -> LlavaNextVideoSettings:
    """LlavaNextVideoVideoProcessor's settings; patch_size from the processor (the image settings)."""
    if processor_class != PROCESSOR_CLASS:
        raise CountError(
            f"{processor_class} is not a processor vlmlint reproduces LLaVA-NeXT-Video videos for"
        )
    image_type = config.get("image_processor_type")
    if (
        isinstance(image_type, str)
        and image_type.replace("ImageProcessor", "VideoProcessor") == PROCESSOR_CLASS
    ):
        # No video_preprocessor_config.json: AutoVideoProcessor reads preprocessor_config.json, takes
        # its image processor's "video twin", which is the processor class, and loads it again forever
        # (up to 5.24) or builds it without a tokenizer (5.25: AttributeError in its __init__).
        raise CountError(
            f"the folder has no video_preprocessor_config.json: transformers' AutoVideoProcessor infers "
            f"{PROCESSOR_CLASS} from preprocessor_config.json's {image_type} and the processor cannot load "
            "(RecursionError; from transformers 5.25 AttributeError); add a video_preprocessor_config.json with "
            f'"video_processor_type": "{VIDEO_PROCESSOR}"'
        )
    processor = config.get("video_processor_type")
    if processor != VIDEO_PROCESSOR:
        raise CountError(f"its video processor {processor} is not one vlmlint reproduces ({VIDEO_PROCESSOR})")
    fps, num_frames = config.get("fps"), config.get("num_frames")
    if fps is not None and (isinstance(fps, bool) or not isinstance(fps, (int, float)) or not fps > 0):
        raise CountError(f"video processor fps must be a positive number, got {fps!r}")
    for key in ("size", "crop_size"):
        if config.get(key) is not None and not isinstance(config[key], dict):
            raise CountError(f"video processor {key} must be a dict, got {config[key]!r}")
    return LlavaNextVideoSettings(
        patch_size=image_settings.patch_size,
        do_sample_frames=bool(config.get("do_sample_frames")),
        fps=fps,
        num_frames=None if num_frames is None else positive_int(num_frames, "num_frames"),
        do_resize=bool(config.get("do_resize", True)),
        size=Size.of(config.get("size")),
        do_center_crop=bool(config.get("do_center_crop", True)),
        crop_size=Size.of(config.get("crop_size")),
    )


def frame_size(height: int, width: int, settings: LlavaNextVideoSettings) -> tuple[int, int]:
    """pixel_values_videos' frame size: BaseVideoProcessor._preprocess's resize, then its center crop."""
    if settings.do_resize:
        height, width = resize_output(height, width, settings.size)
        if height <= 0 or width <= 0:
            raise CountError(f"the video processor would resize the frames to {width}x{height}")
    if settings.do_center_crop:
        crop = settings.crop_size
        if crop is None or not crop.height or not crop.width:
            raise CountError(f"center crop needs crop_size height and width, got {crop}")
        height, width = crop.height, crop.width  # torchvision's center_crop pads smaller frames up
    return height, width


def count_video(meta: VideoMeta, settings: LlavaNextVideoSettings) -> VideoCount:
    """(H // patch) * (W // patch) // 4 <video> per kept frame; grid (frames, pooled cells per frame)."""
    frames, mode = sampled_frames(meta, settings)
    if frames < 1:
        raise CountError("the video has no frames")
    if meta.height < 1 or meta.width < 1:
        raise CountError(f"frame size {meta.width}x{meta.height} is empty")
    height, width = frame_size(
        *frames_as_read(meta), settings
    )  # (a frame list 1 or 3 px high: channels-first)
    per_frame = (height // settings.patch_size) * (width // settings.patch_size) // 4
    return VideoCount(frames, height, width, (frames, per_frame), per_frame * frames, mode)


def check_videos(counts: list[VideoCount], settings: LlavaNextVideoSettings) -> None:
    """The processor stacks a row's videos into one tensor: kept frames and frame sizes must agree."""
    del settings
    stacked_videos(counts, PROCESSOR_CLASS)


def expand_video(count: VideoCount, settings: LlavaNextVideoSettings) -> Expansion:
    """`<video>` once per pooled feature of every frame: nothing else enters the text."""
    return (Run(VIDEO_PLACEHOLDER, count.tokens),)


def video_knobs(settings: LlavaNextVideoSettings, pipeline: Any) -> tuple[list[VideoKnob], list[str]]:
    """`vlmlint stats` under transformers' own video processor: num_frames or fps (BaseVideoProcessor's
    sampler: one or the other), num_frames with do_sample_frames: true where every frame is kept now.
    The frame size does change the count, but not a size the model takes: its CLIP vision tower refuses
    frames other than its own input size (no interpolate_pos_encoding on the video path)."""
    knobs, notes = frame_knobs(settings, pipeline, VIDEO_PROCESSOR, "either")
    crop = settings.crop_size
    if settings.do_center_crop and crop is not None:
        size = f"crop_size {crop.width}x{crop.height}"
    else:
        size = "size"
    notes.append(
        f"{size}: not searched; the frames must keep the vision tower's input size (its CLIP encoder "
        "raises on any other), so only the frame count is a knob"
    )
    return knobs, notes


FAMILY = Family.define(
    __name__, name="llava-next-video", title="LLaVA-NeXT-Video",
    processor_classes=(PROCESSOR_CLASS,), image_processor_types=image_processor_types("LlavaNext"),
    placeholder=PLACEHOLDER, raw_image_prompt="<image>\n",
    video_placeholder=VIDEO_PLACEHOLDER, raw_video_prompt="<video>\n",
    size_knob=no_knob(
        "no image-size knob: image tokens per image are fixed by the grid pinpoints "
        "(image_grid_pinpoints); only the max length is recommended"
    ),
)  # fmt: skip
