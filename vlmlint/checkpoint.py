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
import stat
import time
from array import array
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from vlmlint.aggregate import Summary
from vlmlint.fileio import write_atomic
from vlmlint.records import Finding, Severity
from vlmlint.report.safe import dumps_safe
from vlmlint.version import __version__

_SAVE_EVERY_SECONDS = 5.0
FORMAT_VERSION = 1
MAX_CHECKPOINT_BYTES = 256 * 2**20  # the state file: totals and length arrays (8 bytes a row, base64)
MAX_LOG_LINE_BYTES = 1 * 2**20  # one finding in the log; a longer line is not vlmlint's


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

    def resume(self, summary: Summary, datasets: int | None = None) -> Position:
        """Restore `summary` from a matching checkpoint; Position(0, 0) when there is none to resume.

        A checkpoint file may have been edited or damaged: everything in it is checked (types, ranges,
        and the totals against the findings log they claim to describe) before anything is restored;
        one that does not hold together is a CheckpointError, never a crash or a wrong total.
        `datasets`: how many datasets this scan has (the position must lie within them).
        """
        state = self._read_state()
        if not isinstance(state, dict):
            if state is not None:
                raise self._invalid("not a JSON object")
            self._start_log(truncate_to=0)
            return Position(0, 0)
        if state.get("key") != self.key or state.get("format") != FORMAT_VERSION:
            self._start_log(truncate_to=0)  # another scan's checkpoint: overwritten
            return Position(0, 0)
        size, position, totals = self._validated(state, datasets)
        log_codes, log_severities, log_lines = self._read_log(size)
        # The totals must describe the log they come with: a tampered count would give wrong totals.
        if log_codes != totals["by_code"] or log_severities != totals["by_severity"]:
            raise self._invalid(f"its finding counts do not match {self.findings_path}")
        if totals["samples_with_findings"] > min(totals["samples"], log_lines):
            raise self._invalid("more rows with findings than rows or findings")
        if (not log_lines) != (not totals["samples_with_findings"]):
            raise self._invalid("rows with findings but no findings, or findings but no such rows")
        if len(totals["seq_lens"]) > totals["samples"]:
            raise self._invalid("more sequence lengths than rows")
        if position.rows > totals["samples"] or (
            position.dataset_index == 0 and position.rows != totals["samples"]
        ):
            raise self._invalid("its position does not match its row count")
        summary.samples = totals["samples"]
        summary.samples_with_findings = totals["samples_with_findings"]
        summary.by_code = Counter(totals["by_code"])
        summary.by_severity = Counter(totals["by_severity"])
        summary.seq_lens = totals["seq_lens"]
        summary.image_tokens = totals["image_tokens"]
        summary.media_rows, summary.videos, summary.audios = totals["media"]
        summary.video_tokens = totals["video_tokens"]
        summary.video_modes = Counter(totals["video_modes"])
        self.restored_findings_rows = totals["samples_with_findings"]
        self._restored_size = size
        self._start_log(truncate_to=size)
        summary.restored = self.restored_findings  # earlier findings come first in every report
        return position

    def _invalid(self, why: str) -> CheckpointError:
        return CheckpointError(
            f"{self.path}: not a valid vlmlint checkpoint ({why}); delete it and "
            f"{os.path.basename(self.findings_path)} to start over"
        )

    def _validated(self, state: dict[str, Any], datasets: int | None):
        """(findings_bytes, Position, totals) from the state, every field checked."""

        def count(value: Any, what: str) -> int:
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**63:
                raise self._invalid(f"{what} is not a count")
            return value

        def table(value: Any, what: str, keys: Sequence[str] | None = None) -> Counter:
            if not isinstance(value, dict):
                raise self._invalid(f"{what} is not a table")
            if keys is not None and not set(value) <= set(keys):
                raise self._invalid(f"{what} holds an unknown key")
            return Counter({str(k): count(v, what) for k, v in value.items() if v})

        def lengths(value: Any, what: str) -> array:
            try:
                return _array(value)
            except (TypeError, ValueError) as exc:  # not text, not base64, not whole 8-byte values
                raise self._invalid(f"{what}: {exc}") from None

        size = count(state.get("findings_bytes"), "findings_bytes")
        where = state.get("position")
        if not isinstance(where, dict):
            raise self._invalid("no position")
        position = Position(
            count(where.get("dataset_index"), "dataset_index"), count(where.get("rows"), "rows")
        )
        if datasets is not None and (
            position.dataset_index > datasets or (position.dataset_index == datasets and position.rows)
        ):
            raise self._invalid(f"dataset {position.dataset_index + 1} of a scan of {datasets}")
        totals = state.get("summary")
        if not isinstance(totals, dict):
            raise self._invalid("no summary")
        media = totals.get("media_not_counted", {})
        if not isinstance(media, dict):
            raise self._invalid("media_not_counted is not a table")
        checked = {
            "samples": count(totals.get("samples"), "samples"),
            "samples_with_findings": count(totals.get("samples_with_findings"), "samples_with_findings"),
            "by_code": table(totals.get("by_code"), "by_code"),
            "by_severity": table(totals.get("by_severity"), "by_severity", [s.value for s in Severity]),
            "seq_lens": lengths(totals.get("seq_lens"), "seq_lens"),
            "image_tokens": lengths(totals.get("image_tokens"), "image_tokens"),
            "media": tuple(count(media.get(k, 0), f"media {k}") for k in ("rows", "videos", "audios")),
            # (absent from checkpoints written before videos were counted: none were)
            "video_tokens": lengths(totals.get("video_tokens", ""), "video_tokens"),
            "video_modes": table(totals.get("video_modes", {}), "video_modes"),
        }
        return size, position, checked

    def _read_log(self, size: int) -> tuple[Counter, Counter, int]:
        """Codes and severities of the log's first `size` bytes, each line checked as a finding."""
        try:
            handle = os.open(self.findings_path, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            handle = None
        except OSError as exc:
            raise self._invalid(f"{self.findings_path}: {exc.strerror or exc}") from None
        if handle is None or not stat.S_ISREG(os.fstat(handle).st_mode) or os.fstat(handle).st_size < size:
            if handle is not None:
                os.close(handle)
            raise CheckpointError(
                f"{self.findings_path}: missing, not a file or shorter than {self.path} says; "
                "delete both to start over"
            )
        codes: Counter = Counter()
        severities: Counter = Counter()
        lines = 0
        with os.fdopen(handle, "rb") as log:
            consumed = 0
            while consumed < size:
                line = log.readline(min(MAX_LOG_LINE_BYTES, size - consumed) + 1)
                consumed += len(line)
                if not line.endswith(b"\n") or consumed > size:
                    raise self._invalid(
                        f"{self.findings_path}: a line is cut or longer than {MAX_LOG_LINE_BYTES:,} bytes"
                    )
                try:
                    finding = _finding(orjson.loads(line))
                except (orjson.JSONDecodeError, TypeError, ValueError, KeyError, AttributeError) as exc:
                    raise self._invalid(
                        f"{self.findings_path} line {lines + 1}: {type(exc).__name__}"
                    ) from None
                codes[finding.code] += 1
                severities[finding.severity.value] += 1
                lines += 1
        return codes, severities, lines

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

    def _read_state(self) -> Any:
        from vlmlint.fileio import OutputError, read_checked

        try:
            data = read_checked(self.path, MAX_CHECKPOINT_BYTES, "--resume")
        except FileNotFoundError:
            return None
        except OutputError as exc:
            if not os.path.lexists(self.path):
                return None  # no checkpoint yet: this scan starts one
            raise CheckpointError(f"{exc}; --resume takes a regular file (made if missing)") from None
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise CheckpointError(
                f"{self.path}: not a vlmlint checkpoint ({exc}); delete it to start over"
            ) from None

    def _start_log(self, truncate_to: int) -> None:
        folder = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(folder):
            raise CheckpointError(f"--resume: folder {folder} does not exist")
        # O_NONBLOCK and fstat: a FIFO or a device in the log's place is refused, never waited on.
        try:
            handle = os.open(
                self.findings_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o666
            )
        except OSError as exc:
            raise CheckpointError(f"--resume: {self.findings_path}: {exc.strerror or exc}") from None
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            os.close(handle)
            raise CheckpointError(f"--resume: {self.findings_path}: not a regular file")
        os.set_blocking(handle, True)
        self._log = os.fdopen(handle, "ab")
        self._log.truncate(truncate_to)
        self._log.seek(truncate_to)
        self._committed = truncate_to

    # -- recording --------------------------------------------------------------------------------

    def record(self, findings: Sequence[Finding]) -> None:
        """Log a row's findings (after any baseline filtering), as the report will hold them."""
        if findings:
            # dumps_safe: a source may hold a file name's non-UTF-8 bytes (shown as \xNN).
            self._log.write(b"".join(dumps_safe(f.to_dict()) + b"\n" for f in findings))

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
                "video_tokens": base64.b64encode(summary.video_tokens.tobytes()).decode(),
                "video_modes": dict(summary.video_modes),
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


_TEXT_FIELDS = ("code", "name", "message", "fix", "source")


def _finding(record: Any) -> Finding:
    """A finding of the log, its fields' types checked (a renderer must not meet a number as a message)."""
    if not isinstance(record, dict):
        raise TypeError("not an object")
    if not all(isinstance(record.get(name), str) for name in _TEXT_FIELDS):
        raise TypeError("a text field is not text")
    for name, optional in (("line", True), ("index", False)):
        value = record.get(name)
        if not (isinstance(value, int) and not isinstance(value, bool)) and not (optional and value is None):
            raise TypeError(f"{name} is not a number")
    return Finding.from_dict(record)


def _array(encoded: str) -> array:
    if not isinstance(encoded, str):
        raise TypeError("not text")
    values = array("q")
    values.frombytes(base64.b64decode(encoded, validate=True))  # ValueError: not whole 8-byte values
    return values
