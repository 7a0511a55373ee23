"""Everything about a model family lives in its module: no family name is compared outside vlmlint/models/.

The rest of the code asks the family (its hooks on the Family record) instead of testing its name, so a
new family is its module plus one registry line. A family whose name is also a reader layout ("llava")
is flagged only where the other side of the comparison is about a family.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator
from pathlib import Path

from vlmlint.models.base import Family
from vlmlint.models.registry import FAMILIES
from vlmlint.readers.layouts import LAYOUTS

PACKAGE = Path(__file__).resolve().parent.parent / "vlmlint"
# Registered family names, as written ("qwen-vl") and as their module is named ("qwen_vl").
FAMILY_NAMES = frozenset(
    {family.name for family in FAMILIES}
    | {family.name.replace("-", "_") for family in FAMILIES}
    | {"fallback"}
)
HOOKS = (
    "settings_from",
    "count",
    "count_exact",
    "expand",
    "compose",
    "position_span",
    "count_row",
    "size_knob",
    "choose_trainer_template",
    "resized_copies",
    "shrink_hint",
)


def _strings(node: ast.AST) -> Iterator[str]:
    """The string constants of a comparison operand: itself, or the items of a literal collection."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        for item in node.elts:
            yield from _strings(item)
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("frozenset", "set")
    ):
        for arg in node.args:
            yield from _strings(arg)


def _about_a_family(node: ast.AST) -> bool:
    return any(
        (isinstance(n, ast.Name) and "famil" in n.id.lower())
        or (isinstance(n, ast.Attribute) and "famil" in n.attr.lower())
        for n in ast.walk(node)
    )


def family_name_comparisons(source: str) -> list[tuple[int, str]]:
    """(line, name) of each comparison of a family name string in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            # A list of families by name (MROPE_FAMILIES = ("qwen-vl",)) compared elsewhere.
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and "famil" in t.id.lower() for t in targets):
                found.extend((node.lineno, value) for value in _strings(node.value) if value in FAMILY_NAMES)
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        about_family = any(_about_a_family(operand) for operand in operands)
        for operand in operands:
            for value in _strings(operand):
                if value in FAMILY_NAMES and (value not in LAYOUTS or about_family):
                    found.append((node.lineno, value))
    return found


def test_no_family_name_is_compared_outside_models():
    offences = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: compares the family name {name!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "models" not in path.relative_to(PACKAGE).parts
        for line, name in family_name_comparisons(path.read_text(encoding="utf-8"))
    ]
    assert not offences, "ask the Family record (a hook in models/base.py) instead:\n" + "\n".join(offences)


def test_the_check_sees_a_family_name_comparison():
    assert family_name_comparisons('if context.family == "gemma3":\n    pass\n') == [(1, "gemma3")]
    assert family_name_comparisons('x = name in ("qwen-vl", "idefics3")\n') == [
        (1, "qwen-vl"),
        (1, "idefics3"),
    ]
    assert family_name_comparisons('x = model.family.name != "llava"\n') == [(1, "llava")]
    assert family_name_comparisons('x = layout == "llava"\n') == []  # a reader layout, not a family
    assert family_name_comparisons('MROPE_FAMILIES = ("qwen-vl",)\n') == [(1, "qwen-vl")]
    assert family_name_comparisons('_SPANS = frozenset({"idefics3"})\n') == []  # not named as families


def test_every_family_hook_is_a_callable_or_none():
    assert {f.name for f in dataclasses.fields(Family) if f.name in HOOKS} == set(HOOKS)
    for family in FAMILIES:
        for hook in HOOKS:
            value = getattr(family, hook)
            assert value is None or callable(value), f"{family.name}.{hook} is {value!r}"
        assert all(isinstance(names, tuple) for names in family.trainer_templates.values()), family.name
        assert all(isinstance(token, str) and token for token in family.marker_tokens), family.name


def test_every_family_says_why_it_has_no_size_knob_or_has_one():
    for family in FAMILIES:
        assert family.size_knob is not None, f"{family.name} has no size_knob hook"


def test_the_registry_names_each_family_once():
    names = [family.name for family in FAMILIES]
    assert len(names) == len(set(names))
