"""What the CI formats (sarif, github, junit, gitlab) share: where a finding is, its text, its fingerprint.

CI systems place an annotation by a path relative to the checkout (the working folder in CI) and a
line; they deduplicate findings across runs by a fingerprint that must not change while the finding
stays the same, so it is built from the rule, the file and the row (its id, else its content hash,
else its position), never from the message, whose numbers may move.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

# The package's page: the tool's home for SARIF's informationUri.
INFORMATION_URI = "https://pypi.org/project/vlmlint/"

# "folder[train]": a saved dataset with its split, as the Hugging Face readers name their source.
_SPLIT_SUFFIX = re.compile(r"^(.*)\[[^\[\]]*\]$")


@dataclass(frozen=True)
class Located:
    """One finding of the JSON report with what every CI format needs about it."""

    finding: dict[str, Any]
    path: str  # relative to the working folder (forward slashes) when under it, else absolute
    relative: bool
    fingerprint: str  # md5 hex of rule, path, row and occurrence: stable across runs

    @property
    def code(self) -> str:
        return self.finding["code"]

    @property
    def line(self) -> int | None:
        return self.finding.get("line")

    @property
    def title(self) -> str:
        return f"{self.finding['code']} {self.finding['name']}"

    @property
    def text(self) -> str:
        """The message and its fix in one line; rows without a line number say which item they are."""
        finding = self.finding
        where = "" if finding.get("line") is not None else f"item {finding.get('index')}: "
        fix = f" (fix: {finding['fix']})" if finding.get("fix") else ""
        return f"{where}{finding['message']}{fix}"


def artifact_path(source: str, cwd: str | None = None) -> tuple[str, bool]:
    """The report's source as CI tools want it: (path, True) relative to cwd when under it, else (abs, False).

    Sources that are not files (a hub id with its split) come back as they are, as relative paths.
    """
    cwd = cwd or os.getcwd()
    path = source
    match = _SPLIT_SUFFIX.match(source)
    if match and os.path.exists(os.path.join(cwd, match.group(1))):
        path = match.group(1)
    if os.path.isabs(path):
        try:
            relative = os.path.relpath(path, cwd)
        except ValueError:  # another drive on Windows
            return PurePath(path).as_posix(), False
        if relative == ".." or relative.startswith(".." + os.sep):
            return PurePath(path).as_posix(), False
        path = relative
    return PurePath(os.path.normpath(path)).as_posix(), True


def located_findings(report: dict[str, Any], cwd: str | None = None) -> Iterator[Located]:
    """The report's findings in report order, each with its CI path and fingerprint."""
    seen: Counter[tuple[str, str, str]] = Counter()
    for finding in report.get("findings", []):
        path, relative = artifact_path(str(finding.get("source", "")), cwd)
        # The row by its id, else by its content hash (baselines), else by its position in the file.
        if finding.get("id") is not None:
            row = f"id={finding['id']}"
        elif finding.get("fingerprint"):
            row = f"content={finding['fingerprint']}"
        else:
            row = f"index={finding.get('index')}"
        key = (finding["code"], path, row)
        seen[key] += 1  # two findings of one rule on one row (e.g. two missing images) stay distinct
        material = "\0".join((*key, str(seen[key])))
        digest = hashlib.md5(material.encode(), usedforsecurity=False).hexdigest()
        yield Located(finding=finding, path=path, relative=relative, fingerprint=digest)
