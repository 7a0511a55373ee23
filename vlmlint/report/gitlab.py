"""The `gitlab` format: a GitLab Code Quality report (artifacts:reports:codequality).

A JSON array, one object per finding: description (message and fix), check_name (the rule code),
fingerprint (md5 hex of rule, file and row: stable across runs, so GitLab can tell new findings in a
merge request from old ones), severity and location (path relative to the working folder, i.e. the
checkout, and the row's line; line 1 with the item index in the description when the row has none).
"""

from __future__ import annotations

from typing import Any

from vlmlint.report.ci import located_findings
from vlmlint.report.formats import ReportInput

# GitLab's levels are info, minor, major, critical, blocker; an error breaks training: major.
SEVERITIES = {"error": "major", "warning": "minor", "info": "info"}


def render(report: ReportInput) -> str:
    from vlmlint.report.json_report import dumps

    entries = code_quality(report.report, root=report.root)
    incomplete = report.report.get("incomplete")
    if incomplete:  # Code Quality has no top-level note: an entry on the dataset says it
        entries.append(incomplete_entry(report.report, incomplete, root=report.root))
    return dumps(entries).decode() + "\n"


def incomplete_entry(
    report: dict, incomplete: dict, cwd: str | None = None, root: str | None = None
) -> dict[str, Any]:
    import hashlib

    from vlmlint.report.ci import artifact_path
    from vlmlint.report.github import incomplete_text

    path, _ = artifact_path(str((report.get("settings") or {}).get("dataset", "")), cwd, root)
    return {
        "description": f"vlmlint: {incomplete_text(incomplete)}",
        "check_name": "vlmlint-incomplete",
        # Stable for the dataset: the same interrupted scan is the same entry.
        "fingerprint": hashlib.md5(f"incomplete\0{path}".encode(), usedforsecurity=False).hexdigest(),
        "severity": "major",
        "location": {"path": path, "lines": {"begin": 1}},
    }


def code_quality(report: dict, cwd: str | None = None, root: str | None = None) -> list[dict[str, Any]]:
    return [
        {
            "description": f"{item.title}: {item.text}",
            "check_name": item.code,
            "fingerprint": item.fingerprint,
            "severity": SEVERITIES.get(item.finding.get("severity", ""), "minor"),
            "location": {"path": item.path, "lines": {"begin": item.line if item.line is not None else 1}},
        }
        for item in located_findings(report, cwd, root)
    ]
