"""The JSON report and SARIF name the transformers release the counts follow (issue 22)."""

from __future__ import annotations

import json

import transformers

from vlmlint.aggregate import Summary
from vlmlint.report.json_report import build_report
from vlmlint.report.sarif import sarif_log


def test_json_report_and_sarif_name_the_installed_transformers():
    report = build_report(Summary(), {"name": "m"}, {"dataset": "d"})
    assert report["transformers_version"] == transformers.__version__
    driver = sarif_log(json.loads(json.dumps(report, default=list)))["runs"][0]["tool"]["driver"]
    assert driver["properties"] == {"transformersVersion": transformers.__version__}


def test_a_report_without_it_gives_sarif_without_it():
    """A report written before the field (or by hand) still converts."""
    report = {"vlmlint_version": "0", "model": {}, "settings": {}, "summary": {}, "findings": []}
    assert "properties" not in sarif_log(report)["runs"][0]["tool"]["driver"]
