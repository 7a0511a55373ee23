"""LLaVA-OneVision: NeXT-style anyres with a 27x27 SigLIP base and the anyres_max_9 reduction.

Processor (transformers 5.x `LlavaOnevisionProcessor.replace_image_token`): each `<image>` becomes
N copies of itself. What N is depends on the row, because the image processor gets the row's images
as one nested list (`apply_chat_template` and TRL's collators pass `images=[[img, ...]]`) and returns
`batch_num_images`:
- a row with ONE image: anyres. N = unpadded feature grid (reduced to about max_num_patches * 27^2 when
  larger) + one newline per grid row + 729 for the base view;
- a row with SEVERAL images: no anyres; each image is padded to a square and resized to one 384x384
  view, N = num_image_tokens + 1 (newline) = 730 per image.
"default" feature selection (not used by the hub checkpoints) subtracts one from either.

Videos (transformers 5.24 `LlavaOnevisionVideoProcessor`, BaseVideoProcessor.sample_frames and
video_utils.default_sample_indices_fn; `LlavaOnevisionProcessor.replace_video_token`): the template's
`<video>` becomes frames * ceil(sqrt(num_image_tokens) / 2)^2 + 1 copies of `<video>` (196 per frame
of the 27x27 SigLIP grid, pooled 2x2, and one newline), whatever the frame size (every frame is
resized to one 384x384 view). The frames are every frame (do_sample_frames is off by default), or with
do_sample_frames: num_frames, or max(1, int(total / video_fps * fps)), refused above the total. The
processor stacks a row's videos into one pixel_values_videos tensor (return_tensors="pt"): clips that keep
different frame counts or frame sizes make it raise, which check_videos predicts.
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
    VideoCount,
    image_processor_types,
    no_knob,
    positive_int,
    stacked_videos,
)
from vlmlint.models.knobs import VideoKnob, frame_knobs
from vlmlint.models.llava_next import select_best_resolution  # the same pinpoint choice
from vlmlint.records import VideoMeta

PLACEHOLDER = "<image>"
VIDEO_PLACEHOLDER = "<video>"


@dataclass(frozen=True)
class OnevisionSettings:
    image_grid_pinpoints: tuple[tuple[int, int], ...]  # (height, width) canvases the image may fill
    view_height: int  # one processed view, pixel_values[0][0].shape[-2:], which the processor divides by
    view_width: int
    tile_size: int  # what the image processor cuts the canvas into (crop_size, else size)
    num_image_tokens: int  # features of one view: 729 = 27*27 for SigLIP 384/14
    vision_feature_select_strategy: str | None = "full"
    vision_aspect_ratio: str = "anyres_max_9"


def _size_pair(size: Any) -> tuple[int, int] | None:
    height = getattr(size, "height", None)
    width = getattr(size, "width", None)
    if height and width:
        return int(height), int(width)
    edge = getattr(size, "shortest_edge", None)
    return (int(edge), int(edge)) if edge else None


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> OnevisionSettings:
    """Pinpoints and view size from the image processor; token counts from the processor's own config."""
    del model_config  # the processor counts from its own settings; the model's may disagree (see docs)
    view = _size_pair(getattr(image_processor, "size", None))
    if view is None:
        raise CountError(f"size must hold height/width or shortest_edge, got {image_processor.size}")
    crop = _size_pair(getattr(image_processor, "crop_size", None))
    crop_height = getattr(getattr(image_processor, "crop_size", None), "height", None)
    tile_size = int(crop_height) if crop_height else view[0]  # the image processor's patch_size
    if getattr(image_processor, "do_center_crop", None) and crop is not None:
        view = crop  # every view is center-cropped to crop_size before the processor reads its shape
    pinpoints = getattr(image_processor, "image_grid_pinpoints", None)
    if not pinpoints:
        raise CountError("image_grid_pinpoints is empty: the processor cannot choose an anyres canvas")
    num_image_tokens = processor_config.get("num_image_tokens")
    if not isinstance(num_image_tokens, int) or num_image_tokens <= 0:
        raise CountError(
            "processor_config.json has no num_image_tokens; LlavaOnevisionProcessor cannot count image tokens"
        )
    return OnevisionSettings(
        image_grid_pinpoints=tuple((int(h), int(w)) for h, w in pinpoints),
        view_height=view[0],
        view_width=view[1],
        tile_size=tile_size,
        num_image_tokens=num_image_tokens,
        vision_feature_select_strategy=processor_config.get("vision_feature_select_strategy"),
        vision_aspect_ratio=str(processor_config.get("vision_aspect_ratio") or "anyres_max_9"),
    )


