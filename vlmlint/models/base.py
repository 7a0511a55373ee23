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
import inspect
from collections.abc import Callable, Sequence
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
class RowCount:
    """A whole row counted by the real processor (the fallback): its input_ids length and image tokens."""

    seq_len: int
    image_tokens: tuple[int | None, ...]  # per image; None where the processor's output cannot say
    image_spans: tuple[tuple[int, int], ...] | None  # each image's [first, last + 1) in input_ids


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
    # M-RoPE models: how many text positions one image's tokens take (Qwen: max(t, h/merge, w/merge)).
    # None: positions advance by one per token.
    position_span: Callable[[ImageCount, Any], int] | None = None
    # The real-processor fallback: count_row(rendered, decoded images, placeholder, settings)
    # counts a whole row with the processor's own __call__ (no formula, no expansion).
    count_row: Callable[..., RowCount] | None = None

    def bound(self, settings: Any) -> Family:
        """This family with the placeholder its settings read from the processor, where they name one."""
        placeholder = getattr(settings, "placeholder", None)
        if not isinstance(placeholder, str) or not placeholder or placeholder == self.placeholder:
            return self
        prompt = getattr(settings, "raw_image_prompt", placeholder)
        return dataclasses.replace(self, placeholder=placeholder, raw_image_prompt=prompt)
