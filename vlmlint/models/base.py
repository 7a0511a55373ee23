"""What every model family provides: a pure count from (height, width, settings) and its expansion."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class CountError(ValueError):
    """The processor would refuse this image (e.g. an aspect ratio above its limit)."""


@dataclass(frozen=True)
class ImageCount:
    resized_height: int
    resized_width: int
    grid: tuple[int, ...]
    tokens: int  # image-placeholder token ids this image contributes to input_ids


@dataclass(frozen=True)
class Family:
    """One model family: how its processor turns an image into placeholder tokens.

    `placeholder` is the token the chat template writes once per image and the processor expands;
    `raw_image_prompt` stands for one image when no chat template is used. `settings_from` reads the
    family's settings from a loaded image processor (its files, class defaults where they say
    nothing); `count` is the pure header-only formula; `count_exact` runs the real image processor on
    decoded pixels. `extra_tokens` is how many more ids an image's expansion holds than the single
    placeholder the template wrote.
    """

    name: str
    title: str
    processor_classes: tuple[str, ...]
    image_processor_types: tuple[str, ...]
    placeholder: str
    raw_image_prompt: str
    settings_from: Callable[[Any], Any]
    count: Callable[[int, int, Any], ImageCount]
    count_exact: Callable[[Any, Any, Any], ImageCount]
    extra_tokens: Callable[[ImageCount], int] = lambda count: count.tokens - 1
