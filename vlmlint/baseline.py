"""Baselines: findings accepted as they are, so that CI fails only on new problems.

`vlmlint scan --write-baseline FILE` records every finding; `--baseline FILE` drops those findings
from later scans. An entry is keyed by the finding's fingerprint (rule code + a hash of the row's
content, see readers/fingerprint.py), never by line or index, so re-ordering rows or inserting rows
keeps it valid. Identical rows share a fingerprint: each entry keeps a count, and a baseline made
with one such row suppresses one of them, not a second copy added later.

This module reads and writes the file and filters findings; it never prints or exits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import orjson

from vlmlint.records import Finding

BASELINE_VERSION = 1
MAX_BASELINE_BYTES = 256 * 2**20  # a baseline of a million findings is some 200 MB; beyond: refused
_HEADER = (
    "vlmlint baseline: findings accepted as they are. `vlmlint scan --baseline THIS_FILE` does not "
    "report them; `vlmlint scan --write-baseline THIS_FILE` regenerates it. Entries are keyed by rule "
    "code + a hash of the row's content (not its line), so moving rows keeps them valid."
)


class BaselineError(ValueError):
    """A baseline file vlmlint cannot use; the message names it."""


class Baseline:
    """The entries of one baseline file, consumed as findings match them.

    Mutable on purpose (unlike the frozen records elsewhere): each match uses up one occurrence, so
    that a second identical row added after the baseline is reported.
    """

    def __init__(self, path: str, counts: dict[str, int]) -> None:
        self.path = path
        self.remaining = dict(counts)
        self.suppressed = 0

    def suppresses(self, finding: Finding) -> bool:
        """True (and one occurrence used up) when the baseline lists this finding."""
        left = self.remaining.get(finding.fingerprint or "", 0)
        if left <= 0:
            return False
        self.remaining[finding.fingerprint] = left - 1
        self.suppressed += 1
        return True

    def filter(self, findings: Iterable[Finding]) -> tuple[Finding, ...]:
        """The findings the baseline does not list."""
        return tuple(finding for finding in findings if not self.suppresses(finding))

    @property
    def stale(self) -> int:
        """Occurrences listed in the file that no finding of this scan matched (fixed or gone)."""
        return sum(self.remaining.values())

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.path, "suppressed": self.suppressed, "stale": self.stale}


def load_baseline(path: str) -> Baseline:
    """Read a baseline file; anything but a well-formed one raises BaselineError."""
    from vlmlint.fileio import OutputError, read_checked

    try:
        # Only a regular file of bounded size: a FIFO would block, /dev/zero would fill memory.
        data = orjson.loads(read_checked(path, MAX_BASELINE_BYTES, "baseline"))
    except OutputError as exc:
        raise BaselineError(str(exc)) from None
    except orjson.JSONDecodeError as exc:
        raise BaselineError(f"baseline {path}: not valid JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("findings"), list):
        raise BaselineError(f'baseline {path}: not a vlmlint baseline (no "findings" list)')
    if data.get("version") != BASELINE_VERSION:
        raise BaselineError(
            f"baseline {path}: version {data.get('version')!r} is not {BASELINE_VERSION}; "
            "regenerate it with --write-baseline"
        )
    counts: dict[str, int] = {}
    for position, entry in enumerate(data["findings"]):
        fingerprint = entry.get("fingerprint") if isinstance(entry, dict) else None
        count = entry.get("count", 1) if isinstance(entry, dict) else None
        if (
            not isinstance(fingerprint, str)
            or not isinstance(count, int)
            or isinstance(count, bool)
            or count < 1
        ):
            raise BaselineError(
                f'baseline {path}: entry {position} needs a "fingerprint" string and a positive "count"'
            )
        counts[fingerprint] = counts.get(fingerprint, 0) + count
    return Baseline(path, counts)


def baseline_document(findings: Iterable[Finding]) -> dict[str, Any]:
    """The baseline for these findings: one entry per fingerprint with its count, sorted."""
    counts: Counter[str] = Counter()
    shown: dict[str, tuple[str, str, str]] = {}  # fingerprint -> (code, source, message), for readers
    for finding in findings:
        if finding.fingerprint is None:
            continue
        counts[finding.fingerprint] += 1
        example = (finding.code, finding.source, finding.message)
        # The smallest example, not the first: the file stays the same when rows are re-ordered.
        if finding.fingerprint not in shown or example < shown[finding.fingerprint]:
            shown[finding.fingerprint] = example
    entries = [
        {
            "code": shown[fingerprint][0],
            "fingerprint": fingerprint,
            "count": count,
            "source": shown[fingerprint][1],
            "message": shown[fingerprint][2],
        }
        for fingerprint, count in counts.items()
    ]
    entries.sort(key=lambda entry: (entry["code"], entry["fingerprint"]))
    return {"_comment": _HEADER, "version": BASELINE_VERSION, "findings": entries}


def write_baseline(path: str, findings: Iterable[Finding]) -> int:
    """Write the baseline atomically; returns how many findings it records."""
    from vlmlint.fileio import write_atomic
    from vlmlint.report.safe import dumps_safe

    document = baseline_document(findings)
    # dumps_safe: a source or message may hold a file name's non-UTF-8 bytes (shown as \xNN).
    write_atomic(path, dumps_safe(document, option=orjson.OPT_INDENT_2) + b"\n")
    return sum(entry["count"] for entry in document["findings"])
