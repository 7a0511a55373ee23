"""The video sampling knobs `vlmlint stats` searches (issue 20, part 4): the record a family (for
transformers' own video processor: Family.video_knobs) or a trainer's pipeline (Pipeline.video_knobs)
describes each of its settings with, and the grids of values they are tried on."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

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

FPS_WORDS = f"{len(FPS_GRID)} rates from {FPS_GRID[0]} to {FPS_GRID[-1]} fps"
FRAMES_WORDS = f"{FRAMES_GRID[0]} to {FRAMES_GRID[-1]} frames, about x1.5 apart"


@dataclass(frozen=True)
class VideoKnob:
    """One video sampling setting as the scan's sampling mode names it, and how to count at another value.

    `at(value)`: (the pipeline, the video settings) that sample with this knob at `value` and every
    other setting as the scan has it; PipelineError / CountError where the sampler refuses the value.
    """

    name: str
    mode: str
    current: float | int
    values: tuple[float | int, ...]  # ascending, the current value among them
    grid: str
    at: Callable[[float | int], tuple[Any, Any]] = field(repr=False)


# (option key) -> (value -> (a fresh pipeline with the option at value, the video settings)): what stats
# hands a trainer's Pipeline.video_knobs to build its knobs' `at`.
OptionSetter = Callable[[str], Callable[[float | int], tuple[Any, Any]]]


def grid_of(
    base: Iterable[float | int], current: float | int, low: float | int = 0
) -> tuple[float | int, ...]:
    """The base grid's values from `low` on, with the current value among them, ascending."""
    return tuple(sorted({v for v in base if v >= low} | {current}))


def patches_words(factor: int) -> str:
    return (
        f"{PATCHES_GRID[0]} to {PATCHES_GRID[-1]:,} merged patches of {factor}x{factor} "
        f"(multiples of {factor * factor}), about x1.5 apart"
    )