def _patch_output_size(height: int, width: int, target: tuple[int, int]) -> tuple[int, int]:
    """transformers' get_patch_output_size: the image fitted inside the canvas before padding."""
    target_height, target_width = target
    scale_w = target_width / width
    scale_h = target_height / height
    if scale_w < scale_h:
        return min(math.ceil(height * scale_w), target_height), target_width
    return target_height, min(math.ceil(width * scale_h), target_width)


def _max_num_patches(vision_aspect_ratio: str) -> int:
    try:
        # A strip of characters, not of a prefix: exactly what the processor does.
        return int(vision_aspect_ratio.strip("anyres_max_"))  # noqa: B005
    except ValueError:
        raise CountError(
            f"vision_aspect_ratio {vision_aspect_ratio!r} has no anyres_max_<N>: the processor fails on it"
        ) from None


def unpadded_features(
    height: int, width: int, patches: int, scale_height: int, scale_width: int, max_num_patches: int
) -> tuple[int, int]:
    """The processor's _get_unpadded_features, same float expressions: (features, newlines)."""
    current_height = patches * scale_height
    current_width = patches * scale_width
    original_aspect_ratio = width / height
    current_aspect_ratio = current_width / current_height
    if original_aspect_ratio > current_aspect_ratio:
        new_height = int(round(height * (current_width / width), 7))
        padding = (current_height - new_height) // 2
        current_height -= padding * 2
    else:
        new_width = int(round(width * (current_height / height), 7))
        padding = (current_width - new_width) // 2
        current_width -= padding * 2
    features = current_height * current_width
    newlines = current_height
    ratio = math.sqrt(current_height * current_width / (max_num_patches * patches**2))
    if ratio > 1.1:
        features = int(current_height // ratio) * int(current_width // ratio)
        newlines = int(current_height // ratio)
    return features, newlines


def _tokens(settings: OnevisionSettings, base: int) -> int:
    return base - 1 if settings.vision_feature_select_strategy == "default" else base


def _single(height: int, width: int, settings: OnevisionSettings) -> ImageCount:
    best = select_best_resolution(height, width, settings.image_grid_pinpoints)
    scale_height, scale_width = best[0] // settings.view_height, best[1] // settings.view_width
    patches = int(math.sqrt(settings.num_image_tokens))
    features, newlines = unpadded_features(
        height, width, patches, scale_height, scale_width, _max_num_patches(settings.vision_aspect_ratio)
    )
    resized_height, resized_width = _patch_output_size(height, width, best)
    grid = (math.ceil(best[0] / settings.tile_size), math.ceil(best[1] / settings.tile_size))
    tokens = _tokens(settings, features + newlines + settings.num_image_tokens)
    return ImageCount(resized_height, resized_width, grid, tokens)


def _multi(settings: OnevisionSettings) -> ImageCount:
    """One padded-square view per image, no anyres tiles (grid (0, 0)): 729 + 1 newline."""
    return ImageCount(
        settings.view_height, settings.view_width, (0, 0), _tokens(settings, settings.num_image_tokens + 1)
    )


def count(height: int, width: int, settings: OnevisionSettings, images_in_row: int = 1) -> ImageCount:
    """Anyres for the only image of a row; a fixed 730 per image when the row holds several."""
    if height <= 0 or width <= 0:
        raise CountError(f"image size {width}x{height} is empty")
    if images_in_row != 1:
        return _multi(settings)
    return _single(height, width, settings)


def count_exact(image_processor: Any, images: list[Any], settings: OnevisionSettings) -> list[ImageCount]:
    """The real image processor on the row's images, passed together as one sample (nested list)."""
    if not images:
        return []
    try:
        output = image_processor(images=[list(images)])
    except ValueError as exc:
        raise CountError(str(exc)) from None
    batch_num_images = [int(n) for n in output["batch_num_images"]]
    view_height, view_width = (int(v) for v in output["pixel_values"][0][0].shape[-2:])
    view = OnevisionSettings(
        settings.image_grid_pinpoints,
        view_height,
        view_width,
        settings.tile_size,
        settings.num_image_tokens,
        settings.vision_feature_select_strategy,
        settings.vision_aspect_ratio,
    )
    counts = []
    for image_size, views in zip(output["image_sizes"], output["pixel_values"], strict=True):
        height, width = (int(v) for v in image_size)
        if batch_num_images != [1]:
            counts.append(_multi(view))
            continue
        single = _single(height, width, view)
        rows, cols = single.grid
        if len(views) != 1 + rows * cols:  # the image processor cut another number of tiles
            raise CountError(f"{width}x{height}: {len(views) - 1} anyres tiles, expected {rows}x{cols}")
        counts.append(single)
    return counts


def expand(count: ImageCount, settings: OnevisionSettings) -> Expansion:
    """`<image>` repeated once per feature; newline and base features are `<image>` ids too."""
    return (Run(PLACEHOLDER, count.tokens),)


# ---- videos: transformers 5.24 LlavaOnevisionVideoProcessor through LlavaOnevisionProcessor ----------

VIDEO_PROCESSOR = "LlavaOnevisionVideoProcessor"


@dataclass(frozen=True)
class OnevisionVideoSettings:
    """The video processor's settings (vlmlint/models/video_config.py reads them as from_pretrained) and
    the processor's num_image_tokens, which fixes the pooled grid of every frame."""

    num_image_tokens: int
    do_sample_frames: bool
    fps: float | None
    num_frames: int | None
    do_resize: bool
    size_height: int | None  # size {"height", "width"}: every frame resized to it
    size_width: int | None
    shortest_edge: int | None  # size {"shortest_edge"}: the short side (the count does not change)

    @property
    def pooled(self) -> int:
        """replace_video_token: ceil(sqrt(num_image_tokens) / 2) pooled features a side per frame."""
        return math.ceil(int(math.sqrt(self.num_image_tokens)) / 2)


def video_settings_from(
    config: dict[str, Any], image_settings: Any, processor_class: str | None
) -> OnevisionVideoSettings:
    """LlavaOnevisionVideoProcessor's settings; num_image_tokens from the processor (image settings)."""
    processor = config.get("video_processor_type")
    if processor != VIDEO_PROCESSOR:
        raise CountError(f"its video processor {processor} is not one vlmlint reproduces ({VIDEO_PROCESSOR})")
    if processor_class != "LlavaOnevisionProcessor":
        raise CountError(f"{processor_class} with a {processor} is not a pairing vlmlint reproduces")
    size = config.get("size") or {}
    if not isinstance(size, dict):
        raise CountError(f"video processor size must be a dict, got {size!r}")
    fps, num_frames = config.get("fps"), config.get("num_frames")
    if fps is not None and (isinstance(fps, bool) or not isinstance(fps, (int, float)) or not fps > 0):
        raise CountError(f"video processor fps must be a positive number, got {fps!r}")
    return OnevisionVideoSettings(
        num_image_tokens=image_settings.num_image_tokens,
        do_sample_frames=bool(config.get("do_sample_frames")),
        fps=fps,
        num_frames=None if num_frames is None else positive_int(num_frames, "num_frames"),
        do_resize=bool(config.get("do_resize", True)),
        size_height=size.get("height"),
        size_width=size.get("width"),
        shortest_edge=size.get("shortest_edge"),
    )


def sampled_frames(meta: VideoMeta, settings: OnevisionVideoSettings) -> tuple[int, str]:
    """How many frames BaseVideoProcessor.sample_frames keeps (default_sample_indices_fn), in words too."""
    total = meta.frames
    if not settings.do_sample_frames:
        return total, "every frame (do_sample_frames is false)"
    num_frames, fps = settings.num_frames, settings.fps
    if num_frames is not None and fps is not None:
        raise CountError("`num_frames` and `fps` are mutually exclusive arguments, please use only one!")
    if num_frames is not None:
        mode = f"num_frames {num_frames}"
    elif fps is not None:
        if meta.fps is None:
            raise CountError(
                f"Asked to sample `fps` frames per second but no original FPS was provided in video metadata "
                f"which is required when sampling with `{fps}` (a {meta.frames_from or 'video'} has no fps)"
            )
        num_frames = max(1, int(total / meta.fps * fps))  # at least one frame for very short clips
        mode = f"fps {fps:g}"
    else:
        return total, "every frame (do_sample_frames without fps or num_frames)"
    if num_frames > total:
        raise CountError(
            f"When loading the video with num_frames={num_frames}, the requested number of frames "
            f"exceeds total_num_frames={total}. Please set num_frames or fps to a smaller value."
        )
    return num_frames, mode  # np.arange(num_frames) * total // num_frames: num_frames distinct indices


def _resized(meta: VideoMeta, settings: OnevisionVideoSettings) -> tuple[int, int]:
    """The processed frame size (for the report; the count does not depend on it)."""
    if not settings.do_resize:
        return meta.height, meta.width
    if settings.size_height and settings.size_width:
        return settings.size_height, settings.size_width
    if settings.shortest_edge:  # default_to_square is False: the short side to shortest_edge
        short, long = sorted((meta.height, meta.width))
        other = int(settings.shortest_edge * long / short)
        if meta.height <= meta.width:
            return settings.shortest_edge, other
        return other, settings.shortest_edge
    raise CountError(f"video processor size must hold height/width or shortest_edge, got {settings}")


def count_video(meta: VideoMeta, settings: OnevisionVideoSettings) -> VideoCount:
    """frames * pooled^2 + 1 <video> tokens; the pooled grid is fixed, so the frame size does not count."""
    frames, mode = sampled_frames(meta, settings)
    if frames < 1:
        raise CountError("the video has no frames")
    if meta.height < 1 or meta.width < 1:
        raise CountError(f"frame size {meta.width}x{meta.height} is empty")
    height, width = _resized(meta, settings)
    pooled = settings.pooled
    return VideoCount(frames, height, width, (frames, pooled, pooled), frames * pooled * pooled + 1, mode)


def check_videos(counts: list[VideoCount], settings: OnevisionVideoSettings) -> None:
    """LlavaOnevisionProcessor stacks the row's videos (stacked_videos)."""
    del settings
    stacked_videos(counts, "LlavaOnevisionProcessor")


def expand_video(count: VideoCount, settings: OnevisionVideoSettings) -> Expansion:
    """`<video>` repeated once per pooled feature of every frame, and once for the newline."""
    return (Run(VIDEO_PLACEHOLDER, count.tokens),)


def video_knobs(settings: OnevisionVideoSettings, pipeline: Any) -> tuple[list[VideoKnob], list[str]]:
    """`vlmlint stats` under transformers' own video processor: num_frames or fps (BaseVideoProcessor's
    sampler: one or the other), num_frames with do_sample_frames: true where every frame is kept now. No
    frame-size knob: the pooled grid is fixed by num_image_tokens."""
    knobs, notes = frame_knobs(settings, pipeline, VIDEO_PROCESSOR, "either")
    notes.append(
        f"size: every frame is pooled to {settings.pooled}x{settings.pooled} features (from the processor's "
        f"num_image_tokens {settings.num_image_tokens}), so no size setting changes the count"
    )
    return knobs, notes


FAMILY = Family.define(
    __name__, name="llava-onevision", title="LLaVA-OneVision",
    processor_classes=("LlavaOnevisionProcessor",),
    image_processor_types=image_processor_types("LlavaOnevision"), placeholder=PLACEHOLDER,
    raw_image_prompt="<image>\n", video_placeholder=VIDEO_PLACEHOLDER, raw_video_prompt="<video>\n",
    size_knob=no_knob(
        "no image-size knob: image tokens per image are fixed by the grid pinpoints "
        "(image_grid_pinpoints); only the max length is recommended"
    ),
)  # fmt: skip
