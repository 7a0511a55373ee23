"""The support matrix: every model type of the installed transformers whose processor takes images.

Discovered from transformers' own auto mappings (no hand-kept list of models):
`processing_auto.PROCESSOR_MAPPING_NAMES` (model type -> processor class) and
`image_processing_auto.IMAGE_PROCESSOR_MAPPING_NAMES` (model type -> {backend: image processor class}).
A model type is in the matrix when both mappings list it, or when its processor class has an image
processor among its parts (its image processor is then the one transformers lists for another model
type with the same processor class).

Each entry says how vlmlint counts that model type's rows:

- ``formula``: a family module of vlmlint lists the processor class (`registry.family_for_class`),
  also where its image processor needs torchvision (a family with needs_torchvision, proven against the
  recorded outputs of fixtures/reference/);
- ``fallback``: the real processor, on decoded images (its image processor has a PIL backend and the
  processor class imports without torch);
- ``refused``: it cannot run here; the reason names the component and what it needs.

and whether its counts are proven by the differential test (tests/test_support_matrix.py), which
covers every model type whose text gets image tokens and that is not refused, except the ones
in LEFT_OUT, each with its reason. The test and this matrix read the same `in_differential_test`,
so the docs never claim more than the test proves.

`python -m vlmlint.models.support docs/models/support.md` writes the docs page (`make docs` does).
Nothing here imports torch: processor classes that need it are seen as transformers' placeholders,
and their source is read, not imported.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

__all__ = [
    "LEFT_OUT",
    "NEEDS_AT_CALL",
    "RECORDED",
    "SupportEntry",
    "in_differential_test",
    "render_markdown",
    "support_matrix",
    "totals",
    "totals_line",
]

# Model types the differential test cannot cover although their text gets image tokens and vlmlint
# does not refuse them: model type -> the reason, which the matrix prints as "not covered: <reason>".
# tests/test_support_matrix.py checks each reason (the real processor raises on every image+text row).
_RETRIEVAL = (
    "a retrieval processor: it takes text or images in one call, never both, so no image+text row "
    "has a count (the real processor raises on every such row)"
)
LEFT_OUT: dict[str, str] = {"colpali": _RETRIEVAL, "colqwen2": _RETRIEVAL}

# Processors whose classes import without torch but whose call needs it: model type -> the part and
# what it needs. Routed "refused"; tests/test_support_matrix.py checks that the real processor
# indeed fails here on every row.
NEEDS_AT_CALL: dict[str, str] = {
    "idefics": "its processor builds image tensors with torch only (return_tensors='pt'): pip install torch",
}

# A torchvision-only family's proof: its formula against the real class's outputs recorded in
# fixtures/reference/ (checked by `make test`), recorded again with torchvision by `make test-reference`.
RECORDED = (
    "yes: against the real processor's recorded outputs (fixtures/reference/, recorded again with "
    "torchvision by make test-reference)"
)
_NO_IMAGE_TOKENS = "no image tokens in its text (nothing to count per image)"
_PIP = {"torch": "torch", "torchvision": "torchvision", "torchaudio": "torchaudio"}


@dataclass(frozen=True)
class SupportEntry:
    model_type: str
    processor_class: str
    image_processors: tuple[str, ...]  # class names, PIL backend first
    route: str  # "formula" | "fallback" | "refused"
    family: str | None  # the family name when route is "formula"
    reason: str | None  # why it is refused; None otherwise
    image_tokens_in_text: bool
    proven: bool | str  # True: the differential test covers it; else the stated reason it does not
    note: str | None = None  # e.g. where its image processor comes from when its own is not listed


def _family_for_class(processor_class: str) -> Any:
    from vlmlint.models import registry

    lookup = getattr(registry, "family_for_class", None)
    if lookup is not None:
        return lookup(processor_class)
    return next((f for f in registry.FAMILIES if processor_class in f.processor_classes), None)


def _is_placeholder(obj: Any) -> bool:
    """transformers' stand-in for a class whose backend (torch, torchvision) is missing."""
    from transformers.utils.import_utils import DummyObject

    return isinstance(obj, DummyObject)


def _transformers_class(name: str) -> Any:
    import transformers

    return getattr(transformers, name, None)


@cache
def _module_source(module: str) -> str:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return ""
    return Path(spec.origin).read_text(encoding="utf-8")


def _processor_source(processor_class: str) -> str:
    cls = _transformers_class(processor_class)
    module = getattr(cls, "__module__", None)
    if cls is None or module is None:
        return ""
    return _module_source(module)


