"""Gemma 4: an aspect-ratio-preserving resize to multiples of 48 px within a soft-token budget.

Processor (transformers 5.24 `Gemma4Processor`): the chat template writes the tokenizer's image_token
(`<|image|>`) once per image; `ProcessorMixin.get_text_with_replacements` replaces each with
`Gemma4Processor.replace_image_token`:

    boi_token + image_token x num_soft_tokens_per_image[i] + eoi_token      ("<|image>" ... "<image|>")

with no text around it (Gemma 3 writes "\\n\\n" on both sides; Gemma 4 does not).

Image processor (`Gemma4ImageProcessorPil._preprocess`, the same arithmetic in the torchvision
backend): with max_patches = max_soft_tokens * pooling_kernel_size**2, each image is resized by
`get_aspect_ratio_preserving_size` to the largest height and width that are multiples of
pooling_kernel_size * patch_size (48 px for the hub's 16 x 3) and hold at most max_patches patches,
keeping the aspect ratio (factor sqrt(max_patches * patch_size**2 / (h * w)), each side floored to
the multiple). A side that floors to 0 becomes one multiple and the other side
floor(long / short) multiples, capped at (max_patches // pooling_kernel_size**2) multiples. The soft
tokens are then (resized_h // patch_size) * (resized_w // patch_size) // pooling_kernel_size**2, so
one image's count depends on its aspect ratio (280 at most with the hub's budget, e.g. 266 for 4:3).

Which settings `processor(text, images)` uses (`ProcessorMixin._merge_kwargs`): Gemma4Processor has no
images_kwargs of its own, so the image processor's attributes, overridden by the tokenizer's init
kwargs (tokenizer_config.json) where they name max_soft_tokens, patch_size, pooling_kernel_size or
do_resize. max_soft_tokens must be one of 70, 140, 280, 560, 1120 (the image processor raises
otherwise); processor_config.json's image_seq_length (280) is not used for images at all.

Videos (`Gemma4VideoProcessor` in video_processing_gemma4.py, `BaseVideoProcessor.sample_frames` and
video_utils.default_sample_indices_fn; `Gemma4Processor.replace_video_token`): the template's
`<|video|>` becomes, for each kept frame, "MM:SS " + boi + `<|video|>` x soft tokens + eoi, joined by
spaces, MM:SS from the frame's index / fps (24 when the video has no fps). Each frame is resized by the
same get_aspect_ratio_preserving_size within the video processor's own budget (max_soft_tokens 70 by
default). The sampler keeps num_frames frames (32 by default: a shorter clip is refused) or, only when
num_frames is unset, max(1, int(total / fps * fps_wanted)); both set: refused.
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
    frames_as_read,
    image_processor_types,
    no_knob,
    positive_int,
)
from vlmlint.models.knobs import VideoKnob, frame_knobs, settings_at
from vlmlint.records import VideoMeta

DEFAULT_IMAGE_TOKEN = "<|image|>"
DEFAULT_BOI_TOKEN = "<|image>"
DEFAULT_EOI_TOKEN = "<image|>"
# Gemma4ImageProcessorPil's class defaults (transformers 5.24).
DEFAULT_PATCH_SIZE = 16
DEFAULT_POOLING_KERNEL_SIZE = 3
DEFAULT_MAX_SOFT_TOKENS = 280
# image_processing_pil_gemma4._SUPPORTED_SOFT_TOKENS
SUPPORTED_SOFT_TOKENS = (70, 140, 280, 560, 1120)
# The image settings `_merge_kwargs` lets tokenizer_config.json override.
IMAGE_KWARGS = ("max_soft_tokens", "patch_size", "pooling_kernel_size", "do_resize")


@dataclass(frozen=True)
class Gemma4Settings:
    patch_size: int = DEFAULT_PATCH_SIZE
    pooling_kernel_size: int = DEFAULT_POOLING_KERNEL_SIZE
    max_soft_tokens: int = DEFAULT_MAX_SOFT_TOKENS
    do_resize: bool = True
    image_token: str = DEFAULT_IMAGE_TOKEN  # what the chat template writes and the soft-token run repeats
    boi_token: str = DEFAULT_BOI_TOKEN
    eoi_token: str = DEFAULT_EOI_TOKEN

    @property
    def placeholder(self) -> str:
        """The processor's image_token is what it looks for in the text (Family.bound reads this)."""
        return self.image_token

    @property
    def max_patches(self) -> int:
        return self.max_soft_tokens * self.pooling_kernel_size**2

    def images_kwargs(self) -> dict[str, Any]:
        """What the processor passes its image processor (so count_exact runs the same pipeline)."""
        return {
            "max_soft_tokens": self.max_soft_tokens,
            "patch_size": self.patch_size,
            "pooling_kernel_size": self.pooling_kernel_size,
            "do_resize": self.do_resize,
        }


