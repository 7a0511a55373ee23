"""docs/reliability.md shows what the hardening tests observe (this file runs after them: zz)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.hardening import reliability
from tests.hardening.conftest import DESELECTED

HERE = Path(__file__).parent
REGENERATE = "run: python -m tests.hardening.reliability"


def _ran_every_hardening_test(request) -> bool:
    files = {Path(item.path).name for item in request.session.items}
    every = {path.name for path in HERE.glob("test_*.py")}
    return every <= files and not DESELECTED and request.session.testsfailed == 0


def test_reliability_doc_is_up_to_date(request):
    if os.environ.get(reliability.WRITE_ENV):
        pytest.skip("this session writes docs/reliability.md when it ends")
    assert reliability.DOC.is_file(), REGENERATE
    text = reliability.DOC.read_text(encoding="utf-8")
    committed = reliability.parse(text)
    stale = {key: outcome for key, outcome in reliability.RECORDS.items() if committed.get(key) != outcome}
    assert not stale, f"{REGENERATE}; these cases differ from the page: {stale}"
    if _ran_every_hardening_test(request):  # then the page holds exactly what was observed
        assert set(committed) == set(reliability.RECORDS), REGENERATE
        assert text == reliability.render(reliability.RECORDS), REGENERATE


def test_parse_reads_back_what_render_writes():
    records = {("images", "a case"): 'VLM201 "a message"', ("paths", "b"): "read; no finding"}
    assert reliability.parse(reliability.render(records)) == records