def image_tokens_in_text(processor_class: str) -> bool:
    """Whether the processor writes image tokens into the text: its module handles an image token.

    Read from the processor module's source, so that processors whose import needs torch are
    classified too. tests/test_support_matrix.py checks the claim both ways on the processors it can
    build (a processor said to have none leaves the tokenized text unchanged by its images).
    """
    return re.search(r"\bimage_token\b|_image_token\b", _processor_source(processor_class)) is not None


def _needs(backends: Any) -> str:
    names = [str(b) for b in (backends or ["torch"])]
    return f"{' and '.join(names)}: pip install {' '.join(_PIP.get(n, n) for n in names)}"


def _missing_backends(cls: Any) -> list[str]:
    """Backends the class's module asks for at run time (`requires_backends(self, ...)`, e.g.
    LayoutLMv3's pytesseract, Owlv2's scipy) that are not installed."""
    source = _module_source(cls.__module__)
    names: list[str] = []
    for match in re.finditer(r"requires_backends\(\s*self\s*,\s*(\[[^\]]*\]|[\"'][^\"']+[\"'])", source):
        names += re.findall(r"[\"'](\w+)[\"']", match.group(1))
    return sorted({n for n in names if n not in ("vision",) and importlib.util.find_spec(n) is None})


def _processor_parts(processor_class: str) -> list[str]:
    cls = _transformers_class(processor_class)
    if cls is None or _is_placeholder(cls):
        source = _processor_source(processor_class)
        match = re.search(r"attributes\s*=\s*\[([^\]]*)\]", source)
        return re.findall(r"[\"'](\w+)[\"']", match.group(1)) if match else []
    try:
        return list(cls.get_attributes())
    except Exception:  # a processor class transformers cannot introspect here
        return []


def _image_processor_map() -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    processors = {k: v for k, v in PROCESSOR_MAPPING_NAMES.items() if isinstance(v, str)}
    images = {k: dict(v) for k, v in IMAGE_PROCESSOR_MAPPING_NAMES.items() if isinstance(v, dict)}
    return processors, images


def _ordered(backends: dict[str, str]) -> tuple[str, ...]:
    order = sorted(backends, key=lambda b: (b != "pil", b))
    return tuple(dict.fromkeys(backends[b] for b in order if backends[b]))


def _entry(model_type: str, processor_class: str, backends: dict[str, str], note: str | None) -> SupportEntry:
    tokens = image_tokens_in_text(processor_class)
    route, family, reason = "fallback", None, None
    pil = backends.get("pil")
    pil_class = _transformers_class(pil) if pil else None
    processor = _transformers_class(processor_class)
    if not backends:  # a generic processor (VisionTextDualEncoder): the folder names its parts
        note = note or "any image processor: the one its folder names (transformers lists none for it)"
        if processor is None or _is_placeholder(processor):
            route, reason = "refused", f"its processor class {processor_class} needs torch: pip install torch"
    elif pil is None:
        found = _family_for_class(processor_class)
        if found is not None and found.needs_torchvision:  # a formula is the only torch-free path
            route, family = "formula", found.name
        else:
            route = "refused"
            reason = "its image processor needs torchvision (no PIL backend): pip install torch torchvision"
    elif pil_class is None or _is_placeholder(pil_class):
        route = "refused"
        reason = f"its image processor {pil} needs {_needs(getattr(pil_class, '_backends', None))}"
    elif _missing_backends(pil_class):
        missing = _missing_backends(pil_class)
        route = "refused"
        reason = f"its image processor {pil} needs {' and '.join(missing)}: pip install {' '.join(missing)}"
    else:
        found = _family_for_class(processor_class)
        if found is not None:
            route, family = "formula", found.name
        elif processor is None:
            route, reason = "refused", f"its processor class {processor_class} is not in transformers"
        elif _is_placeholder(processor):
            route = "refused"
            reason = (
                f"its processor class {processor_class} needs {_needs(getattr(processor, '_backends', None))}"
            )
    if route != "refused" and model_type in NEEDS_AT_CALL:
        route, family, reason = "refused", None, NEEDS_AT_CALL[model_type]
    if route == "refused":
        proven: bool | str = "not covered: refused here (it needs torch or torchvision)"
    elif route == "formula" and pil is None:
        proven = RECORDED
    elif not tokens:
        proven = f"not covered: {_NO_IMAGE_TOKENS}"
    elif model_type in LEFT_OUT:
        proven = f"not covered: {LEFT_OUT[model_type]}"
    else:
        proven = True
    return SupportEntry(
        model_type=model_type,
        processor_class=processor_class,
        image_processors=_ordered(backends),
        route=route,
        family=family,
        reason=reason,
        image_tokens_in_text=tokens,
        proven=proven,
        note=note,
    )


