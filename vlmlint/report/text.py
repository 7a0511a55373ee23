"""The terminal report: a rich table of the rows with findings, then a summary."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from vlmlint.aggregate import Summary, percentiles
from vlmlint.records import Severity
from vlmlint.report.safe import printable

if TYPE_CHECKING:
    from vlmlint.records import RowOutcome
    from vlmlint.report.formats import EmitOptions, ReportInput

_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def _counts(outcome) -> str:
    result = outcome.result
    if result.seq_len is None:
        return "-"
    images = "+".join(str(t) for t in result.image_tokens if t is not None) or "0"
    return f"seq {result.seq_len} (img {images})"


def media_line(summary: Summary) -> str:
    """The summary's line for rows whose videos or audio clips are not counted (VLM109)."""
    named = [
        f"{n} {word}{'' if n == 1 else 's'}"
        for n, word in ((summary.videos, "video"), (summary.audios, "audio clip"))
        if n
    ]
    return (
        f"media not counted: {summary.media_rows} row(s) hold {' and '.join(named)} vlmlint does not count "
        "(VLM109 says why): their sequence lengths (and the percentiles above) are lower bounds"
    )


def videos_line(summary: Summary) -> str:
    """The summary's line for the videos counted: how many, their tokens, and how frames were sampled."""
    tokens = sorted(summary.video_tokens)
    modes = "; ".join(f"{mode} ({n})" for mode, n in sorted(summary.video_modes.items()))
    return (
        f"videos counted: {len(tokens)}, {tokens[len(tokens) // 2]} tokens median, {tokens[-1]} max; "
        f"frames sampled as: {modes}"
    )


def render_text(
    summary: Summary,
    console: Console,
    *,
    model_name: str,
    max_rows: int = 200,
    text_tokens_estimated: str | None = None,
    incomplete: dict | None = None,
    counted_by: str | None = None,
) -> None:
    findings_shown = 0
    if summary.flagged:
        table = Table(title="Findings", show_lines=True, header_style="bold", expand=False)
        table.add_column("location", overflow="fold")
        table.add_column("id", overflow="fold")
        table.add_column("code", no_wrap=True)
        table.add_column("message / fix", overflow="fold")
        table.add_column("counts", overflow="fold")
        for outcome in summary.flagged:
            for finding in outcome.findings:
                if findings_shown >= max_rows:
                    break
                findings_shown += 1
                # Text, not str: a file name's brackets are not markup; printable: nor are its controls.
                table.add_row(
                    Text(printable(outcome.result.sample.location)),
                    Text(printable(str(finding.id or ""))),
                    Text(finding.code, style=_STYLE[finding.severity]),
                    Text.assemble(
                        printable(finding.message), "\n", ("fix: " + printable(finding.fix), "dim")
                    ),
                    _counts(outcome),
                )
        console.print(table)
        total = sum(summary.by_code.values())
        if total > findings_shown:
            console.print(
                f"... {total - findings_shown} more findings not shown (use --report or --format json)"
            )

    stats = Table(title=Text(f"Summary ({printable(model_name)})"), show_header=True, header_style="bold")
    stats.add_column("")
    for column in ("min", "p50", "p90", "p99", "max"):
        stats.add_column(column, justify="right")
    for label, values in (
        ("sequence length", summary.seq_lens),
        ("image tokens / image", summary.image_tokens),
    ):
        row = percentiles(values)
        stats.add_row(
            label, *("-" if row[k] is None else str(row[k]) for k in ("min", "p50", "p90", "p99", "max"))
        )
    console.print(stats)
    console.print(f"rows scanned: {summary.samples}   rows with findings: {summary.samples_with_findings}")
    if counted_by:
        console.print(f"counted by: {counted_by}", soft_wrap=True)
    if summary.video_tokens:
        console.print(videos_line(summary), soft_wrap=True)
    if summary.media_rows:
        console.print(media_line(summary), style="yellow", soft_wrap=True)
    if incomplete:
        console.print(
            Text(
                f"INCOMPLETE: {incomplete['reason']}; only the rows scanned so far are reported",
                style="bold red",
            )
        )
    if text_tokens_estimated:
        console.print(
            Text(
                f"note: {text_tokens_estimated}; for exact text counts pass --model <hub id or folder>",
                style="yellow",
            ),
            soft_wrap=True,  # one line, whatever the width
        )
    if summary.verify_skipped:
        console.print(Text(f"verify: not run: {summary.verify_skipped}", style="yellow"), soft_wrap=True)
    elif summary.verified_rows is not None:
        style = "red" if summary.verify_disagreements else "green"
        console.print(
            Text(
                f"verify: {summary.verified_rows} rows rechecked with the real image processor, "
                f"{summary.verify_disagreements} disagreement(s)"
                + _verify_coverage(summary.verify_coverage)
                + _verify_videos(summary.verify_video_rows),
                style=style,
            ),
            soft_wrap=True,
        )
    if summary.by_code:
        from vlmlint.rules import RULES_BY_CODE

        for code, count in sorted(summary.by_code.items()):
            rule = RULES_BY_CODE.get(code)
            name = rule.name if rule else ""
            severity = rule.severity if rule else Severity.ERROR
            console.print(Text(f"  {code} {name}: {count}", style=_STYLE[severity]))
    else:
        console.print(Text("no findings", style="green"))


class TextEmitter:
    """`text`: the findings table and the summary, through rich (written once the scan is done)."""

    def __init__(self, stream: TextIO, options: EmitOptions) -> None:
        self.stream = stream
        self.max_rows = options.table_rows

    def row(self, outcome: RowOutcome) -> None:
        pass

    def finish(self, report: ReportInput) -> None:
        # Piped output keeps whole lines: rich would otherwise wrap the table at 80 columns.
        width = None if self.stream.isatty() else int(os.environ.get("COLUMNS", 160))
        render_text(
            report.summary,
            Console(file=self.stream, width=width),
            model_name=printable(report.model_name),
            max_rows=self.max_rows,
            text_tokens_estimated=report.text_tokens_estimated,
            incomplete=report.report.get("incomplete"),
            counted_by=report.counted_by,
        )


def _verify_videos(rows: int) -> str:
    """Rechecked rows with videos: the self-check reran their images and text, not their videos."""
    if not rows:
        return ""
    return (
        f"; {rows} of them hold videos, whose tokens were not rechecked (the self-check runs the real "
        "image processor only; the video formulas are proven by vlmlint's reference tests)"
    )


def _verify_coverage(coverage: dict | None) -> str:
    """What the --verify budgets left out, in words: each size stratum's rows checked, the time budget."""
    if not coverage:
        return ""
    strata = ", ".join(
        f"{name} {group['checked']}/{group['rows']}"
        + (
            f" ({group['above_pixel_budget']} above the pixel budget)"
            if group.get("above_pixel_budget")
            else ""
        )
        for name, group in coverage["strata"].items()
    )
    pixels = coverage["budget"]["row_pixels"]
    text = f"; rows checked by size: {strata}"
    if pixels:
        text += f"; rows above {pixels / 1e6:g} MP are not decoded"
    if coverage["left_by_time_budget"]:
        text += (
            f"; {coverage['left_by_time_budget']} chosen row(s) left by the "
            f"{coverage['budget']['seconds']:.1f} s time budget (--verify-budget"
            + (
                f"; {coverage['budget']['processor_load_seconds']:.1f} s of it loading the real image processor)"
                if coverage["budget"].get("processor_load_seconds")
                else ")"
            )
        )
    return text
