"""What differs between the transformers 5.x releases vlmlint supports, in one place.

The image processors moved from slow/fast classes (5.0, 5.2: `Qwen2VLImageProcessor` is numpy + PIL,
`...Fast` torchvision) to backends (by 5.8.0: the base name is the torchvision backend, `...Pil` the PIL
one; image_processing_backends.py). In the first backend releases (5.8.0 and 5.16.1 measured) the
top-level `transformers.AutoImageProcessor` is a dummy object without torch and torchvision
(`@requires(backends=("vision",))` resolved to torch+torchvision in its lazy module), and some PIL
classes are dummies too where the import-structure scan wrongly marks their file as needing torch
(Idefics3ImageProcessorPil in 5.8.0: its file imports neither). The classes themselves run without
torch: `image_processor_class` and `load_image_processor` reach them through their modules, as
transformers' own `AutoImageProcessor.from_pretrained` (models/auto/image_processing_auto.py) does
from 5.18 on. Nothing here imports torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any


def is_dummy(obj: Any) -> bool:
    """A transformers placeholder for a class whose backends are missing (utils/import_utils.py DummyObject)."""
    return bool(getattr(obj, "is_dummy", False))


def auto_image_processor() -> Any:
    """transformers' AutoImageProcessor: the top-level one, or its module's class where the top-level
    name is a dummy without torch (5.8.0 to 5.16.1): the same class, its from_pretrained needs no torch."""
    import transformers

    auto = transformers.AutoImageProcessor
    if is_dummy(auto):
        auto = importlib.import_module("transformers.models.auto.image_processing_auto").AutoImageProcessor
    return auto


def image_processor_class(type_name: str | None) -> type | None:
    """The PIL-backend class of an image_processor_type (`X` or `XFast` -> `XPil`), imported from its own
    file, or None where this transformers has none (5.0, 5.2: the slow class is the base name) or the
    file really needs torch."""
    if not type_name:
        return None
    base = type_name[:-4] if type_name.endswith("Fast") else type_name
    pil_name = base if base.endswith("Pil") else f"{base}Pil"
    auto = importlib.import_module("transformers.models.auto.image_processing_auto")
    mapping: Mapping[str, Any] = getattr(auto, "IMAGE_PROCESSOR_MAPPING_NAMES", {})
    to_module = importlib.import_module(
        "transformers.models.auto.configuration_auto"
    ).model_type_to_module_name
    for model_type, names in mapping.items():
        if not isinstance(names, Mapping) or pil_name not in names.values():
            continue
        try:
            package = importlib.import_module(f"transformers.models.{to_module(model_type)}")
            submodule = getattr(package, "_class_to_module", {}).get(pil_name)
            if submodule is None:
                continue
            cls = getattr(importlib.import_module(f"{package.__name__}.{submodule}"), pil_name, None)
        except ImportError:  # the file does need a missing backend
            continue
        if isinstance(cls, type) and not is_dummy(cls):
            return cls
    return None


def load_image_processor(name: str, image_config: Mapping[str, Any], trust_remote_code: bool) -> Any:
    """AutoImageProcessor.from_pretrained(name) without torch on every supported release: where the auto
    class cannot give a usable class (its module hands back a dummy PIL class, 5.8.0 to 5.16.1), the
    file's image_processor_type's PIL class is loaded from its own module, as 5.18+ does."""
    try:
        return auto_image_processor().from_pretrained(name, trust_remote_code=trust_remote_code)
    except (ValueError, ImportError):
        type_name = image_config.get("image_processor_type") or image_config.get("feature_extractor_type")
        cls = image_processor_class(str(type_name).replace("FeatureExtractor", "ImageProcessor"))
        if cls is None:
            raise
        return cls.from_pretrained(name)
