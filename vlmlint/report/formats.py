"""Whole-report output formats: one explicit registry of name -> renderer module.

Every renderer is a pure function `render(report: ReportInput) -> str`; the CLI writes the string to
stdout or to `-o FILE`. `text` (rich) and `jsonl` (streamed while scanning) are handled by the CLI
itself because they are written as the scan goes or need a live console.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vlmlint.aggregate import Summary

# name -> "module:function". Modules are imported only when their format is asked for.
RENDERERS: dict[str, str] = {
    "json": "vlmlint.report.json_report:render",
    "sarif": "vlmlint.report.sarif:render",
    "github": "vlmlint.report.github:render",
    "junit": "vlmlint.report.junit:render",
    "gitlab": "vlmlint.report.gitlab:render",
    "html": "vlmlint.report.html:render",
}
STREAMED_FORMATS = ("text", "jsonl")
FORMAT_NAMES: tuple[str, ...] = ("text", "json", "jsonl", *[n for n in RENDERERS if n != "json"])


@dataclass(frozen=True)
class ReportInput:
    """Everything a renderer may use: the finished JSON report and the live summary behind it."""

    report: dict[str, Any]  # build_report(...): vlmlint_version, model, settings, summary, findings
    summary: Summary  # flagged rows with their samples (image paths for thumbnails), raw distributions
    model_name: str
    text_tokens_estimated: str | None = None
    counted_by: str | None = None  # Model.counted_by(): formula (family X) or real processor (fallback)


def renderer(name: str) -> Callable[[ReportInput], str]:
    module_name, _, function = RENDERERS[name].partition(":")
    return getattr(importlib.import_module(module_name), function)


def render(name: str, report: ReportInput) -> str:
    return renderer(name)(report)
