"""Idefics2: a fixed image_seq_len <image> tokens per view between fake tokens, 5 views with image splitting.

Processor (transformers 5.24 `Idefics2Processor.__call__`): every image token of the text (the tokenizer's
`image_token` where it has one, else "<image>") becomes

    image_str = <fake_token_around_image> + <image> x image_seq_len + <fake_token_around_image>

repeated 5 times where the image processor's `do_image_splitting` attribute is on (4 crops + the whole
image); then, over the whole text, every "<fake><fake>" becomes one "<fake>" (so the views of one image,
and images written next to each other, share their fake tokens: 5 views give 6 fake tokens), and a
closing fake token followed directly by a character that is neither whitespace nor "<" gets a space
after it. image_seq_len comes from processor_config.json (64 by default, the perceiver's latents), never
from the image size: the count does not depend on the image at all.

Image processor (`Idefics2ImageProcessorPil._preprocess`): with do_image_splitting the image is cut into
4 crops at (height // 2, width // 2) plus itself, then each view is resized by
`get_resize_output_image_size` (the long side capped at size.longest_edge, int of the aspect ratio for
the other, both at least size.shortest_edge). A 1-px-tall image has 0-px-tall crops, whose aspect ratio
divides by zero (a 1-px-wide one passes: its ratio is 0).

Settings (`ProcessorMixin._merge_kwargs`): the text's splitting is the image processor's attribute
(`self.image_processor.do_image_splitting`); the image processor's call takes the tokenizer's init
kwargs over its attributes (do_image_splitting, size, do_resize), so the two can differ.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vlmlint.models.base import (
    CountError,
    Expansion,
    Family,
    ImageCount,
    Run,
    Segment,
    image_processor_types,
    no_knob,
    positive_int,
)
from vlmlint.models.gemma4 import tokenizer_token

PLACEHOLDER = "<image>"
FAKE_IMAGE_TOKEN = "<fake_token_around_image>"
DEFAULT_IMAGE_SEQ_LEN = 64  # Idefics2Processor.__init__
VIEWS = 5  # 4 crops + the whole image


@dataclass(frozen=True)
class Idefics2Settings:
    image_seq_len: int = DEFAULT_IMAGE_SEQ_LEN
    do_image_splitting: bool = False  # the text's: the image processor's attribute
    split_images: bool = False  # the image processor call's (tokenizer init kwargs over the attribute)
    do_resize: bool = True
    shortest_edge: int | None = 378
    longest_edge: int | None = 980
    size_height: int | None = None  # size {"height", "width"} instead: a fixed resize
    size_width: int | None = None
    image_token: str = PLACEHOLDER
    fake_image_token: str = FAKE_IMAGE_TOKEN

    @property
    def placeholder(self) -> str:
        return self.image_token

    @property
    def views(self) -> int:
        return VIEWS if self.do_image_splitting else 1


def _edge(size: Any, key: str) -> int | None:
    value = size.get(key) if isinstance(size, dict) else getattr(size, key, None)
    return None if value is None else positive_int(value, f"size.{key}")


def settings_from(
    image_processor: Any, processor_config: dict[str, Any], model_config: dict[str, Any]
) -> Idefics2Settings:
    del model_config
    tokenizer_kwargs = processor_config.get("tokenizer_init_kwargs") or {}

    def pipeline(key: str, default: Any) -> Any:
        if key in tokenizer_kwargs:  # _merge_kwargs step 5: tokenizer init kwargs
            return tokenizer_kwargs[key]
        value = getattr(image_processor, key, None)
        return default if value is None else value

    image_token = processor_config.get("tokenizer_image_token")
    if image_token:  # the tokenizer names its image token: the processor takes its boundary token too
        fake = tokenizer_token(tokenizer_kwargs, "image_boundary_token", None)
        if fake is None:
            raise CountError(
                "the tokenizer has an image_token but no image_boundary_token, so Idefics2Processor cannot be built"
            )
    else:
        image_token, fake = PLACEHOLDER, FAKE_IMAGE_TOKEN
    size = pipeline("size", None)
    shortest, longest = _edge(size, "shortest_edge"), _edge(size, "longest_edge")
    height, width = _edge(size, "height"), _edge(size, "width")
    do_resize = bool(pipeline("do_resize", True))
    if do_resize and not (shortest and longest) and not (height and width):
        raise CountError(
            "Size must contain 'height' and 'width' keys or 'shortest_edge' and 'longest_edge' keys."
        )
    return Idefics2Settings(
        image_seq_len=positive_int(
            processor_config.get("image_seq_len", DEFAULT_IMAGE_SEQ_LEN), "image_seq_len"
        ),
        do_image_splitting=bool(getattr(image_processor, "do_image_splitting", False)),
        split_images=bool(pipeline("do_image_splitting", False)),
        do_resize=do_resize,
        shortest_edge=shortest,
        longest_edge=longest,
        size_height=height,
        size_width=width,
        image_token=str(image_token),
        fake_image_token=str(fake),
    )


def resize_output_size(height: int, width: int, settings: Idefics2Settings) -> tuple[int, int]:
    """`Idefics2ImageProcessorPil.resize`'s target for one view."""
    if not (settings.shortest_edge and settings.longest_edge):
        return int(settings.size_height or 0), int(settings.size_width or 0)
    min_len, max_len = settings.shortest_edge, settings.longest_edge
    aspect_ratio = width / height
    if width >= height and width > max_len:
        width = max_len
        height = int(width / aspect_ratio)
    elif height > width and height > max_len:
        height = max_len
        width = int(height * aspect_ratio)
    return max(height, min_len), max(width, min_len)


