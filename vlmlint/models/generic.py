"""The fallback for a processor family vlmlint has no formula for: ask the real processor.

transformers 5.x processors expand images in one place, `ProcessorMixin._process_images`: the image
processor runs, then `replace_image_token(image_inputs, i)` gives the text the i-th placeholder
becomes. The generic family calls exactly that on the row's decoded images, so its counts are the
processor's own, at the price of decoding pixels (the --exact path, forced). It needs the processor
itself, loaded with AutoProcessor; processors that declare a video processor need torchvision for that.
"""

from __future__ import annotations

import re
from typing import Any

from vlmlint.models.base import CountError, Expansion, Family, ImageCount, Run


def _runs(text: str, token: str) -> Expansion:
    """The replacement text with each run of the image token as one Run (cheap to tokenize)."""
    segments: list[str | Run] = []
    position = 0
    for match in re.finditer(f"(?:{re.escape(token)})+", text):
        if match.start() > position:
            segments.append(text[position : match.start()])
        segments.append(Run(token, (match.end() - match.start()) // len(token)))
        position = match.end()
    if position < len(text):
        segments.append(text[position:])
    return tuple(segments)


def make_family(processor: Any) -> Family:
    """A Family bound to one loaded processor; `settings` is the processor itself."""
    token = getattr(processor, "image_token", None)
    if not token:
        raise CountError(f"{type(processor).__name__} has no image_token; vlmlint cannot place its images")

    def count_exact(image_processor: Any, images: list[Any], settings: Any) -> list[ImageCount]:
        merged = processor._merge_kwargs(tokenizer_init_kwargs=processor.tokenizer.init_kwargs)
        try:
            _, replacements = processor._process_images(images, **merged["images_kwargs"])
        except ValueError as exc:
            raise CountError(str(exc)) from None
        counts = []
        for image, replacement in zip(images, replacements, strict=True):
            tokens = replacement.count(token)
            counts.append(
                ImageCount(image.height, image.width, (), tokens, expansion=_runs(replacement, token))
            )
        return counts

    def expand(count: ImageCount, settings: Any) -> Expansion:
        assert count.expansion is not None  # set by count_exact, the only way this family counts
        return count.expansion

    def no_formula(*args: Any, **kwargs: Any) -> ImageCount:
        raise CountError("no header formula for this processor; counts come from the real processor")

    return Family(
        name="generic",
        title=f"{type(processor).__name__} (real processor, no formula)",
        processor_classes=(type(processor).__name__,),
        image_processor_types=(),
        placeholder=token,
        raw_image_prompt=token,
        settings_from=lambda image_processor, processor_config, model_config: processor,
        count=no_formula,
        count_exact=count_exact,
        expand=expand,
        header_formula=False,
    )
