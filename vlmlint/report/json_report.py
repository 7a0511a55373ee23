"""The JSON report (stable field names; fields may be added) and per-row JSONL records."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TextIO

import orjson

from vlmlint.aggregate import Summary
from vlmlint.fileio import write_atomic
from vlmlint.records import RowOutcome
from vlmlint.report.safe import dumps_safe, safe_record
from vlmlint.version import __version__

if TYPE_CHECKING:  # the settings layer sits above the report: only its shape is read here
    from vlmlint.config import ScanConfig
    from vlmlint.report.formats import EmitOptions, ReportInput


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
        "pipeline": config.pipeline,
        "pipeline_options": dict(config.pipeline_options),
        # image processor keys set as if its file held them (--processor-option)
        "processor_options": dict(config.processor_options),
        # the row fields read under other names (--columns): a checkpoint of another map is not resumed
        "columns": dict(config.columns),
    }


def transformers_version() -> str | None:
    """The installed transformers release, whose processors the counts follow (from its metadata)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("transformers")
    except PackageNotFoundError:
        return None


def build_report(summary: Summary, model: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    return {
        "vlmlint_version": __version__,
        # the counts follow this release's processor classes (README, "transformers versions")
        "transformers_version": transformers_version(),
        # Dataset paths may hold bytes that are not UTF-8 (report/safe.py): every format can write them.
        "model": safe_record(model),
        "settings": safe_record(settings),
        "summary": summary.to_dict(),
        "findings": FindingsView(summary),
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
        # Videos and audio clips; one with tokens null is not counted (VLM109): seq_len is then a lower bound.
        "media": [_media_record(info) for info in result.media],
        "lengths_lower_bound": result.lengths_lower_bound,
        "text_tokens": result.text_tokens,
        "seq_len": result.seq_len,
        "trainer": _fate_record(result.trainer),
        "findings": [finding.code for finding in outcome.findings],
    }


def _media_record(info: Any) -> dict[str, Any]:
    """One clip: its header facts (a video's frames, fps, size), the frames sampled and its tokens."""
    video = info.video
    return {
        "kind": info.kind,
        "path": info.reference,
        "frames": video.frames if video is not None else info.frames,
        "frames_from": video.frames_from if video is not None else None,
        "fps": video.fps if video is not None else None,
        "duration": video.duration if video is not None else None,
        "width": video.width if video is not None else None,
        "height": video.height if video is not None else None,
        "sampled_frames": info.sampled,
        "tokens": info.tokens,
        "counted_by": info.counted_by,
        "error": info.error_code,
    }


class FindingsView:
    """A report's findings, as dicts, read from the summary (memory and spill file) on each iteration.

    Why not a list: a scan of millions of rows can have millions of findings; the JSON writer streams
    them, renderers iterate them, and nothing holds them all at once.
    """

    def __init__(self, summary: Summary) -> None:
        self._summary = summary

    def __iter__(self):
        # Sources and messages come from the dataset: made valid UTF-8 once, for every format.
        return (safe_record(finding.to_dict()) for finding in self._summary.iter_findings())

    def __len__(self) -> int:
        return sum(self._summary.by_code.values())


def iter_report_bytes(data: dict[str, Any]):
    """The report as orjson's 2-space indented JSON, in pieces: findings are streamed one by one."""
    yield b"{"
    for position, (key, value) in enumerate(data.items()):
        yield (b",\n  " if position else b"\n  ") + orjson.dumps(key) + b": "
        if isinstance(value, FindingsView):
            empty = True
            for record in value:
                yield (b"[\n    " if empty else b",\n    ") + _indented(dumps(record), 4)
                empty = False
            yield b"[]" if empty else b"\n  ]"
        else:
            yield _indented(dumps(value), 2)
    yield b"\n}" if data else b"}"


def _indented(encoded: bytes, spaces: int) -> bytes:
    # orjson escapes newlines inside strings, so every raw newline is between JSON tokens.
    return encoded.replace(b"\n", b"\n" + b" " * spaces)


def _fate_record(fate: Any) -> dict[str, Any] | None:
    """--pipeline: the trainer's predicted fate for the row (pipelines.TrainerFate)."""
    if fate is None:
        return None
    return {
        "status": fate.status,
        "length": fate.length,
        "answer_tokens_lost": fate.answer_tokens_lost,
        "image_tokens_lost": fate.image_tokens_lost,
    }


def render(report) -> str:
    """The `json` format: the whole report, indented (report is a formats.ReportInput)."""
    return b"".join(iter_report_bytes(report.report)).decode() + "\n"


def dumps_line(record: dict) -> str:
    """One JSONL line; a file name's non-UTF-8 bytes shown as \\xNN."""
    return dumps_safe(record).decode() + "\n"


class JsonEmitter:
    """`json`: the whole report, indented, streamed (findings may not fit in memory at once)."""

    def __init__(self, stream: TextIO, options: EmitOptions) -> None:
        self.stream = stream

    def row(self, outcome: RowOutcome) -> None:
        pass

    def finish(self, report: ReportInput) -> None:
        for piece in iter_report_bytes(report.report):
            self.stream.write(piece.decode())
        self.stream.write("\n")


class JsonlEmitter:
    """`jsonl`: one line per finding (or per row, with all_rows) as the scan goes; an interrupted
    scan's last line says the lines above are not all the rows."""

    def __init__(self, stream: TextIO, options: EmitOptions) -> None:
        self.stream = stream
        self.all_rows = options.all_rows

    def row(self, outcome: RowOutcome) -> None:
        if self.all_rows:
            self.stream.write(dumps_line(row_record(outcome)))
        else:
            for finding in outcome.findings:
                self.stream.write(dumps_line(finding.to_dict()))

    def finish(self, report: ReportInput) -> None:
        if report.report.get("incomplete"):
            self.stream.write(dumps_line({"incomplete": report.report["incomplete"]}))


def dumps(data: Any) -> bytes:
    return dumps_safe(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)


def write_report_file(path: str, data: dict[str, Any]) -> None:
    """Write the JSON report atomically: a temporary file beside the target, then a rename."""
    write_atomic(path, iter_report_bytes(data), b"\n")