def tokenizer_token(tokenizer_kwargs: dict[str, Any], name: str, default: str | None) -> str | None:
    """A token the processor reads from its tokenizer (tokenizer.boi_token, ...), from its init kwargs:
    top level, else the extra special tokens transformers keeps under model_specific_special_tokens."""
    for section in (
        tokenizer_kwargs,
        tokenizer_kwargs.get("model_specific_special_tokens"),
        tokenizer_kwargs.get("extra_special_tokens"),
    ):
        if isinstance(section, dict) and section.get(name) is not None:
            value = section[name]
            value = getattr(value, "content", value)  # an AddedToken
            if isinstance(value, str) and value:
                return value
    return default


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> Gemma4Settings:
    """The images kwargs `processor(text, images)` ends up with, and the tokenizer's image tokens."""
    tokenizer_kwargs = processor_config.get("tokenizer_init_kwargs") or {}

    def pipeline(key: str, default: Any) -> Any:
        if key in tokenizer_kwargs:  # _merge_kwargs step 5: tokenizer init kwargs
            return tokenizer_kwargs[key]
        value = getattr(image_processor, key, None)  # the image processor's own settings
        return default if value is None else value

    # Gemma4Processor.validate_inputs refuses every call, text alone too, when the tokenizer lacks
    # boa_token or eoa_token (its `audio is not None and ... or ...` reads without parentheses).
    for name in ("boa_token", "eoa_token"):
        if tokenizer_token(tokenizer_kwargs, name, None) is None:
            raise CountError(
                f"the tokenizer has no {name}, so Gemma4Processor refuses every call with "
                "'Audio inputs were provided, but the tokenizer does not have an `audio_token` defined.'"
            )
    image_token = processor_config.get("tokenizer_image_token") or tokenizer_token(
        tokenizer_kwargs, "image_token", DEFAULT_IMAGE_TOKEN
    )
    do_resize = pipeline("do_resize", True)
    return Gemma4Settings(
        patch_size=positive_int(pipeline("patch_size", DEFAULT_PATCH_SIZE), "patch_size"),
        pooling_kernel_size=positive_int(
            pipeline("pooling_kernel_size", DEFAULT_POOLING_KERNEL_SIZE), "pooling_kernel_size"
        ),
        max_soft_tokens=positive_int(pipeline("max_soft_tokens", DEFAULT_MAX_SOFT_TOKENS), "max_soft_tokens"),
        do_resize=bool(do_resize),
        image_token=str(image_token),
        boi_token=str(tokenizer_token(tokenizer_kwargs, "boi_token", DEFAULT_BOI_TOKEN)),
        eoi_token=str(tokenizer_token(tokenizer_kwargs, "eoi_token", DEFAULT_EOI_TOKEN)),
    )


