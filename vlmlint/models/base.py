"""What every model family provides: a pure count from (height, width, settings) and its expansion.

A family module holds, for one processor family:
- the placeholder its processor expands (`placeholder`: the processor's `image_token` as the chat
  template writes it) and what stands for an image without a chat template (`raw_image_prompt`);
- `settings_from(image_processor, processor_config, model_config)`: the settings the count needs,
  read from the loaded image processor (its files, class defaults where they say nothing), the
  processor's own config (processor_config.json merged over the processor class's __init__
  defaults, plus "tokenizer_init_kwargs": the tokenizer's init kwargs, which the processor's call
  merges over its own defaults) and the model's config.json (e.g. vision_feature_select_strategy);
- `compose(rendered, expansions, settings)` (optional): the whole text the processor tokenizes; it
  raises CountError when the processor refuses the row as a whole;
- `count(height, width, settings, images_in_row=1)`: the pure, header-only formula;
- `count_exact(image_processor, images, settings)`: the real image processor on decoded pixels;
- `expand(count, settings)`: the text the processor puts in place of one placeholder, as segments:
  plain strings and `Run(token, n)` for n copies of one special token (written once when tokenizing,
  since a special token never merges with its neighbours, and counted n times).

A plain vision encoder (ViT, CLIP, SigLIP) has no image token in any text: its `placeholder` is "",
the row's text is tokenized alone (when the model has a tokenizer), and its settings carry
`vision_max_positions` / `vision_image_size`, which the engine hands to the rules.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


class CountError(ValueError):
    """The processor would refuse this image (e.g. an aspect ratio above its limit)."""


@dataclass(frozen=True)
class ImageCount:
    resized_height: int
    resized_width: int
    grid: tuple[int, ...]  # family-defined: Qwen (t, h, w) patches; tiles (rows, cols); crops; ...
    tokens: int  # image-placeholder token ids this image contributes to input_ids
    # The expansion itself, for families that learn it from the real processor (the generic fallback).
    expansion: tuple[str | Run, ...] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class VideoCount:
    """One video as the family's video processor gives it: the frames it samples, their resized size,
    the patch grid and the video-placeholder tokens in input_ids. `timestamps`: the seconds of each
    temporal group where the processor writes them as text (Qwen3-VL); `mode` says how frames were
    sampled (e.g. "every frame: do_sample_frames is false")."""

    frames: int  # frames the sampler keeps, before any temporal padding
    resized_height: int
    resized_width: int
    grid: tuple[int, ...]  # Qwen: (grid_t, grid_h, grid_w) patches
    tokens: int
    mode: str
    timestamps: tuple[float, ...] = ()
    # Why the sampler keeps fewer frames than its rate asks for (its max_frames), in words; None: it does not.
    capped: str | None = None
    # The kept frames' rate as the processor's VideoMetadata.sampled_fps gives it (frames kept / frames *
    # fps): Qwen2.5-VL's temporal positions step by it. None: not known (a trainer's own frame rate).
    sampled_fps: float | None = None


@dataclass(frozen=True)
class VideoPositions:
    """How one video's tokens take M-RoPE position ids (Family.video_position_span).

    `advance`: how far the position of the text after the video moves on past the video's tokens'
    start, as position_span's for an image (the video's own tokens cost nothing more). `beyond`: the
    video's largest position id minus the position of the first token after it; it can be positive
    (Qwen2-VL / Qwen2.5-VL step time by frame groups but move the text on by height and width only),
    and then the row's largest position id lies inside the video. None: not known.
    """

    advance: int
    beyond: int | None


def frames_as_read(meta: Any) -> tuple[int, int]:
    """(height, width) of a video's frames as transformers' video processors read them. A frame list
    reaches them as (frames, H, W, 3) arrays, and infer_channel_dimension_format takes a height of 1 or 3
    for the channels: each frame is then read as W px high and 3 px wide (a decoded clip is channels-first
    already, so only frame lists are affected)."""
    if meta.frames_from == "frame list" and meta.height in (1, 3):
        return meta.width, 3
    return meta.height, meta.width


def refuse_channels_first_frames(meta: Any, processor: str) -> None:
    """Where a family does not reproduce frames_as_read: a frame list 1 or 3 px high is not counted."""
    if meta.frames_from == "frame list" and meta.height in (1, 3):
        raise CountError(
            f"the frame list's frames are {meta.width}x{meta.height}: transformers reads frames 1 or 3 px "
            f"high as channels-first ({meta.width} px high, 3 px wide), which vlmlint does not reproduce for "
            f"{processor}; not counted"
        )


def stacked_videos(counts: list[VideoCount], processor: str) -> None:
    """The processor stacks a row's videos into one pixel_values_videos tensor (return_tensors="pt", as
    trainers call it): their kept frame counts and frame sizes must agree, or it raises ValueError
    ("Unable to convert output 'pixel_values_videos' ... stack expects each tensor to be equal size")."""
    shapes = [(count.frames, count.resized_height, count.resized_width) for count in counts]
    if len(set(shapes)) > 1:
        listed = ", ".join(f"{frames} frames of {w}x{h}" for frames, h, w in shapes)
        raise CountError(
            f"the row's videos keep different frames ({listed}): {processor} stacks them into one "
            "tensor and raises (stack expects each tensor to be equal size); give each video its own row "
            "or sample the same number of frames"
        )


@dataclass(frozen=True)
class RowCount:
    """A whole row counted by the real processor (the fallback): its input_ids length and image tokens."""

    seq_len: int
    image_tokens: tuple[int | None, ...]  # per image; None where the processor's output cannot say
    image_spans: tuple[tuple[int, int], ...] | None  # each image's [first, last + 1) in input_ids
    # per video (the fallback with a video processor); None where the processor's output cannot say
    video_tokens: tuple[int | None, ...] = ()


@dataclass(frozen=True)
class Run:
    """`count` copies of one special token."""

    token: str
    count: int


Segment = str | Run
Expansion = tuple[Segment, ...]


def compose_default(rendered: str, placeholder: str, expansions: Sequence[Expansion]) -> list[Segment]:
    """Replace the i-th placeholder of the rendered text with the i-th expansion, as the processor does."""
    pieces = rendered.split(placeholder)
    segments: list[Segment] = [pieces[0]]
    for expansion, piece in zip(expansions, pieces[1:], strict=True):
        segments.extend(expansion)
        segments.append(piece)
    return segments


def processor_defaults(processor_class: type, processor_config: dict[str, Any]) -> dict[str, Any]:
    """The processor's own settings: its __init__ defaults, overridden by processor_config.json."""
    values = {
        name: parameter.default
        for name, parameter in inspect.signature(processor_class.__init__).parameters.items()
        if parameter.default is not inspect.Parameter.empty
    }
    values.update({k: v for k, v in processor_config.items() if k != "image_processor"})
    return values


