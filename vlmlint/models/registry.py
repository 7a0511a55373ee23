"""The one explicit registry: processor_class / image_processor_type -> model family."""

from __future__ import annotations

from vlmlint.models import (
    gemma3,
    idefics3,
    internvl,
    llava,
    llava_next,
    llava_onevision,
    mllama,
    paligemma,
    pixtral,
    qwen_vl,
    vision_encoder,
)
from vlmlint.models.base import Family

# Order matters only for image_processor_type lookups shared by several families: first wins.
FAMILIES: tuple[Family, ...] = tuple(
    module.FAMILY
    for module in (
        qwen_vl,
        llava,
        llava_next,
        llava_onevision,
        idefics3,
        paligemma,
        gemma3,
        internvl,
        pixtral,
        mllama,
        vision_encoder,
    )
    if module.FAMILY is not None  # a family module still being written
)


def find_family(processor_class: str | None, image_processor_type: str | None) -> Family | None:
    """The family named by the processor class first, else by the image processor type."""
    for family in FAMILIES:
        if processor_class and processor_class in family.processor_classes:
            return family
    for family in FAMILIES:
        if image_processor_type and image_processor_type in family.image_processor_types:
            return family
    return None