def count(height: int, width: int, settings: Idefics2Settings, images_in_row: int = 1) -> ImageCount:
    """<image> tokens of one image: image_seq_len per view, whatever its size.

    grid: (2, 2) where the text has the 4 crops, else (0, 0). The resized size is the whole image's view.
    """
    del images_in_row
    if height < 1 or width < 1:
        raise CountError(f"image of {width}x{height} pixels")
    if settings.split_images and settings.do_resize and settings.longest_edge and height < 2:
        # its crops are 0 px tall: get_resize_output_image_size divides by their height
        raise CountError(
            f"a {width}x{height} image splits into 0-px-tall crops (height // 2), which the image processor "
            "cannot resize (division by zero)"
        )
    resized = resize_output_size(height, width, settings) if settings.do_resize else (height, width)
    grid = (2, 2) if settings.do_image_splitting else (0, 0)
    return ImageCount(resized[0], resized[1], grid, settings.image_seq_len * settings.views)


def count_exact(image_processor: Any, images: list[Any], settings: Idefics2Settings) -> list[ImageCount]:
    """Run the real image processor on each image (its refusals are the count's); tokens are fixed."""
    counts = []
    kwargs: dict[str, Any] = {"do_image_splitting": settings.split_images, "do_resize": settings.do_resize}
    for one in images:
        try:
            output = image_processor(images=[[one]], do_pad=True, **kwargs)
        except (ValueError, ZeroDivisionError) as exc:
            raise CountError(str(exc)) from None
        mask = output["pixel_attention_mask"][0][-1]  # the whole image's view
        height = int(mask.any(axis=1).sum())
        width = int(mask.any(axis=0).sum())
        grid = (2, 2) if settings.do_image_splitting else (0, 0)
        counts.append(ImageCount(height, width, grid, settings.image_seq_len * settings.views))
    return counts


def expand(count: ImageCount, settings: Idefics2Settings) -> Expansion:
    """One image's text: the views' <image> runs, each pair sharing the fake token between them."""
    fake = settings.fake_image_token
    segments: list[Segment] = [fake]
    for _ in range(settings.views):
        segments += [Run(settings.image_token, settings.image_seq_len), fake]
    return tuple(segments)


def compose(rendered: str, expansions: Sequence[Expansion], settings: Idefics2Settings) -> list[Segment]:
    """`__call__`'s string edits on the whole text: each image token becomes its views, "<fake><fake>"
    becomes "<fake>" and a closing fake token gets a space before an attached word. The runs are kept
    as one image token each while editing (the edits never look inside a run)."""
    token, fake = settings.image_token, settings.fake_image_token
    if rendered.count(token) != len(expansions):
        raise CountError(
            f"The total number of {token} tokens in the prompts should be the same as the number of images "
            f"passed. Found {rendered.count(token)} {token} tokens and {len(expansions)} images."
        )
    one = f"{fake}{token}{fake}" * settings.views
    text = rendered.replace(token, one)
    text = text.replace(f"{fake}{fake}", fake)
    text = re.sub(rf"{re.escape(fake)}(?=[^\s<])", f"{fake} ", text)
    pieces = text.split(token)
    segments: list[Segment] = [pieces[0]]
    for piece in pieces[1:]:
        segments += [Run(token, settings.image_seq_len), piece]
    return [segment for segment in segments if segment != ""]


size_knob = no_knob(
    "every image is image_seq_len <image> tokens per view (5 views with do_image_splitting): no image-size "
    "setting changes the count; only the max length is recommended"
)

FAMILY = Family.define(
    __name__, name="idefics2", title="Idefics2", processor_classes=("Idefics2Processor",),
    image_processor_types=image_processor_types("Idefics2"), placeholder=PLACEHOLDER,
    marker_tokens=(FAKE_IMAGE_TOKEN,), checks_image_span=False,
)  # fmt: skip