@dataclass(frozen=True)
class Knob:
    """One family's image-size setting, searched on its processor's grid of values (`vlmlint stats`)."""

    name: str  # as written in the processor's config, e.g. "max_pixels"
    current: int
    step: int  # candidate values are the multiples of step
    low: int  # the smallest candidate (a multiple of step)
    settings_at: Callable[[int], Any] = field(repr=False)
    # (height, width) -> (values at which this image's count may drop, the value from which it no
    # longer changes). Between drops the count never decreases as the value grows.
    shape: Callable[[int, int], tuple[tuple[int, ...], int]] = field(repr=False)
    # True: every value above the saturation gives the same counts (Qwen-VL), so "fits there" means
    # "fits at any larger value". False: the grid ends at the saturation (Idefics3's 4096 cap).
    open_ended: bool
    # True when only the image-token runs change with the knob (Qwen-VL): the text tokens stay.
    # False: the expansion holds text that changes too (Idefics3's row/col markers), so the row is
    # composed and tokenized again at each value tried.
    text_unchanged: bool
    grid: str  # the candidates, in words


FIXED_SIZE = (
    "image tokens per image are fixed by the processor's size, so there is no image-size knob; "
    "only the max length is recommended"
)
NO_KNOB_KNOWN = "no image-size knob known for this family; only the max length is recommended"


def no_knob(reason: str) -> Callable[[Any], str]:
    """A size_knob hook for a family without an image-size knob: the sentence that says why."""
    return functools.partial(_reason, reason)


def _reason(reason: str, settings: Any) -> str:
    return reason


