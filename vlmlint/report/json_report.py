"""The JSON report (stable field names; fields may be added) and per-row JSONL records."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import orjson

from vlmlint import __version__
from vlmlint.config import ScanConfig
from vlmlint.engine import RowOutcome
from vlmlint.report.summary import Summary


def settings_record(config: ScanConfig, max_length: int | None) -> dict[str, Any]:
    return {
        "dataset": config.dataset,
        "layout": config.layout,
        "image_root": config.image_root,
        "max_length": max_length,
        "exact": config.exact,
        "chat_template": config.use_chat_template,
        "add_generation_prompt": config.add_generation_prompt,
        "allow_remote": config.allow_remote,
        # Renderers that open images again (HTML thumbnails) must honour the scan's permission.
        "allow_outside_root": config.allow_outside_root,
        "fail_on": config.fail_on.value,
    }


def build_report(summary: Summary, model: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    return {
        "vlmlint_version": __version__,
        "model": model,
        "settings": settings,
        "summary": summary.to_dict(),
        "findings": [finding.to_dict() for finding in summary.findings],
    }


def row_record(outcome: RowOutcome) -> dict[str, Any]:
    result = outcome.result
    sample = result.sample
    return {
        "source": sample.source,
        "line": sample.line,
        "index": sample.index,
        "id": sample.id,
        "layout": sample.layout,
        "images": [
            {
                "path": info.reference,
                "width": info.width,
                "height": info.height,
                "resized_width": info.resized_width,
                "resized_height": info.resized_height,
                "grid": list(info.grid) if info.grid else None,
            }
            for info in result.images
        ],
        "image_tokens": result.image_tokens,
        "text_tokens": result.text_tokens,
        "seq_len": result.seq_len,
        "findings": [finding.code for finding in outcome.findings],
    }


def render(report) -> str:
    """The `json` format: the whole report, indented (report is a formats.ReportInput)."""
    return dumps(report.report).decode() + "\n"


def dumps(data: Any) -> bytes:
    return orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)


def write_report_file(path: str, data: dict[str, Any]) -> None:
    """Write the JSON report atomically: a temporary file beside the target, then a rename."""
    write_atomic(path, dumps(data) + b"\n")


def readable_as_umask_allows(handle: int) -> None:
    """mkstemp makes 0600 files; a report is shared like any file the user writes (0666 & ~umask)."""
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(handle, 0o666 & ~umask)


def write_atomic(path: str, content: bytes) -> None:
    """A reader never sees half a report: write a temporary file beside the target, then rename."""
    folder = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(prefix=".vlmlint-", suffix=".tmp", dir=folder)
    readable_as_umask_allows(handle)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(content)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