def aspect_ratio_preserving_size(height: int, width: int, settings: Gemma4Settings) -> tuple[int, int]:
    """`get_aspect_ratio_preserving_size`, the same float arithmetic in the same order (ties floor alike)."""
    patch_size, kernel = settings.patch_size, settings.pooling_kernel_size
    max_patches = settings.max_patches
    total_px = height * width
    target_px = max_patches * (patch_size**2)
    factor = math.sqrt(target_px / total_px)
    ideal_height = factor * height
    ideal_width = factor * width
    side_mult = kernel * patch_size
    target_height = int(math.floor(ideal_height / side_mult)) * side_mult
    target_width = int(math.floor(ideal_width / side_mult)) * side_mult
    if target_height == 0 and target_width == 0:
        raise CountError(
            "Attempting to resize to a 0 x 0 image. Resized height should be divisible by "
            f"`pooling_kernel_size * patch_size`={side_mult}."
        )
    max_side_length = (max_patches // kernel**2) * side_mult
    if target_height == 0:  # a very wide image: one row of pooled patches
        target_height = side_mult
        target_width = min(int(math.floor(width / height)) * side_mult, max_side_length)
    elif target_width == 0:  # a very tall one: one column
        target_width = side_mult
        target_height = min(int(math.floor(height / width)) * side_mult, max_side_length)
    if target_height * target_width > target_px:
        raise CountError(
            f"Resizing [{height}x{width}] to [{target_height}x{target_width}] "
            f"but this exceeds {max_patches} patches with patch_size {patch_size}"
        )
    return target_height, target_width


def count(height: int, width: int, settings: Gemma4Settings, images_in_row: int = 1) -> ImageCount:
    """Soft tokens of one image: `_preprocess`'s patches // pooling_kernel_size**2 after its resize.

    grid: (patch rows, patch columns) of the resized image.
    """
    if height < 1 or width < 1:
        raise CountError(f"image of {width}x{height} pixels")
    if settings.max_soft_tokens not in SUPPORTED_SOFT_TOKENS:
        raise CountError(
            f"`max_soft_tokens` must be one of {SUPPORTED_SOFT_TOKENS}, got {settings.max_soft_tokens}."
        )
    patch = settings.patch_size
    if settings.do_resize:
        resized_height, resized_width = aspect_ratio_preserving_size(height, width, settings)
    else:
        resized_height, resized_width = height, width
        if height % patch or width % patch:
            # convert_image_to_patches reshapes (C, H, W) into whole patches: numpy refuses the rest
            raise CountError(
                f"with do_resize off, an image of {width}x{height} is not whole {patch}-px patches: "
                "the image processor cannot cut it into patches"
            )
    rows, cols = resized_height // patch, resized_width // patch
    return ImageCount(
        resized_height, resized_width, (rows, cols), rows * cols // settings.pooling_kernel_size**2
    )


def count_exact(image_processor: Any, images: list[Any], settings: Gemma4Settings) -> list[ImageCount]:
    """Run the real image processor with the processor's images kwargs; the resized size from the
    patch positions it returns (padding positions are -1)."""
    try:
        output = image_processor(images=images, **settings.images_kwargs())
    except (ValueError, ZeroDivisionError) as exc:
        raise CountError(str(exc)) from None
    counts = []
    for positions, tokens in zip(
        output["image_position_ids"], output["num_soft_tokens_per_image"], strict=True
    ):
        real = [(int(x), int(y)) for x, y in positions if x >= 0]
        cols = max(x for x, _ in real) + 1
        rows = max(y for _, y in real) + 1
        patch = settings.patch_size
        counts.append(ImageCount(rows * patch, cols * patch, (rows, cols), int(tokens)))
    return counts


def expand(count: ImageCount, settings: Gemma4Settings) -> Expansion:
    """`replace_image_token`: boi, the soft-token run, eoi; nothing else around them."""
    return (settings.boi_token, Run(settings.image_token, count.tokens), settings.eoi_token)


size_knob = no_knob(
    "Gemma 4's image-size setting, max_soft_tokens, takes only 70, 140, 280, 560 or 1120 (the image "
    "processor refuses other values) and vlmlint stats does not search that set yet; only the max length "
    "is recommended"
)


# ---- videos: transformers 5.24 Gemma4VideoProcessor through Gemma4Processor ------------------------

VIDEO_PROCESSOR = "Gemma4VideoProcessor"
VIDEO_TOKEN = "<|video|>"  # Gemma4Processor.__init__ adds it to the tokenizer and writes it itself
DEFAULT_VIDEO_FPS = 24  # replace_video_token's stand-in for a video without fps


@dataclass(frozen=True)
class Gemma4VideoSettings:
    """The video processor's settings (vlmlint/models/video_config.py reads them as from_pretrained) and
    the tokenizer's boi / eoi tokens around each frame."""

    patch_size: int = DEFAULT_PATCH_SIZE
    pooling_kernel_size: int = DEFAULT_POOLING_KERNEL_SIZE
    max_soft_tokens: int = 70
    do_resize: bool = True
    do_sample_frames: bool = True
    num_frames: int | None = 32
    fps: float | None = None
    boi_token: str = DEFAULT_BOI_TOKEN
    eoi_token: str = DEFAULT_EOI_TOKEN

    def frame_settings(self) -> Gemma4Settings:
        """The image arithmetic's settings for one frame (the same resize, the video's budget)."""
        return Gemma4Settings(self.patch_size, self.pooling_kernel_size, self.max_soft_tokens, self.do_resize)


def video_settings_from(
    config: dict[str, Any], image_settings: Any, processor_class: str | None
) -> Gemma4VideoSettings:
    """Gemma4VideoProcessor's settings; its __init__ refuses a max_soft_tokens outside the supported set."""
    processor = config.get("video_processor_type")
    if processor != VIDEO_PROCESSOR:
        raise CountError(f"its video processor {processor} is not one vlmlint reproduces ({VIDEO_PROCESSOR})")
    if processor_class != "Gemma4Processor":
        raise CountError(f"{processor_class} with a {processor} is not a pairing vlmlint reproduces")
    max_soft_tokens = config.get("max_soft_tokens", 70)
    if max_soft_tokens not in SUPPORTED_SOFT_TOKENS:
        raise CountError(f"`max_soft_tokens` must be one of {SUPPORTED_SOFT_TOKENS}, got {max_soft_tokens}.")
    fps, num_frames = config.get("fps"), config.get("num_frames")
    if fps is not None and (isinstance(fps, bool) or not isinstance(fps, (int, float)) or not fps > 0):
        raise CountError(f"video processor fps must be a positive number, got {fps!r}")
    return Gemma4VideoSettings(
        patch_size=positive_int(config.get("patch_size", DEFAULT_PATCH_SIZE), "patch_size"),
        pooling_kernel_size=positive_int(
            config.get("pooling_kernel_size", DEFAULT_POOLING_KERNEL_SIZE), "pooling_kernel_size"
        ),
        max_soft_tokens=max_soft_tokens,
        do_resize=bool(config.get("do_resize", True)),
        do_sample_frames=bool(config.get("do_sample_frames")),
        num_frames=None if num_frames is None else positive_int(num_frames, "num_frames"),
        fps=fps,
        boi_token=image_settings.boi_token,
        eoi_token=image_settings.eoi_token,
    )


def sampled_indices(meta: VideoMeta, settings: Gemma4VideoSettings) -> tuple[list[int], str]:
    """The frame indices BaseVideoProcessor.sample_frames keeps (default_sample_indices_fn), in words too."""
    total = meta.frames
    if not settings.do_sample_frames:
        return list(range(total)), "every frame (do_sample_frames is false)"
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
        num_frames = max(1, int(total / meta.fps * fps))
        mode = f"fps {fps:g}"
    else:
        return list(range(total)), "every frame (do_sample_frames without fps or num_frames)"
    if num_frames > total:
        raise CountError(
            f"When loading the video with num_frames={num_frames}, the requested number of frames "
            f"exceeds total_num_frames={total}. Please set num_frames or fps to a smaller value."
        )
    return [i * total // num_frames for i in range(num_frames)], mode  # np.arange(k) * total // k


def count_video(meta: VideoMeta, settings: Gemma4VideoSettings) -> VideoCount:
    """Every kept frame resized as an image within the video budget; its soft tokens are
    patches // pooling_kernel_size**2 (the same count for every frame). timestamps: each frame's seconds."""
    indices, mode = sampled_indices(meta, settings)
    if not indices:
        raise CountError("the video has no frames")
    if meta.height < 1 or meta.width < 1:
        raise CountError(f"frame size {meta.width}x{meta.height} is empty")
    frame = settings.frame_settings()
    height, width = frames_as_read(meta)  # (a frame list 1 or 3 px high is read channels-first)
    if settings.do_resize:
        height, width = aspect_ratio_preserving_size(height, width, frame)
    else:
        if height % settings.patch_size or width % settings.patch_size:
            # convert_video_to_patches reshapes the frames into whole patches: torch refuses the rest
            raise CountError(
                f"with do_resize off, frames of {width}x{height} are not whole {settings.patch_size}-px "
                "patches: the video processor cannot cut them into patches"
            )
    rows, cols = height // settings.patch_size, width // settings.patch_size
    per_frame = rows * cols // settings.pooling_kernel_size**2
    fps = meta.fps if meta.fps is not None else DEFAULT_VIDEO_FPS
    timestamps = tuple(index / fps for index in indices)
    return VideoCount(
        len(indices), height, width, (len(indices), rows, cols), per_frame * len(indices), mode, timestamps
    )


def _stamp(seconds: float) -> str:
    """replace_video_token's MM:SS (minutes keep counting past the hour)."""
    return f"{int(seconds // 60):02d}:{int(seconds % 60):02d}"


def expand_video(count: VideoCount, settings: Gemma4VideoSettings) -> Expansion:
    """`replace_video_token`: per frame "MM:SS " boi, its soft-token run, eoi; frames joined by a space."""
    per_frame = count.tokens // count.frames
    segments: list[str | Run] = []
    for position, seconds in enumerate(count.timestamps):
        segments += [
            f"{' ' if position else ''}{_stamp(seconds)} {settings.boi_token}",
            Run(VIDEO_TOKEN, per_frame),
            settings.eoi_token,
        ]
    return tuple(segments)


def video_knobs(settings: Gemma4VideoSettings, pipeline: Any) -> tuple[list[VideoKnob], list[str]]:
    """`vlmlint stats` under transformers' own video processor: num_frames or fps as the sampler reads them
    (BaseVideoProcessor.sample_frames: one or the other, only with do_sample_frames), and max_soft_tokens,
    each frame's budget, on the five values Gemma4VideoProcessor accepts."""
    knobs, notes = frame_knobs(settings, pipeline, VIDEO_PROCESSOR, "either")
    if not settings.do_resize:
        notes.append(f"max_soft_tokens: {VIDEO_PROCESSOR} does not resize (do_resize is false)")
    else:
        knobs.append(
            VideoKnob(
                "max_soft_tokens", f"transformers ({VIDEO_PROCESSOR})", settings.max_soft_tokens,
                SUPPORTED_SOFT_TOKENS, "soft tokens per frame: the only values the video processor accepts",
                settings_at(settings, pipeline, "max_soft_tokens"),
            )
        )  # fmt: skip
    return knobs, notes


FAMILY = Family.define(
    __name__, name="gemma4", title="Gemma 4", processor_classes=("Gemma4Processor",),
    image_processor_types=image_processor_types("Gemma4"), placeholder=DEFAULT_IMAGE_TOKEN,
    marker_tokens=(DEFAULT_IMAGE_TOKEN, DEFAULT_BOI_TOKEN, DEFAULT_EOI_TOKEN),
    video_placeholder=VIDEO_TOKEN,
)  # fmt: skip
