"""Rule test cases kept as data (sqlfluff style): tests/rules/cases/<CODE>.yaml.

Each file names its rule and lists cases. A case writes its images and its rows into a temporary
dataset folder, scans it with a fixture processor, and counts the findings of that rule:

    rule: VLM303
    cases:
      - name: image placeholder in the answer
        expect: 1                    # findings of this rule; 0 makes it a passing case
        message_contains: "assistant"   # optional
        model: qwen2-vl-small        # optional fixture processor folder (default qwen2-vl-small)
        options: {max_length: 64}    # optional ScanConfig fields; thresholds: {name: value}
        images:                      # optional files beside the manifest
          a.jpg: {size: [640, 480]}  # also: mode, exif_orientation, frames, text (not an image),
                                     # hex (the file's raw bytes), truncate (keep this share of the
                                     # bytes), symlink_to, folder: true
        manifest: data.jsonl         # optional file name (default data.jsonl)
        row: {...}                   # one row, or `rows:` a list (a string is written as a raw line)
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from types import MappingProxyType

import pytest
import yaml
from PIL import Image

from tests.conftest import PROCESSORS
from vlmlint.config import THRESHOLD_DEFAULTS, ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import load_model
from vlmlint.rules import ALL_RULES

CASES_DIR = Path(__file__).parent / "cases"


def _load_cases():
    for path in sorted(CASES_DIR.glob("*.yaml")):
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
        for case in spec["cases"]:
            yield pytest.param(spec["rule"], case, id=f"{spec['rule']}-{case['name']}")


@cache
def _model(name: str):
    return load_model(str(PROCESSORS / name))


def _make_image(path: Path, spec: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if spec.get("folder"):
        path.mkdir()
        return
    if "symlink_to" in spec:
        os.symlink(spec["symlink_to"], path)
        return
    if "text" in spec:
        path.write_text(spec["text"])
        return
    if "hex" in spec:
        path.write_bytes(bytes.fromhex(spec["hex"]))
        return
    width, height = spec.get("size", [64, 48])
    mode = spec.get("mode", "RGB")
    image = Image.new(mode, (width, height))
    fmt = {".jpg": "JPEG", ".jpeg": "JPEG", ".png": "PNG", ".gif": "GIF", ".webp": "WEBP", ".tif": "TIFF"}[
        path.suffix.lower()
    ]
    kwargs = {}
    if "exif_orientation" in spec:
        exif = Image.Exif()
        exif[0x0112] = spec["exif_orientation"]
        kwargs["exif"] = exif.tobytes()
    if spec.get("frames", 1) > 1:
        frames = [Image.new(mode, (width, height), color=i * 40) for i in range(1, spec["frames"])]
        kwargs.update(save_all=True, append_images=frames)
    if mode == "P" and spec.get("transparency") is not None:
        kwargs["transparency"] = spec["transparency"]
    image.save(path, fmt, **kwargs)
    if "truncate" in spec:
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * spec["truncate"])])


def _write_rows(path: Path, case: dict) -> None:
    rows = case["rows"] if "rows" in case else [case["row"]]
    lines = [row if isinstance(row, str) else json.dumps(row) for row in rows]
    if path.suffix == ".json":
        path.write_text("[" + ",\n".join(lines) + "]")
    else:
        path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("code,case", list(_load_cases()))
def test_rule_case(code, case, tmp_path):
    dataset = tmp_path / "dataset"
    dataset.mkdir()
    for name, spec in (case.get("images") or {}).items():
        _make_image(dataset / name, spec or {})
    manifest = dataset / case.get("manifest", "data.jsonl")
    _write_rows(manifest, case)
    options = dict(case.get("options") or {})
    thresholds = {**THRESHOLD_DEFAULTS, **options.pop("thresholds", {})}
    for key in ("select", "ignore"):
        if key in options:
            options[key] = tuple(options[key])
    model_name = case.get("model", "qwen2-vl-small")
    config = ScanConfig(
        dataset=str(dataset if case.get("scan_folder") else manifest),
        model=str(PROCESSORS / model_name),
        thresholds=MappingProxyType(thresholds),
        **options,
    )
    scanner = Scanner(config, model=_model(model_name))
    found = [finding for outcome in scanner.scan() for finding in outcome.findings if finding.code == code]
    assert len(found) == case["expect"], [f.message for f in found]
    if "message_contains" in case:
        assert any(case["message_contains"] in f.message for f in found), [f.message for f in found]
    if "fix_contains" in case:
        assert any(case["fix_contains"] in f.fix for f in found), [f.fix for f in found]


def test_every_rule_has_a_failing_and_a_passing_case():
    by_rule: dict[str, list[int]] = {}
    for path in CASES_DIR.glob("*.yaml"):
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert path.stem == spec["rule"], f"{path.name} holds cases of {spec['rule']}"
        by_rule.setdefault(spec["rule"], []).extend(case["expect"] for case in spec["cases"])
    missing = [
        rule.code
        for rule in ALL_RULES
        if rule.code != "VLM901" and not (any(by_rule.get(rule.code, [])) and 0 in by_rule.get(rule.code, []))
    ]
    assert missing == [], f"rules without both a failing and a passing case: {missing}"