def image_processor_types(prefix: str) -> tuple[str, ...]:
    """The slow, fast and PIL-backend image processor classes transformers names after one prefix."""
    return (f"{prefix}ImageProcessor", f"{prefix}ImageProcessorFast", f"{prefix}ImageProcessorPil")


# The Family fields a family module provides as functions of the same name (Family.define).
_MODULE_HOOKS = (
    "settings_from", "count", "count_exact", "expand", "compose", "position_span", "size_knob",
    "resized_copies", "shrink_hint", "video_settings_from", "count_video", "expand_video", "video_position_span",
    "video_wrapper", "check_videos", "row_videos", "loader_size", "video_knobs", "light_image_attributes",
)  # fmt: skip


@dataclass(frozen=True)
class Family:
    name: str
    title: str
    processor_classes: tuple[str, ...]
    image_processor_types: tuple[str, ...]
    placeholder: str  # "" = no image token in the text (plain vision encoders)
    raw_image_prompt: str
    settings_from: Callable[[Any, dict[str, Any], dict[str, Any]], Any]
    count: Callable[..., ImageCount]
    count_exact: Callable[[Any, list[Any], Any], list[ImageCount]]
    expand: Callable[[ImageCount, Any], Expansion]
    # The whole text the processor tokenizes, from the rendered prompt and each image's expansion.
    compose: Callable[[str, Sequence[Expansion], Any], list[Segment]] | None = None
    add_special_tokens: bool = True
    header_formula: bool = True  # False: no pure count; every scan decodes pixels (generic fallback)
    # The image processor has no PIL backend (transformers builds it only with torchvision): where torchvision
    # is missing, settings_from gets the raw image processor config dict (preprocessor_config.json, or the
    # one nested in processor_config.json) instead of the object, and count_exact cannot run.
    needs_torchvision: bool = False
    # M-RoPE models: how many text positions one image's tokens take (Qwen: max(t, h/merge, w/merge)).
    # None: positions advance by one per token.
    position_span: Callable[[ImageCount, Any], int] | None = None
    # The real-processor fallback: count_row(rendered, decoded images, placeholder, settings)
    # counts a whole row with the processor's own __call__ (no formula, no expansion).
    count_row: Callable[..., RowCount] | None = None
    # `vlmlint stats`: settings -> the family's image-size Knob, or a sentence saying why there is none.
    size_knob: Callable[[Any], Knob | str] | None = None
    # Image and marker tokens of this family that users paste by hand besides its placeholder (start and
    # end markers, soft tokens): plain text under another family's tokenizer, which the rules flag.
    marker_tokens: tuple[str, ...] = ()
    # Trainer templates per pipeline (e.g. {"llamafactory": ("llava",)}) that reproduce this family's
    # processor; the first is the default unless choose_trainer_template picks another.
    trainer_templates: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False, compare=False)
    # (pipeline, model) -> the default template's name among trainer_templates[pipeline], or None.
    choose_trainer_template: Callable[[str, Any], str | None] | None = None
    # The processor needs each image's closing text (the text after its last token run) kept whole:
    # it locates an image's replacement text by its first and last character (Idefics3).
    checks_image_span: bool = False
    # An image's grid -> how many full-size copies the model sees (Gemma 3's pan-and-scan crops); None: one.
    resized_copies: Callable[[tuple[int, ...]], int] | None = None
    # (height, width, area limit, settings) -> the fix hint for an image the processor shrinks by more
    # than the limit, naming the family's setting; None (or a None result): the generic hints.
    shrink_hint: Callable[[int, int, float, Any], str | None] | None = None
    # (height, width, ImageRef.sizing, settings) -> the size the family's own image loader hands the
    # processor for a row's per-image settings (Qwen-VL: qwen-vl-utils' fetch_image); None: not read.
    loader_size: Callable[[int, int, Any, Any], tuple[int, int]] | None = None
    # Special tokens the family documents as data a row writes (grounding boxes, OCR quads): not stray
    # control tokens (VLM304 leaves them alone).
    data_tokens: tuple[str, ...] = ()
    # Videos (issue 20). `video_placeholder`: the token the chat template writes for one video, which
    # the processor expands ("" = this family does not count videos: rows with one get VLM109).
    # video_settings_from(video processor config dict, image settings, processor class) -> video settings;
    # count_video(VideoMeta, video settings) -> VideoCount; expand_video(VideoCount, video settings)
    # -> every token the placeholder becomes; video_position_span(VideoCount, video settings) ->
    # VideoPositions: how the video's tokens take M-RoPE positions (position_span's, for videos).
    video_placeholder: str = ""
    raw_video_prompt: str = ""
    video_settings_from: Callable[[dict[str, Any], Any, str | None], Any] | None = None
    count_video: Callable[..., VideoCount] | None = None
    expand_video: Callable[[VideoCount, Any], Expansion] | None = None
    video_position_span: Callable[[VideoCount, Any], VideoPositions] | None = None
    # (video settings) -> the text around a video placeholder that the processor turns into the bare
    # placeholder before expanding it, where it does ("" = it does not): Qwen3VLProcessor from
    # transformers 5.25, whose expansion brings each frame group's own start/end pair. None: never.
    video_wrapper: Callable[[Any], str] | None = None
    # (a row's VideoCounts, video settings) -> them as one processor call gives them together, where a
    # video's text depends on the others (SmolVLM2's intro names the most frames of any); CountError:
    # the processor refuses them together. None: each video stands alone.
    row_videos: Callable[[list[VideoCount], Any], list[VideoCount]] | None = None
    # (the row's video counts, video settings) -> None, or CountError where the processor refuses the
    # videos together (InternVL stacks a row's videos: their frame counts and sizes must agree).
    check_videos: Callable[[list[VideoCount], Any], None] | None = None
    # `vlmlint stats` under transformers' own video processor: (video settings, pipeline) -> (its
    # sampling knobs as models/knobs.VideoKnob, a sentence for each that does not apply); None: not searched.
    video_knobs: Callable[[Any, Any], tuple[list[Any], list[str]]] | None = None
    # A built-in profile loaded without transformers (models/light.py): the preprocessor config dict ->
    # what the family's PIL image processor would hold (the attributes settings_from reads); None: such
    # profiles load through transformers.
    light_image_attributes: Callable[[Mapping[str, Any]], Any] | None = None

    @classmethod
    def define(cls, module: str, **fields: Any) -> Family:
        """The family of the module named `module`, its hooks found by name: a family module's
        settings_from, count, count_exact, expand (and, where it has them, compose, position_span,
        size_knob, resized_copies, shrink_hint) are its functions of those names. `raw_image_prompt`
        defaults to the placeholder."""
        namespace = vars(sys.modules[module])
        for hook in _MODULE_HOOKS:
            if hook not in fields and callable(namespace.get(hook)):
                fields[hook] = namespace[hook]
        fields.setdefault("raw_image_prompt", fields["placeholder"])
        fields.setdefault("raw_video_prompt", fields.get("video_placeholder", ""))
        return cls(**fields)

    def bound(self, settings: Any) -> Family:
        """This family with the placeholder its settings read from the processor, where they name one."""
        placeholder = getattr(settings, "placeholder", None)
        if not isinstance(placeholder, str) or not placeholder or placeholder == self.placeholder:
            return self
        prompt = getattr(settings, "raw_image_prompt", placeholder)
        return dataclasses.replace(self, placeholder=placeholder, raw_image_prompt=prompt)


