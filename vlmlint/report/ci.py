"""What the CI formats (sarif, github, junit, gitlab) share: where a finding is, its text, its fingerprint.

CI systems place an annotation by a path relative to the checkout (the repository root: `--root`, else
the git toplevel of the working folder, whatever subfolder vlmlint ran in) and a line; they deduplicate findings across runs by a fingerprint that must not change while the finding
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


def repository_root(folder: str) -> str:
    """The git checkout `folder` is in (the nearest parent holding .git, a folder or a worktree's file),
    else `folder`: code scanning attaches paths relative to the repository root, wherever vlmlint ran."""
    current = os.path.abspath(folder)
    while True:
        if os.path.exists(os.path.join(current, ".git")):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return os.path.abspath(folder)
        current = parent


def artifact_path(source: str, cwd: str | None = None, root: str | None = None) -> tuple[str, bool]:
    """The report's source as CI tools want it: (path, True) relative to the base when under it, else
    (abs, False). The base: `root` (--root) when given, else `cwd` when given, else the repository root
    of the working folder (relative sources are the working folder's, `cwd` or the process's).

    Sources that are not files (a hub id with its split) come back as they are, as relative paths.
    """
    here = cwd or os.getcwd()
    base = os.path.abspath(root) if root else cwd or repository_root(here)
    path = source
    match = _SPLIT_SUFFIX.match(source)
    if match and os.path.exists(os.path.join(here, match.group(1))):
        path = match.group(1)
    if not os.path.isabs(path) and base != here and os.path.exists(os.path.join(here, path)):
        path = os.path.join(here, path)  # a file under the working folder: from the repository root
    if os.path.isabs(path):
        try:
            relative = os.path.relpath(path, base)
        except ValueError:  # another drive on Windows
            return PurePath(path).as_posix(), False
        if relative == ".." or relative.startswith(".." + os.sep):
            return PurePath(path).as_posix(), False
        path = relative
    return PurePath(os.path.normpath(path)).as_posix(), True


def located_findings(
    report: dict[str, Any], cwd: str | None = None, root: str | None = None
) -> Iterator[Located]:
    """The report's findings in report order, each with its CI path and fingerprint."""
    seen: Counter[tuple[str, str, str]] = Counter()
    for finding in report.get("findings", []):
        path, relative = artifact_path(str(finding.get("source", "")), cwd, root)
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
