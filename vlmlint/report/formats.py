"""Output formats: one protocol (Emitter) and one explicit registry of name -> emitter.

An emitter writes its format to a text stream (stdout or `-o FILE`): `row(outcome)` for each row as
the scan goes (jsonl streams them; most formats ignore it), then `finish(report)` once the scan is
done. A format written whole at the end may instead be a plain `render(report) -> str` function,
which the registry wraps (WholeReport). Adding a format: its module, and one line here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TextIO

from vlmlint.aggregate import Summary
from vlmlint.records import RowOutcome
from vlmlint.report.safe import unicode_safe

# name -> "module:Emitter class" or "module:render function". Imported only when its format is asked for;
# the order is the one `--format` lists.
EMITTERS: dict[str, str] = {
    "text": "vlmlint.report.text:TextEmitter",
    "json": "vlmlint.report.json_report:JsonEmitter",
    "jsonl": "vlmlint.report.json_report:JsonlEmitter",
    "sarif": "vlmlint.report.sarif:render",
    "github": "vlmlint.report.github:render",
    "junit": "vlmlint.report.junit:render",
    "gitlab": "vlmlint.report.gitlab:render",
    "html": "vlmlint.report.html:render",
}
FORMAT_NAMES: tuple[str, ...] = tuple(EMITTERS)


@dataclass(frozen=True)
class ReportInput:
    """Everything a format may use: the finished JSON report and the live summary behind it."""

    report: dict[str, Any]  # build_report(...): vlmlint_version, model, settings, summary, findings
    summary: Summary  # flagged rows with their samples (image paths for thumbnails), raw distributions
    model_name: str
    text_tokens_estimated: str | None = None
    counted_by: str | None = None  # Model.counted_by(): formula (family X) or real processor (fallback)
    root: str | None = None  # --root: the folder CI formats' paths are relative to (else the git toplevel)


@dataclass(frozen=True)
class EmitOptions:
    """The scan's output options that some formats read."""

    all_rows: bool = False  # jsonl: one line per row (counts and codes), not per finding
    table_rows: int = 200  # text: the most findings the table shows


class Emitter(Protocol):
    def __init__(self, stream: TextIO, options: EmitOptions) -> None: ...

    def row(self, outcome: RowOutcome) -> None:
        """One scanned row, in dataset order, as the scan goes."""

    def finish(self, report: ReportInput) -> None:
        """The whole report, once the scan is done (or interrupted: report.report["incomplete"])."""


class WholeReport:
    """A format rendered whole at the end by its module's `render(report) -> str`."""

    def __init__(self, name: str, stream: TextIO) -> None:
        self.name = name
        self.stream = stream

    def row(self, outcome: RowOutcome) -> None:
        pass

    def finish(self, report: ReportInput) -> None:
        # unicode_safe: the last guard for a name's non-UTF-8 bytes, whatever the renderer did
        self.stream.write(unicode_safe(render(self.name, report)))


def _target(name: str) -> Any:
    module_name, _, attribute = EMITTERS[name].partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def emitter(name: str, stream: TextIO, options: EmitOptions) -> Emitter:
    """The emitter of format `name`, writing to `stream`."""
    target = _target(name)
    return target(stream, options) if isinstance(target, type) else WholeReport(name, stream)


def renderer(name: str) -> Callable[[ReportInput], str]:
    """A whole-report format's render function (not text, json nor jsonl, which are emitters)."""
    target = _target(name)
    if isinstance(target, type):
        raise KeyError(f"{name} is written by an emitter, not rendered whole")
    return target


def render(name: str, report: ReportInput) -> str:
    return renderer(name)(report)
