"""Reports: one emitter per output format (vlmlint.report.formats is the registry).

The names below are loaded on first use (PEP 562), so that importing a leaf such as
vlmlint.report.safe loads nothing else of the package.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Summary", "build_report", "percentiles", "row_record", "write_report_file"]


def __getattr__(name: str) -> Any:
    if name in ("Summary", "percentiles"):
        from vlmlint import aggregate

        return getattr(aggregate, name)
    if name in ("build_report", "row_record", "write_report_file"):
        from vlmlint.report import json_report

        return getattr(json_report, name)
    raise AttributeError(f"module 'vlmlint.report' has no attribute {name!r}")
