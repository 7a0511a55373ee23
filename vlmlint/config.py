"""Scan settings: one frozen record built by the CLI (or a Python caller) and read by the engine."""

from __future__ import annotations

from dataclasses import dataclass

from vlmlint.rules.base import Severity


@dataclass(frozen=True)
class ScanConfig:
    dataset: str
    model: str
    layout: str | None = None
    image_root: str | None = None
    split: str | None = None
    streaming: bool = False
    max_length: int | None = None  # None: the model's text max_position_embeddings
    exact: bool = False  # decode pixels and run the real image processor
    use_chat_template: bool = True
    add_generation_prompt: bool = False
    trust_remote_code: bool = False
    fail_on: Severity = Severity.ERROR
    batch_size: int = 256