# ---- settings a model folder may hold: checked where they are read, refused with the key and value ----

MAX_SETTING = 2**31 - 1  # whole-number settings (sizes, pixel counts, patch sizes) above this are absurd
# Settings that may be 0 (a token count that can be absent); every other whole number must be >= 1.
_ZERO_OK = frozenset({"num_additional_image_tokens", "cls_tokens", "pad_size"})


def positive_int(value: Any, key: str, minimum: int = 1) -> int:
    """`value` as a whole number from `minimum` to MAX_SETTING, else CountError naming the key."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= MAX_SETTING:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_SETTING:
        raise CountError(f"{key} must be a whole number from {minimum} to {MAX_SETTING:,}, got {value!r}")
    return value


def check_settings(settings: Any, where: str = "") -> None:
    """Every number of a family's settings within bounds (CountError naming the key); None is allowed."""
    if dataclasses.is_dataclass(settings) and not isinstance(settings, type):
        items = [(f.name, getattr(settings, f.name)) for f in dataclasses.fields(settings)]
    elif isinstance(settings, dict):
        items = list(settings.items())
    else:
        return
    for name, value in items:
        key = f"{where}.{name}" if where else str(name)
        if isinstance(value, bool) or value is None or isinstance(value, str):
            continue
        if isinstance(value, int):
            positive_int(value, key, 0 if name in _ZERO_OK else 1)
        elif isinstance(value, float):
            if not math.isfinite(value) or value <= 0:
                raise CountError(f"{key} must be a finite number above 0, got {value!r}")
        elif isinstance(value, (tuple, list)):
            for i, item in enumerate(value[:10_000]):
                if isinstance(item, (tuple, list)):
                    for part in item:
                        positive_int(part, f"{key}[{i}]")
                elif isinstance(item, (int, float)) and not isinstance(item, bool):
                    positive_int(item, f"{key}[{i}]")
        elif isinstance(value, dict) or dataclasses.is_dataclass(value):
            check_settings(value, key)


