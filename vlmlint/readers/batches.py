"""Rows read but not parsed yet: the units a parallel scan hands to the process that scans them.

Why: turning a row into a Sample (JSON parsing, layout, image references) is most of a reader's
cost, and a Sample costs more to send to another process than the bytes it came from. With
`batch_rows`, the JSON, JSONL and table readers yield a RowBatch for each run of rows once the
source's layout is known (JSONL lines, or a JSON array's elements as compact JSON: LineBatch; an
Arrow record batch: TableBatch), and vlmlint/runner.py lets each worker parse its own. `samples()`
gives exactly the Samples the reader would have yielded one by one.
"""

from __future__ import annotations

from vlmlint.records import Sample


class RowBatch:
    """Rows of one source, parsed by whoever scans them."""

    def __len__(self) -> int:
        raise NotImplementedError

    def samples(self) -> list[Sample]:
        """Every row's Sample, in order."""
        raise NotImplementedError

    def sample(self, position: int) -> Sample:
        """One row's Sample (a parallel scan rebuilds a row it needs whole: --verify, a finding)."""
        raise NotImplementedError

    def split(self, count: int) -> tuple[RowBatch, RowBatch]:
        """The first `count` rows and the rest (--resume skips the rows already counted)."""
        raise NotImplementedError
