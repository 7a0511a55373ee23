"""qwen-vl-utils' per-image settings (max_pixels, min_pixels, resized_height / resized_width on an image
part) against fetch_image itself, as recorded by fixtures/qwen_vl_utils_record.py (qwen-vl-utils 0.0.14):
the size it resizes each image to, or its refusal; and the Qwen-VL count of a scanned row built on it.
tests/test_fixtures.py proves the whole rows of fixtures/datasets/layouts21_qwen_vl_utils against the
real Qwen processors given the images fetch_image returns."""

from __future__ import annotations

import json

import pytest

from tests.conftest import DATASETS, FIXTURES, PROCESSORS
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError
from vlmlint.models.qwen_vl import fetch_image_size
from vlmlint.readers import iter_samples
from vlmlint.records import ImageSizing

RECORDS = json.loads((FIXTURES / "qwen_vl_utils_sizes.json").read_text())


def recorded_size(height: int, width: int, sizing: dict, factor: int) -> list[int] | None:
    """fetch_image's [height, width] for this image and settings (None: it raises); KeyError if unrecorded."""
    for case in RECORDS["cases"]:
        if (case["size"], case["sizing"], case["factor"]) == ([height, width], sizing, factor):
            return case.get("resized")
    raise KeyError((height, width, sizing, factor))


@pytest.mark.parametrize("case", RECORDS["cases"], ids=lambda c: f"{c['size']}-{c['sizing']}-{c['factor']}")
def test_fetch_image_size_is_qwen_vl_utils(case):
    sizing = ImageSizing(**case["sizing"])
    if "error" in case:
        with pytest.raises(CountError):
            fetch_image_size(*case["size"], sizing, case["factor"])
    else:
        assert list(fetch_image_size(*case["size"], sizing, case["factor"])) == case["resized"]


def test_the_scan_counts_the_image_qwen_vl_utils_gives_the_processor():
    scanner = Scanner(ScanConfig(dataset="", model=str(PROCESSORS / "qwen2-vl")))
    outcomes = list(scanner.scan_samples(iter_samples(str(DATASETS / "layouts21_qwen_vl_utils"))))
    tokens = [outcome.result.image_tokens for outcome in outcomes]
    # 640x480 at max_pixels 3136: fetch_image gives 56x28, the processor's min_pixels 3136 then 84x56: 6
    # tokens (without the setting: 391).
    assert tokens[0] == [6]
    assert tokens[2] == [150]  # resized_height 280, resized_width 420: 10 x 15 merged patches
    assert tokens[3] == [77]  # no setting: the processor's own count of 300x200


def test_other_families_and_trainer_pipelines_ignore_the_settings():
    model = str(PROCESSORS / "qwen2-vl")
    trl = Scanner(ScanConfig(dataset="", model=model, pipeline="trl"))
    first = next(iter(trl.scan_samples(iter_samples(str(DATASETS / "layouts21_qwen_vl_utils")))))
    assert first.result.image_tokens == [391]  # the processor's own smart_resize of 640x480
