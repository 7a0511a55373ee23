"""--resume FILE: a long scan keeps a checkpoint; an interrupted one continues where it stopped.

Two files: FILE (JSON, rewritten atomically every few seconds) holds where the scan is (dataset,
rows done) and the running totals (counts, severities, the length distributions); FILE.findings
(JSONL, append-only) holds every finding so far, and FILE records how many of its bytes are committed.
On resume, a checkpoint whose key (vlmlint version, datasets, settings, model) matches this scan's is
loaded: the findings log is cut back to the committed size, the totals are restored, and the scan skips
the rows already done (they are still read, and rules that compare rows, such as duplicate ids, still see
them, but nothing is counted again). A checkpoint of another scan is ignored and overwritten.
A scan that completes removes both files. Nothing here prints or exits.
"""

from __future__ import annotations

import base64
import hashlib
import os
import time
from array import array
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from vlmlint import __version__
from vlmlint.report.json_report import write_atomic
from vlmlint.report.summary import Summary
from vlmlint.rules import Finding

_SAVE_EVERY_SECONDS = 5.0
FORMAT_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint file vlmlint cannot read; the message names it."""


def scan_key(datasets: Sequence[str], settings: dict[str, Any], model: dict[str, Any]) -> str:
    """What must be equal for a checkpoint to be resumed: the same scan of the same data."""
    material = orjson.dumps(
        {"version": __version__, "datasets": [os.path.abspath(d) for d in datasets],
         "settings": settings, "model": model},
        option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS,
        default=str,
    )  # fmt: skip
    return hashlib.sha256(material).hexdigest()


@dataclass(frozen=True)
class Position:
    dataset_index: int  # datasets before this one are done
    rows: int  # rows of this dataset already counted


class Checkpoint:
    def __init__(self, path: str, key: str) -> None:
        self.path = path
        self.key = key
        self.findings_path = path + ".findings"
        self._log = None
        self._last_save = 0.0
        self.restored_findings_rows = 0  # rows with findings that came from the checkpoint
        self._restored_size = 0
        self._committed = 0

    # -- resuming ---------------------------------------------------------------------------------

    def resume(self, summary: Summary) -> Position:
        """Restore `summary` from a matching checkpoint; Position(0, 0) when there is none to resume."""
        state = self._read_state()
        if state is None or state.get("key") != self.key or state.get("format") != FORMAT_VERSION:
            self._start_log(truncate_to=0)
            return Position(0, 0)
        size = int(state["findings_bytes"])
        if not os.path.isfile(self.findings_path) or os.path.getsize(self.findings_path) < size:
            raise CheckpointError(
                f"{self.findings_path}: shorter than {self.path} says; delete both to start over"
            )
        totals = state["summary"]
        summary.samples = totals["samples"]
        summary.samples_with_findings = totals["samples_with_findings"]
        summary.by_code = Counter(totals["by_code"])
        summary.by_severity = Counter(totals["by_severity"])
        summary.seq_lens = _array(totals["seq_lens"])
        summary.image_tokens = _array(totals["image_tokens"])
        media = totals.get("media_not_counted", {})
        summary.media_rows, summary.videos, summary.audios = (
            media.get(k, 0) for k in ("rows", "videos", "audios")
        )
        self.restored_findings_rows = totals["samples_with_findings"]
        self._restored_size = size
        self._start_log(truncate_to=size)
        summary.restored = self.restored_findings  # earlier findings come first in every report
        return Position(state["position"]["dataset_index"], state["position"]["rows"])

    def restored_findings(self) -> Iterator[Finding]:
        """The findings recorded before the resume, in dataset order (re-iterable)."""
        size = self._restored_size
        with open(self.findings_path, "rb") as log:
            consumed = 0
            for line in log:
                consumed += len(line)
                if consumed > size:
                    break
                yield Finding.from_dict(orjson.loads(line))

    def _read_state(self) -> dict[str, Any] | None:
        try:
            with open(self.path, "rb") as handle:
                return orjson.loads(handle.read())
        except FileNotFoundError:
            return None
        except (OSError, orjson.JSONDecodeError) as exc:
            raise CheckpointError(
                f"{self.path}: not a vlmlint checkpoint ({exc}); delete it to start over"
            ) from None

    def _start_log(self, truncate_to: int) -> None:
        folder = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(folder):
            raise CheckpointError(f"--resume: folder {folder} does not exist")
        self._log = open(self.findings_path, "ab")
        self._log.truncate(truncate_to)
        self._log.seek(truncate_to)
        self._committed = truncate_to

    # -- recording --------------------------------------------------------------------------------

    def record(self, findings: Sequence[Finding]) -> None:
        """Log a row's findings (after any baseline filtering), as the report will hold them."""
        if findings:
            self._log.write(b"".join(orjson.dumps(f.to_dict()) + b"\n" for f in findings))

    def maybe_save(self, summary: Summary, position: Position, force: bool = False) -> None:
        """Commit the log and the totals, at most every few seconds unless forced."""
        now = time.monotonic()
        if not force and now - self._last_save < _SAVE_EVERY_SECONDS:
            return
        self._last_save = now
        self._log.flush()
        os.fsync(self._log.fileno())
        self._committed = self._log.tell()
        state = {
            "format": FORMAT_VERSION,
            "key": self.key,
            "position": {"dataset_index": position.dataset_index, "rows": position.rows},
            "findings_bytes": self._committed,
            "summary": {
                "samples": summary.samples,
                "samples_with_findings": summary.samples_with_findings,
                "by_code": dict(summary.by_code),
                "by_severity": dict(summary.by_severity),
                "seq_lens": base64.b64encode(summary.seq_lens.tobytes()).decode(),
                "image_tokens": base64.b64encode(summary.image_tokens.tobytes()).decode(),
                "media_not_counted": {
                    "rows": summary.media_rows,
                    "videos": summary.videos,
                    "audios": summary.audios,
                },
            },
        }
        write_atomic(self.path, orjson.dumps(state))

    def close(self) -> None:
        """Stop logging; the files stay (the report still reads restored findings from the log)."""
        if self._log is not None:
            self._log.close()
            self._log = None

    def remove(self) -> None:
        """A completed scan leaves no checkpoint behind (an interrupted one keeps it for --resume)."""
        self.close()
        for path in (self.path, self.findings_path):
            if os.path.exists(path):
                os.unlink(path)


def _array(encoded: str) -> array:
    values = array("q")
    values.frombytes(base64.b64decode(encoded))
    return values
