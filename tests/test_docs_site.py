"""The documentation site (mkdocs.yml, docs/) builds with `mkdocs build --strict`: no broken link, no
page left out of the nav, no link leaving docs/."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import yaml

from tests.conftest import ROOT


def test_site_builds_strict(tmp_path):
    pytest.importorskip(
        "mkdocs", reason="mkdocs is not installed: pip install -e '.[docs]' (make install does)"
    )
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "rules" / "index.html").is_file()


def _nav_files(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [f for value in node.values() for f in _nav_files(value)]
    return [f for item in node for f in _nav_files(item)]


def test_every_page_is_in_the_nav_and_no_link_leaves_docs():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    docs = ROOT / "docs"
    in_nav = set(_nav_files(config["nav"]))
    pages = {str(path.relative_to(docs)) for path in docs.rglob("*.md")}
    assert pages == in_nav
    link = re.compile(r"\]\((?!https?://|#|mailto:)([^)\s]+)\)")
    for page in pages:
        for target in link.findall((docs / page).read_text(encoding="utf-8")):
            resolved = (docs / page).parent.joinpath(target.split("#")[0]).resolve()
            assert resolved.is_relative_to(docs.resolve()), f"{page} links outside docs/: {target}"
