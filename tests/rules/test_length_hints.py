"""The length rules' fix hints are honest: applying the suggested max_pixels makes the finding go away."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from PIL import Image

from tests.conftest import PROCESSORS
from vlmlint.config import THRESHOLD_DEFAULTS, ScanConfig
from vlmlint.engine import Scanner
from vlmlint.rules.lengths import largest_cap


def test_largest_cap():
    assert largest_cap([234], 91) == 91
    assert largest_cap([234] * 20, 4017) == 200  # 20 * 200 = 4000 <= 4017 < 20 * 201
    assert largest_cap([10, 500], 300) == 290  # the small image keeps its 10 tokens
    assert largest_cap([10, 500], 1000) == 500  # already fits
    assert largest_cap([10, 500], 1) == 0  # not even one token per image
    assert largest_cap([], 100) == 0


def _dataset(folder: Path, sizes: list[tuple[int, int]], prompt: str = "Compare them.") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for position, (width, height) in enumerate(sizes):
        names.append(f"{position}.png")
        Image.new("RGB", (width, height), (40, 80, 120)).save(folder / names[-1])
    row = {
        "id": "1",
        "image": names,
        "conversations": [
            {"from": "human", "value": "<image>" * len(names) + "\n" + prompt},
            {"from": "gpt", "value": "They are alike."},
        ],
    }
    (folder / "data.jsonl").write_text(json.dumps(row) + "\n")
    return folder / "data.jsonl"


def _processor(tmp_path: Path, **pixels: int) -> Path:
    folder = tmp_path / "processor"
    if not folder.exists():
        shutil.copytree(PROCESSORS / "qwen2-vl-small", folder)
    config_path = folder / "preprocessor_config.json"
    config = json.loads(config_path.read_text())
    config.pop("size", None)
    config.update(pixels)
    config_path.write_text(json.dumps(config))
    return folder


def _findings(manifest: Path, model: Path, code: str, **options):
    thresholds = {**THRESHOLD_DEFAULTS, **options.pop("thresholds", {})}
    config = ScanConfig(dataset=str(manifest), model=str(model), thresholds=thresholds, **options)
    return [f for outcome in Scanner(config).scan() for f in outcome.findings if f.code == code]


def _suggested(fix: str) -> dict[str, int]:
    return {key: int(value) for key, value in re.findall(r"(max_pixels|min_pixels) <= (\d+)", fix)}


@pytest.mark.parametrize(
    "code,sizes,options",
    [
        ("VLM401", [(640, 480)], {"max_length": 120}),
        ("VLM401", [(640, 480), (50, 50), (1280, 720)], {"max_length": 300}),
        ("VLM402", [(640, 480), (300, 900)], {"max_length": 250}),
        ("VLM404", [(640, 480)] * 20, {}),
        ("VLM404", [(1280, 720)] * 16 + [(28, 28)] * 8, {}),
        ("VLM405", [(640, 480)] * 16, {}),
        ("VLM406", [(640, 480)], {"thresholds": {"max_image_tokens_per_image": 100}}),
        ("VLM406", [(640, 480), (1000, 500)], {"thresholds": {"max_image_tokens_per_row": 300}}),
    ],
)
def test_the_suggested_max_pixels_clears_the_finding(tmp_path, code, sizes, options):
    manifest = _dataset(tmp_path / "data", sizes)
    original = _processor(tmp_path)
    found = _findings(manifest, original, code, **dict(options))
    assert len(found) == 1, [f.message for f in found]
    suggestion = _suggested(found[0].fix)
    assert "max_pixels" in suggestion, found[0].fix
    assert _findings(manifest, _processor(tmp_path, **suggestion), code, **dict(options)) == []


def test_a_small_min_pixels_is_named_too(tmp_path):
    """With min_pixels above the suggested max_pixels, small images would be upscaled past it."""
    manifest = _dataset(tmp_path / "data", [(56, 56)] * 10)
    model = _processor(tmp_path, min_pixels=200704)  # every image upscaled to 256 tokens
    found = _findings(manifest, model, "VLM401", max_length=1000)
    suggestion = _suggested(found[0].fix)
    assert set(suggestion) == {"max_pixels", "min_pixels"}, found[0].fix
    assert _findings(manifest, _processor(tmp_path, **suggestion), "VLM401", max_length=1000) == []


def test_no_image_setting_fits_when_the_text_alone_is_too_long(tmp_path):
    manifest = _dataset(tmp_path / "data", [(640, 480)], prompt="Compare them. " * 40)
    found = _findings(manifest, _processor(tmp_path), "VLM401", max_length=60)
    assert "no image setting fits it" in found[0].fix and "max_pixels" not in found[0].fix


def test_do_resize_false_asks_for_resized_files(tmp_path):
    manifest = _dataset(tmp_path / "data", [(560, 420)])
    model = _processor(tmp_path, do_resize=False)
    found = _findings(manifest, model, "VLM401", max_length=200)
    assert "resize the images beforehand" in found[0].fix and "do_resize is false" in found[0].fix
