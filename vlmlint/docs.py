"""Generate docs/rules.md from the rules' own docstrings (`python -m vlmlint.docs`)."""

from __future__ import annotations

import sys
from pathlib import Path

from vlmlint.rules import ALL_RULES

HEADER = """# Rules

Generated from the rules' docstrings by `python -m vlmlint.docs`; do not edit by hand.

Severities: **error** (the run will crash or the row silently loses training signal), **warning**
(risky), **info**. `--fail-on` chooses the lowest severity that makes `vlmlint scan` exit 1.

| code | name | severity | finds |
|---|---|---|---|
"""


def render_rules() -> str:
    lines = [HEADER]
    for rule in ALL_RULES:
        lines.append(
            f"| [{rule.code}](#{rule.code.lower()}-{rule.name}) | {rule.name} | {rule.severity.value} | {rule.summary()} |\n"
        )
    for rule in ALL_RULES:
        body = rule.documentation().split("\n", 1)
        lines.append(f"\n## {rule.code} {rule.name}\n\nDefault severity: **{rule.severity.value}**.\n\n")
        lines.append(body[0] + "\n" + (body[1] if len(body) > 1 else "") + "\n")
    return "".join(lines)


def main(argv: list[str] | None = None) -> int:
    target = Path((argv or sys.argv[1:] or ["docs/rules.md"])[0])
    target.write_text(render_rules(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
