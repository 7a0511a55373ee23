"""The `github` format: GitHub Actions workflow commands, one annotation per finding.

    ::error file=data/train.jsonl,line=23,title=VLM301 placeholder-count-mismatch::2 image ...

Errors become `::error`, warnings `::warning`, info `::notice`. Paths are relative to the working
folder (GITHUB_WORKSPACE in a job) so the annotation lands on the file in the pull request; a row
without a line number is annotated on its file, with its item index in the message. Nothing else is
written, so a clean scan prints nothing; an interrupted one ends with a `::warning` saying so.
GitHub shows at most 10 annotations of each level per step and 50 per job; the run's log keeps every
line.
"""

from __future__ import annotations

from vlmlint.report.ci import located_findings
from vlmlint.report.formats import ReportInput

COMMANDS = {"error": "error", "warning": "warning", "info": "notice"}


def escape_data(text: str) -> str:
    """Escape a command's message as the Actions toolkit does (%, CR and LF)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """Escape a property value (file, title): also ':' and ',', which delimit properties."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render(report: ReportInput) -> str:
    lines = annotations(report.report, root=report.root)
    incomplete = report.report.get("incomplete")
    if incomplete:  # an interrupted scan: say so, or a short list would pass for the whole dataset
        lines.append(f"::warning title=vlmlint scan incomplete::{escape_data(incomplete_text(incomplete))}")
    return "".join(line + "\n" for line in lines)


def incomplete_text(incomplete: dict) -> str:
    """The one line every format gives an interrupted scan (report["incomplete"])."""
    return (
        f"INCOMPLETE: {incomplete.get('reason')} after {incomplete.get('rows_scanned')} rows; "
        "only the rows scanned so far are reported"
    )


def annotations(report: dict, cwd: str | None = None, root: str | None = None) -> list[str]:
    lines = []
    for item in located_findings(report, cwd, root):
        command = COMMANDS.get(item.finding.get("severity", ""), "warning")
        properties = [f"file={escape_property(item.path)}"]
        if item.line is not None:
            properties.append(f"line={item.line}")
        properties.append(f"title={escape_property(item.title)}")
        lines.append(f"::{command} {','.join(properties)}::{escape_data(item.text)}")
    return lines
