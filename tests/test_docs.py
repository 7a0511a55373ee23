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


def test_every_family_has_its_page_in_the_models_overview():
    """docs/models/README.md's table links each registry family's page (docs/models/<module>.md)."""
    from vlmlint.models.registry import FAMILIES

    overview = (ROOT / "docs" / "models" / "README.md").read_text(encoding="utf-8")
    for family in FAMILIES:
        module = family.settings_from.__module__.rsplit(".", 1)[1]
        assert (ROOT / "docs" / "models" / f"{module}.md").is_file(), (
            f"{family.name}: no docs/models/{module}.md"
        )
        assert f"({module}.md)" in overview and family.title in overview, (
            f"{family.name} not in docs/models/README.md"
        )
