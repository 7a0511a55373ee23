"""The video sampling knobs `vlmlint stats` searches (issue 20, part 4): the record a family (for
transformers' own video processor: Family.video_knobs) or a trainer's pipeline (Pipeline.video_knobs)
describes each of its settings with, and the grids of values they are tried on."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

# The grids the video knobs are searched on: values each sampler accepts (any positive fps, whole frame
# counts, whole pixel areas), spaced about x1.5 so that a search stays a few dozen exact recounts per row.
FPS_GRID: tuple[float, ...] = (
    0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 15.0, 20.0, 24.0, 25.0, 30.0, 48.0,
    50.0, 60.0,
)  # fmt: skip
FRAMES_GRID: tuple[int, ...] = (2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
# pixel areas in merged patches (factor^2 pixels each): a frame of n patches
PATCHES_GRID: tuple[int, ...] = (
    4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144,
    8192, 12288, 16384,
)  # fmt: skip

# clip lengths in seconds (GLM-4.1V's max_duration), about x1.5 apart
DURATION_GRID: tuple[float, ...] = (
    0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 8.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 240.0, 300.0, 450.0,
    600.0, 900.0, 1200.0, 1800.0, 2400.0, 3600.0,
)  # fmt: skip

FPS_WORDS = f"{len(FPS_GRID)} rates from {FPS_GRID[0]} to {FPS_GRID[-1]} fps"
FRAMES_WORDS = f"{FRAMES_GRID[0]} to {FRAMES_GRID[-1]} frames, about x1.5 apart"
DURATION_WORDS = f"{DURATION_GRID[0]:g} to {DURATION_GRID[-1]:g} seconds, about x1.5 apart"


@dataclass(frozen=True)
class VideoKnob:
    """One video sampling setting as the scan's sampling mode names it, and how to count at another value.

    `at(value)`: (the pipeline, the video settings) that sample with this knob at `value` and every
    other setting as the scan has it; PipelineError / CountError where the sampler refuses the value.
    """

    name: str
    mode: str
    # None: the key is not in effect now (the sampler keeps every frame); the scan's own lengths are then
    # the current ones, and no grid value reproduces them
    current: float | int | None
    values: tuple[float | int, ...]  # ascending, the current value among them
    grid: str
    at: Callable[[float | int], tuple[Any, Any]] = field(repr=False)
    # the other keys (as the file names them) and values that applying the knob writes with it
    # (do_sample_frames: true where the sampler keeps every frame now)
    also: tuple[tuple[str, Any], ...] = ()


# (option key) -> (value -> (a fresh pipeline with the option at value, the video settings)): what stats
# hands a trainer's Pipeline.video_knobs to build its knobs' `at`.
OptionSetter = Callable[[str], Callable[[float | int], tuple[Any, Any]]]


def grid_of(
    base: Iterable[float | int], current: float | int | None, low: float | int = 0
) -> tuple[float | int, ...]:
    """The base grid's values from `low` on, with the current value (if any) among them, ascending."""
    return tuple(sorted({v for v in base if v >= low} | ({current} if current is not None else set())))


def patches_words(factor: int) -> str:
    return (
        f"{PATCHES_GRID[0]} to {PATCHES_GRID[-1]:,} merged patches of {factor}x{factor} "
        f"(multiples of {factor * factor}), about x1.5 apart"
    )


def settings_at(
    settings: Any, pipeline: Any, field_name: str, **fixed: Any
) -> Callable[[float | int], tuple[Any, Any]]:
    """A knob's `at` for transformers' own video processor: the pipeline as it is, the video settings
    record with `field_name` at the value (and the `fixed` fields, e.g. do_sample_frames=True)."""
    return lambda value: (pipeline, dataclasses.replace(settings, **fixed, **{field_name: value}))


