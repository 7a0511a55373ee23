"""What differs between the transformers 5.x releases vlmlint supports, in one place.

The image processors moved from slow/fast classes (5.0, 5.2: `Qwen2VLImageProcessor` is numpy + PIL,
`...Fast` torchvision) to backends in 5.4.0 (the base name is the torchvision backend, `...Pil` the PIL
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
import os
from collections.abc import Mapping
from typing import Any

# The first release holding each processor class a family claims that 5.0.0 lacks: read from the
# models/*/processing_*.py files of every 5.x minor release's wheel (5.0.0 to 5.24.0; there is no 5.10.0).
PROCESSOR_SINCE: dict[str, str] = {
    "Ernie4_5_VLMoeProcessor": "5.3.0",
    "Gemma4Processor": "5.5.0",
    "MiniCPMV4_6Processor": "5.7.0",
    "Granite4VisionProcessor": "5.8.0",
    "DeepseekOcr2Processor": "5.10.1",
    "HunYuanVLProcessor": "5.13.0",
    "Kimi_K25Processor": "5.13.0",
    "MiniCPMV4_7Processor": "5.18.0",
    "Molmo2Processor": "5.20.0",
}


# The oldest release vlmlint runs on without torch (pyproject.toml's range says the same): 5.4.0's PIL
# classes import their torchvision twin's module, which imports torch (image_processing_pil_qwen2_vl.py:
# `from .image_processing_qwen2_vl import smart_resize`); 5.0-5.3's slow classes keep sizes as plain dicts,
# which not every family reads. 5.5.0 is measured (the demo, the four profiles of issue 22).
MIN_TRANSFORMERS = "5.5.0"


# The first release vlmlint's formulas are NOT proven on (pyproject.toml's range ends below it): a count
# there is unproven until tests/families, the dataset fixtures and the torchvision-only families'
# reference records (fixtures/reference/, make test-reference) have run on it, so it is refused at load.
# 5.25.0 is proven (docs/notes/transformers-5.25.md: Qwen3-VL's and SmolVLM2's video text follow it).
# VLMLINT_ALLOW_UNTESTED_TRANSFORMERS=1 lets a newer one load anyway (for porting work), with a notice
# on every scan.
FIRST_UNPROVEN = "5.26.0"
ALLOW_UNTESTED = "VLMLINT_ALLOW_UNTESTED_TRANSFORMERS"
SUPPORTED_RANGE = f">={MIN_TRANSFORMERS},<{FIRST_UNPROVEN}"


def unsupported() -> str | None:
    """Why the installed transformers cannot serve, naming the release to install; None when it can
    (outside the proven range but allowed by ALLOW_UNTESTED: `untested()` says so)."""
    from packaging.version import Version

    installed = transformers_version()
    if Version(installed) < Version(MIN_TRANSFORMERS):
        return (
            f"the installed transformers {installed} is older than vlmlint supports ({MIN_TRANSFORMERS} or "
            f"later: the image processors of {installed} need torch or are read differently); "
            f"pip install 'transformers{SUPPORTED_RANGE}'"
        )
    if untested() is not None and os.environ.get(ALLOW_UNTESTED) != "1":
        return (
            f"the installed transformers {installed} is newer than the releases vlmlint's counts are proven on "
            f"({MIN_TRANSFORMERS} to the last before {FIRST_UNPROVEN}; its processors changed): "
            f"pip install 'transformers{SUPPORTED_RANGE}', or set {ALLOW_UNTESTED}=1 to count anyway"
        )
    return None


def untested() -> str | None:
    """A notice when the installed release is past the proven range (None inside it)."""
    from packaging.version import Version

    installed = transformers_version()
    if Version(installed) < Version(FIRST_UNPROVEN):
        return None
    return (
        f"transformers {installed} is newer than vlmlint's counts are proven on (below {FIRST_UNPROVEN}): "
        "counts may differ from its processors"
    )


def transformers_version() -> str:
    """The installed release, from its metadata (no import of transformers: the light path needs none)."""
    from importlib.metadata import version

    return version("transformers")


def installed_at_least(release: str) -> bool:
    """Whether the installed transformers is `release` or later (its metadata: nothing is imported, so a
    family's settings can follow the release on the light path too)."""
    from packaging.version import Version

    return Version(transformers_version()) >= Version(release)


def has_class(name: str) -> bool:
    """Whether the installed transformers defines this class (a dummy without torch counts: it exists)."""
    import transformers

    try:
        return getattr(transformers, name, None) is not None
    except Exception:  # noqa: BLE001 (a lazy module that fails to import it: it is there)
        return True


def import_error(name: str) -> str | None:
    """Why the installed transformers cannot import this class without torch, or None (it imports, or the
    release has no such class)."""
    import transformers

    try:
        getattr(transformers, name, None)
    except ImportError as exc:  # its module imports torch (Gemma4Processor in 5.16.1 and 5.20.0)
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return None


def missing_processor(processor_class: str) -> str | None:
    """Why this processor cannot be counted with the installed transformers (it came in a later release,
    so a trainer on this one cannot load it either; or this release's class imports torch), naming the
    release to install; None when it is there."""
    error = import_error(processor_class)
    if error is not None:
        return (
            f"{processor_class} cannot be imported from the installed transformers {transformers_version()} "
            f"without torch ({error}): pip install torch torchvision, or another transformers release whose "
            f"{processor_class} imports without them"
        )
    if has_class(processor_class):
        return None
    since = PROCESSOR_SINCE.get(processor_class)
    fix = (
        f"it came in transformers {since}: pip install 'transformers>={since}'"
        if since
        else ("pip install -U transformers")
    )
    return f"{processor_class} is not in the installed transformers {transformers_version()}; {fix}"


def is_dummy(obj: Any) -> bool:
    """A transformers placeholder for a class whose backends are missing (utils/import_utils.py DummyObject)."""
    return bool(getattr(obj, "is_dummy", False))


def auto_image_processor() -> Any:
    """transformers' AutoImageProcessor, taken from its module: the top-level name is a dummy without torch
    in 5.8.0 to 5.16.1 (the module's class is the same class, and its from_pretrained needs no torch), and
    the tests' reference side may have put `AutoImageProcessor` below in its place."""
    return importlib.import_module("transformers.models.auto.image_processing_auto").AutoImageProcessor


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


def load_image_processor(
    name: str, trust_remote_code: bool = False, image_config: Mapping[str, Any] | None = None
) -> Any:
    """AutoImageProcessor.from_pretrained(name) without torch on every supported release: where the auto
    class cannot give a usable class (its module hands back a dummy PIL class, 5.8.0 to 5.16.1), the
    file's image_processor_type's PIL class is loaded from its own module, as 5.18+ does.
    `image_config`: the file's dict where the caller has read it already."""
    try:
        return auto_image_processor().from_pretrained(name, trust_remote_code=trust_remote_code)
    except (ValueError, ImportError):
        if image_config is None:
            from transformers.image_processing_base import ImageProcessingMixin

            image_config, _ = ImageProcessingMixin.get_image_processor_dict(name)
        type_name = image_config.get("image_processor_type") or image_config.get("feature_extractor_type")
        cls = image_processor_class(str(type_name).replace("FeatureExtractor", "ImageProcessor"))
        if cls is None:
            raise
        return cls.from_pretrained(name)


class AutoImageProcessor:
    """transformers' AutoImageProcessor.from_pretrained through `load_image_processor`, for code (the
    tests' reference side) that names the top-level class, on releases where that name is a dummy."""

    @staticmethod
    def from_pretrained(name: Any, trust_remote_code: bool = False, **kwargs: Any) -> Any:
        if kwargs:
            return auto_image_processor().from_pretrained(name, trust_remote_code=trust_remote_code, **kwargs)
        return load_image_processor(str(name), trust_remote_code)
