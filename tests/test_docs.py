"""The rules reference in docs/ is generated from the rules and must be current."""

from tests.conftest import ROOT
from vlmlint.docs import render_rules
from vlmlint.rules import ALL_RULES, RULES_BY_CODE


def test_rules_doc_is_up_to_date():
    assert (ROOT / "docs" / "rules.md").read_text(encoding="utf-8") == render_rules(), (
        "run: python -m vlmlint.docs"
    )


def test_codes_and_names_are_unique():
    assert len(RULES_BY_CODE) == len(ALL_RULES)
    assert len({rule.name for rule in ALL_RULES}) == len(ALL_RULES)