# The image processor settings families read from preprocessor_config.json, checked before transformers
# sees them: transformers takes them as they are (int("x"), a 0 patch size, a list where a name goes).
_WHOLE_KEYS = frozenset(
    {
        "patch_size", "merge_size", "temporal_patch_size", "spatial_merge_size", "min_pixels", "max_pixels",
        "image_seq_length", "image_seq_len", "max_patches", "min_patches", "max_image_tiles",
        "num_image_tokens", "tile_size", "pan_and_scan_min_crop_size", "pan_and_scan_max_num_crops",
        "size", "crop_size", "max_image_size",
    }
)  # fmt: skip
_EDGE_KEYS = frozenset({"height", "width", "shortest_edge", "longest_edge", "max_height", "max_width"})
_NAME_KEYS = ("image_processor_type", "feature_extractor_type", "processor_class")
MAX_PINPOINTS = 1024  # LLaVA-NeXT's grid pinpoints: real ones list 5 to 36


def check_image_config(config: dict[str, Any]) -> None:
    """CountError naming the first preprocessor_config.json key whose value no processor could use."""
    for key in _NAME_KEYS:
        if config.get(key) is not None and not isinstance(config[key], str):
            raise CountError(f"{key} must be a class name (a string), got {config[key]!r}")
    for key, value in config.items():
        if value is None:
            continue  # unset: the class default
        if key in _WHOLE_KEYS:
            _check_whole(key, value)
        elif key in ("image_mean", "image_std"):
            numbers = value if isinstance(value, list) else [value]
            if len(numbers) not in (1, 3) or not all(_finite(n) for n in numbers):
                raise CountError(f"{key} must be 1 or 3 finite numbers, got {value!r}")
        elif key == "resample":
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 5:
                raise CountError(f"resample must be a PIL filter number from 0 to 5, got {value!r}")
        elif key in ("rescale_factor", "pan_and_scan_min_ratio_to_activate"):
            if not _finite(value) or value <= 0:
                raise CountError(f"{key} must be a finite number above 0, got {value!r}")
        elif key == "image_grid_pinpoints":
            _check_pinpoints(value)
        elif key.startswith("do_") and not isinstance(value, bool):
            raise CountError(f"{key} must be true or false, got {value!r}")


def _check_whole(key: str, value: Any) -> None:
    """A whole-number setting, or a dict of edges (size: {height, width, ...}) of whole numbers."""
    if isinstance(value, dict):
        for edge, number in value.items():
            if edge in _EDGE_KEYS and number is not None:
                positive_int(number, f"{key}.{edge}")
    else:
        positive_int(value, key)


def _check_pinpoints(value: Any) -> None:
    """LLaVA-NeXT's image_grid_pinpoints: 1 to MAX_PINPOINTS [height, width] pairs of whole numbers."""
    if not isinstance(value, list) or not value or len(value) > MAX_PINPOINTS:
        raise CountError(f"image_grid_pinpoints must be a list of 1 to {MAX_PINPOINTS} [height, width] pairs")
    for i, pair in enumerate(value):
        if not isinstance(pair, list) or len(pair) != 2:
            raise CountError(f"image_grid_pinpoints[{i}] must be a [height, width] pair, got {pair!r}")
        for number in pair:
            positive_int(number, f"image_grid_pinpoints[{i}]")


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
