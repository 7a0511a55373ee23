"""Findings beyond the in-memory rows spill to disk; the JSON report streams them; nothing changes."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import DATASETS, PROCESSORS
from vlmlint.config import build_config
from vlmlint.engine import Scanner
from vlmlint.report import Summary, build_report
from vlmlint.report.json_report import FindingsView, dumps, iter_report_bytes

MODEL = str(PROCESSORS / "qwen2-vl")


def _summaries(keep_rows: int):
    config = build_config(str(DATASETS / "catalogue"), {}, {"model": MODEL, "jobs": 1})
    spilled, kept = Summary(keep_rows=keep_rows), Summary()
    for outcome in Scanner(config).scan():
        spilled.add(outcome)
        kept.add(outcome)
    return spilled, kept


def test_spilled_findings_equal_kept_ones():
    spilled, kept = _summaries(keep_rows=3)
    assert spilled.spilled_rows > 0 and len(spilled.flagged) == 3
    assert spilled.findings == kept.findings  # same findings, same order
    assert list(spilled.iter_findings()) == list(spilled.iter_findings())  # re-iterable
    assert spilled.to_dict() == kept.to_dict()
    first = build_report(spilled, {"name": "m"}, {"dataset": "d"})
    second = build_report(kept, {"name": "m"}, {"dataset": "d"})
    assert b"".join(iter_report_bytes(first)) == b"".join(iter_report_bytes(second))
    assert len(first["findings"]) == len(list(first["findings"])) == sum(kept.by_code.values())
    spilled.close()


def test_streamed_report_is_orjsons_indented_json():
    summary, _ = _summaries(keep_rows=2)
    report = build_report(summary, {"name": "m", "nested": {"a": [1, 2]}}, {"dataset": "d"})
    materialized = {**report, "findings": list(report["findings"])}
    assert b"".join(iter_report_bytes(report)) == dumps(materialized)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.text(max_size=5),
        st.recursive(
            st.none() | st.booleans() | st.integers(-(2**60), 2**60) | st.text(max_size=8),
            lambda inner: (
                st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
            ),
            max_leaves=8,
        ),
        max_size=5,
    )
)
def test_stream_writer_equals_orjson_on_any_report_shape(data):
    assert b"".join(iter_report_bytes(data)) == dumps(data)


def test_empty_findings_view():
    report = {"a": 1, "findings": FindingsView(Summary())}
    assert orjson.loads(b"".join(iter_report_bytes(report))) == {"a": 1, "findings": []}
    assert b"".join(iter_report_bytes(report)) == dumps({"a": 1, "findings": []})
