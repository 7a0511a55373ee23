"""The in-order stage every executor ends with, where rows are seen one by one in dataset order.

Rules that compare rows (Rule.compares_rows: duplicate ids) cannot run where only some rows are
seen (a worker process, a Ray actor): workers run the other rules, and this stage runs these on
every row in dataset order, merging their findings in rule order. Rows skipped by --resume are
shown to them too (they were reported before the interruption), and their findings pass the same
select/ignore and per-source-ignores filter (`keep`) as the workers' findings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from vlmlint.records import Finding, RowResult
from vlmlint.rules import Rule, RuleContext


class MergeStage:
    """Rules that compare rows, run in dataset order over what the executors return."""

    def __init__(self, rules: Sequence[Rule], context: RuleContext, keep: Callable[[Finding], bool]):
        self.comparing = [rule for rule in rules if rule.compares_rows]
        self.stateless_codes = tuple(rule.code for rule in rules if not rule.compares_rows)
        self._order = {rule.code: position for position, rule in enumerate(rules)}
        self._context = context
        self._keep = keep

    def reset(self) -> None:
        """Start afresh: a new scan."""
        for rule in self.comparing:
            rule.reset()

    def skip(self, result: RowResult) -> None:
        """A row counted before an interruption (--resume): the comparing rules see it, nothing is reported."""
        for rule in self.comparing:
            for _ in rule.check(result, self._context):
                pass

    def merge(self, result: RowResult, findings: tuple[Finding, ...]) -> tuple[Finding, ...]:
        """The row's findings from the other rules, with the comparing rules' findings in rule order."""
        if not self.comparing:
            return findings
        extra = tuple(
            finding
            for rule in self.comparing
            for finding in rule.check(result, self._context)
            if self._keep(finding)
        )
        if not extra:
            return findings
        return tuple(sorted(findings + extra, key=lambda f: self._order.get(f.code, 0)))