# How a video processor's sample_frames reads do_sample_frames, fps and its frame count:
# "either": BaseVideoProcessor.sample_frames (num_frames or fps; both set is refused);
# "frames first": InternVLVideoProcessor (num_frames wins over fps);
# "both": SmolVLMVideoProcessor (fps frames a second, at most the frame count; both needed).
FrameRule = Literal["either", "frames first", "both"]


def frame_knobs(
    settings: Any, pipeline: Any, processor: str, rule: FrameRule, *, fps_key: str = "fps",
    frames_key: str = "num_frames",
) -> tuple[list[VideoKnob], list[str]]:  # fmt: skip
    """The fps / frame-count knobs of a video processor whose settings record has do_sample_frames, fps and
    num_frames (the file's keys: fps_key, frames_key), and a sentence for each that does not apply.

    Where every frame is kept (do_sample_frames false, or neither fps nor a frame count set), the frame
    count is the knob a user cuts frames with: written with do_sample_frames: true (and fps: null where
    the sampler refuses both), its current value None.
    """
    mode = f"transformers ({processor})"
    fps, frames = settings.fps, settings.num_frames

    def frames_knob(
        current: int | None, also: tuple[tuple[str, Any], ...] = (), words: str = ""
    ) -> VideoKnob:
        fields = {"fps" if key == fps_key else key: value for key, value in also}  # file key -> field
        name = frames_key + (" with " + _keys(also) if also else "")
        return VideoKnob(
            name, mode, current, grid_of(FRAMES_GRID, current, 1), f"{FRAMES_WORDS}{words}",
            settings_at(settings, pipeline, "num_frames", **fields), also,
        )  # fmt: skip

    def fps_knob() -> VideoKnob:
        return VideoKnob(
            fps_key, mode, fps, grid_of(FPS_GRID, fps), FPS_WORDS, settings_at(settings, pipeline, "fps")
        )

    if not settings.do_sample_frames:
        every = f"{processor} keeps every frame (do_sample_frames is false)"
        if rule == "both" and fps is None:
            return [], [f"{fps_key}, {frames_key}: {every}, and has no {fps_key} to sample with"]
        also: tuple[tuple[str, Any], ...] = (("do_sample_frames", True),)
        if rule == "either" and fps is not None:
            also += ((fps_key, None),)  # num_frames and fps are mutually exclusive
        note = f"{fps_key}: {every}; it applies only with do_sample_frames: true"
        if rule == "both":
            note += f" (then {fps_key} {fps:g}, at most {frames_key} frames a clip)"
        words = f"; now every frame is kept, and each value is written with {_keys(also)}"
        return [frames_knob(None, also, words)], [note]
    if rule == "both":
        if fps is None or frames is None:  # the sampler refuses every clip: no row to search
            return [], [f"{fps_key}, {frames_key}: {processor} needs both to sample"]
        return [fps_knob(), frames_knob(frames)], []
    if frames is not None:
        why = "num_frames and fps are mutually exclusive" if rule == "either" else "num_frames wins over fps"
        return [frames_knob(frames)], [
            f"{fps_key}: {processor} samples {frames_key}={frames} frames a clip ({why}); "
            f"{fps_key} applies with {frames_key}: null"
        ]
    if fps is not None:
        why = (
            "num_frames and fps are mutually exclusive"
            if rule == "either"
            else "set, it replaces the fps sampling"
        )
        return [fps_knob()], [f"{frames_key}: {processor} samples by {fps_key} {fps:g} ({why})"]
    words = f"; now every frame is kept ({frames_key} and {fps_key} unset)"
    every = f", {processor} keeps every frame" if rule == "either" else ""
    return [frames_knob(None, words=words)], [f"{fps_key}: unset{every}"]


def _keys(pairs: Iterable[tuple[str, Any]]) -> str:
    """Keys and values as a user writes them in the JSON file: do_sample_frames: true, fps: null."""
    return ", ".join(f"{key}: {json.dumps(value)}" for key, value in pairs)
