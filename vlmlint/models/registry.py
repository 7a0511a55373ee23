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


def family_for_class(processor_class: str | None) -> Family | None:
    """The family whose module lists this processor class, or None."""
    for family in FAMILIES:
        if processor_class and processor_class in family.processor_classes:
            return family
    return None


def find_family(processor_class: str | None, image_processor_type: str | None) -> Family | None:
    """The family that claims a processor: by its processor class only.

    The image processor type decides only when the folder names no processor class at all (a bare
    vision encoder such as google/vit-*): many processors reuse another family's image processor
    (Granite 4 Vision: LLaVA-NeXT's) and expand it their own way, so sharing one proves nothing.
    """
    if processor_class:
        return family_for_class(processor_class)
    for family in FAMILIES:
        if image_processor_type and image_processor_type in family.image_processor_types:
            return family
    return None
