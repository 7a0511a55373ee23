"""Reports: findings and summaries -> text, JSON and JSONL. Writers return strings or write to a stream."""

from vlmlint.report.json_report import build_report, row_record, write_report_file
from vlmlint.report.summary import Summary, percentiles

__all__ = ["Summary", "build_report", "percentiles", "row_record", "write_report_file"]
