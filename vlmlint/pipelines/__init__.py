"""Trainer pipeline presets, one explicit registry: `--pipeline hf|axolotl|internvl|llamafactory|qwen-vl-finetune|swift|trl`.

Modules are imported only when their preset is asked for (vlmlint/pipelines/base.py explains presets).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from vlmlint.pipelines.base import Pipeline, PipelineError
from vlmlint.records import TrainerFate

# name -> "module:Class"
PIPELINES: dict[str, str] = {
    "hf": "vlmlint.pipelines.base:Pipeline",
    "axolotl": "vlmlint.pipelines.axolotl:AxolotlPipeline",
    "internvl": "vlmlint.pipelines.internvl:InternVLPipeline",
    "llamafactory": "vlmlint.pipelines.llamafactory:LlamaFactoryPipeline",
    "qwen-vl-finetune": "vlmlint.pipelines.qwen_vl_finetune:QwenVLFinetunePipeline",
    "swift": "vlmlint.pipelines.swift:SwiftPipeline",
    "trl": "vlmlint.pipelines.trl:TrlPipeline",
}


def load_pipeline(name: str, options: Mapping[str, Any] | None = None) -> Pipeline:
    """The preset `name` with its options; PipelineError for an unknown name or option."""
    target = PIPELINES.get(name)
    if target is None:
        raise PipelineError(f"unknown --pipeline {name!r}; known: {', '.join(PIPELINES)}")
    module_name, _, class_name = target.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise PipelineError(f"--pipeline {name} is not available: {exc}") from None
    return cls(options)


__all__ = ["PIPELINES", "Pipeline", "PipelineError", "TrainerFate", "load_pipeline"]
