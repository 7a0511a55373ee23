"""The one explicit registry: processor_class / image_processor_type -> model family."""

from __future__ import annotations

from vlmlint.models import qwen_vl
from vlmlint.models.base import Family

FAMILIES: tuple[Family, ...] = (qwen_vl.FAMILY,)


def find_family(processor_class: str | None, image_processor_type: str | None) -> Family | None:
    """The family named by the processor class first, else by the image processor type."""
    for family in FAMILIES:
        if processor_class and processor_class in family.processor_classes:
            return family
    for family in FAMILIES:
        if image_processor_type and image_processor_type in family.image_processor_types:
            return family
    return None
