"""The one explicit registry: processor_class / image_processor_type -> model family."""

from __future__ import annotations

from vlmlint.models.aya_vision import FAMILY as AYA_VISION
from vlmlint.models.base import NO_KNOB_KNOWN, Family
from vlmlint.models.cohere2_vision import FAMILY as COHERE2_VISION
from vlmlint.models.deepseek_ocr2 import FAMILY as DEEPSEEK_OCR2
from vlmlint.models.ernie_vl import FAMILY as ERNIE_VL
from vlmlint.models.gemma3 import FAMILY as GEMMA3
from vlmlint.models.gemma3n import FAMILY as GEMMA3N
from vlmlint.models.gemma4 import FAMILY as GEMMA4
from vlmlint.models.glm4v import FAMILY as GLM4V
from vlmlint.models.granite4_vision import FAMILY as GRANITE4_VISION
from vlmlint.models.hunyuan_vl import FAMILY as HUNYUAN_VL
from vlmlint.models.idefics2 import FAMILY as IDEFICS2
from vlmlint.models.idefics3 import FAMILY as IDEFICS3
from vlmlint.models.internvl import FAMILY as INTERNVL
from vlmlint.models.kimi_k25 import FAMILY as KIMI_K25
from vlmlint.models.lfm2_vl import FAMILY as LFM2_VL
from vlmlint.models.llama4 import FAMILY as LLAMA4
from vlmlint.models.llava import FAMILY as LLAVA
from vlmlint.models.llava_next import FAMILY as LLAVA_NEXT
from vlmlint.models.llava_next_video import FAMILY as LLAVA_NEXT_VIDEO
from vlmlint.models.llava_onevision import FAMILY as LLAVA_ONEVISION
from vlmlint.models.minicpmv import FAMILY as MINICPMV
from vlmlint.models.minicpmv import FAMILY_4_7 as MINICPMV4_7
from vlmlint.models.mllama import FAMILY as MLLAMA
from vlmlint.models.molmo2 import FAMILY as MOLMO2
from vlmlint.models.ovis2 import FAMILY as OVIS2
from vlmlint.models.paddleocr_vl import FAMILY as PADDLEOCR_VL
from vlmlint.models.paligemma import FAMILY as PALIGEMMA
from vlmlint.models.phi4_multimodal import FAMILY as PHI4_MULTIMODAL
from vlmlint.models.pixtral import FAMILY as PIXTRAL
from vlmlint.models.qwen_omni import FAMILY as QWEN_OMNI
from vlmlint.models.qwen_vl import FAMILY as QWEN_VL
from vlmlint.models.vision_encoder import FAMILY as VISION_ENCODER

# Order matters only for image_processor_type lookups shared by several families: first wins.
FAMILIES: tuple[Family, ...] = (
    QWEN_VL,
    QWEN_OMNI,
    LLAVA,
    LLAVA_NEXT,
    LLAVA_NEXT_VIDEO,
    GRANITE4_VISION,
    LLAVA_ONEVISION,
    IDEFICS2,
    IDEFICS3,
    PALIGEMMA,
    GEMMA3,
    GEMMA3N,
    GEMMA4,
    GLM4V,
    ERNIE_VL,
    PADDLEOCR_VL,
    HUNYUAN_VL,
    INTERNVL,
    AYA_VISION,
    PIXTRAL,
    MLLAMA,
    MINICPMV,
    MINICPMV4_7,
    OVIS2,
    KIMI_K25,
    LLAMA4,
    LFM2_VL,
    COHERE2_VISION,
    DEEPSEEK_OCR2,
    PHI4_MULTIMODAL,
    MOLMO2,
    VISION_ENCODER,
)
# Every family's image and marker tokens: plain text under a tokenizer that does not know them.
MARKER_TOKENS: frozenset[str] = frozenset(token for family in FAMILIES for token in family.marker_tokens)
# Families whose position ids are M-RoPE's (one image moves the position by its span, not its tokens).
MROPE_FAMILIES: frozenset[str] = frozenset(family.name for family in FAMILIES if family.position_span)


def family_named(name: str) -> Family | None:
    """The registry family of this name, or None (the real-processor fallback is in no registry)."""
    for family in FAMILIES:
        if family.name == name:
            return family
    return None


def trainer_template(family: Family, pipeline: str, model: object) -> str | None:
    """The trainer template `pipeline` uses by default for a model of this family, or None."""
    names = family.trainer_templates.get(pipeline, ())
    if not names:
        return None
    if family.choose_trainer_template is not None:
        return family.choose_trainer_template(pipeline, model)
    return names[0]


def families_for_template(pipeline: str, template: str) -> tuple[str, ...]:
    """The names of the families a trainer template of `pipeline` reproduces."""
    return tuple(family.name for family in FAMILIES if template in family.trainer_templates.get(pipeline, ()))


def knob_for(family: Family | str, settings: object) -> object:
    """The family's image-size knob (`vlmlint stats`), or a sentence saying why there is none."""
    found = family_named(family) if isinstance(family, str) else family
    if found is None or found.size_knob is None:
        return NO_KNOB_KNOWN
    return found.size_knob(settings)


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