@cache
def _matrix() -> tuple[SupportEntry, ...]:
    processors, images = _image_processor_map()
    entries = []
    for model_type in sorted(processors):
        processor_class = processors[model_type]
        note = None
        backends = images.get(model_type)
        if backends is None:
            if "image_processor" not in _processor_parts(processor_class):
                continue  # its processor takes no images
            donor = next((m for m in sorted(images) if processors.get(m) == processor_class), None)
            backends = images[donor] if donor else {}
            note = f"image processor as listed for {donor}" if donor else None
        entries.append(_entry(model_type, processor_class, backends, note))
    return tuple(entries)


def support_matrix() -> list[SupportEntry]:
    """Every model type whose processor takes images, sorted by model type."""
    return list(_matrix())


def in_differential_test(entry: SupportEntry) -> bool:
    """The model types tests/test_support_matrix.py compares against the real processor."""
    return entry.proven is True


def totals(entries: list[SupportEntry]) -> dict[str, int]:
    counts = {"formula": 0, "fallback": 0, "refused": 0}
    for entry in entries:
        counts[entry.route] += 1
    return counts


def totals_line(entries: list[SupportEntry]) -> str:
    counts = totals(entries)
    return (
        f"{len(entries)} model types with image processors: formula {counts['formula']}, "
        f"fallback {counts['fallback']}, refused {counts['refused']}"
    )


def route_text(entry: SupportEntry) -> str:
    if entry.route == "formula":
        import transformers

        proof = f", proven against transformers {transformers.__version__}" if _proven(entry) else ""
        return f"formula (family {entry.family}){proof}"
    if entry.route == "fallback":
        return "fallback (real processor)"
    return f"refused: {entry.reason}"


def _proven(entry: SupportEntry) -> bool:
    return entry.proven is True or entry.proven == RECORDED


def proven_text(entry: SupportEntry) -> str:
    return "yes" if entry.proven is True else str(entry.proven)


HEADER = """# Support matrix

Generated from the installed transformers ({version}) and vlmlint's own code by
`python -m vlmlint.models.support docs/models/support.md` (`make docs`); do not edit by hand.
`vlmlint models --all` prints the same table for the transformers you have installed.

Every model type that transformers' auto mappings (`PROCESSOR_MAPPING_NAMES`,
`IMAGE_PROCESSOR_MAPPING_NAMES`) give a processor taking images, with the route vlmlint counts it by:

- **formula**: a vlmlint family module lists its processor class; counts come from the image header
  (for the processors whose image processor needs torchvision, a formula is the only torch-free path);
- **fallback**: the real transformers processor, on decoded images (no torch or torchvision needed:
  its image processor has a PIL backend; video and audio parts are left out);
- **refused**: it cannot run without torch or torchvision; the reason says which part needs what.

**Proven** means tests/test_support_matrix.py builds a tiny processor folder for that model type from
the classes' defaults, scans a dataset of one- and two-image rows of varied sizes with vlmlint and
finds every row's sequence length and every image's image tokens equal to the real processor's; each
family module has its own differential tests as well (tests/families/). For the processors whose image
processor needs torchvision, the formula is checked against the real class's outputs recorded in
fixtures/reference/, which `make test-reference` records again with torch and torchvision. A model type
it does not cover says why.

{totals}.

| model type | processor class | image processor | route | image tokens in text | proven |
|---|---|---|---|---|---|
"""


def render_markdown(entries: list[SupportEntry] | None = None) -> str:
    import transformers

    entries = support_matrix() if entries is None else entries
    lines = [HEADER.format(version=transformers.__version__, totals=totals_line(entries))]
    for e in entries:
        image = ", ".join(f"`{name}`" for name in e.image_processors) or "none listed"
        if e.note:
            image += f" ({e.note})"
        lines.append(
            f"| `{e.model_type}` | `{e.processor_class}` | {image} | {route_text(e)} | "
            f"{'yes' if e.image_tokens_in_text else 'no'} | {proven_text(e)} |\n"
        )
    return "".join(lines)


def main(argv: list[str] | None = None) -> int:
    import os

    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    target = Path((argv or sys.argv[1:] or ["docs/models/support.md"])[0])
    target.write_text(render_markdown(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
