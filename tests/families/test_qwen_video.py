"""Qwen-VL videos against the real Qwen2VLVideoProcessor / Qwen3VLVideoProcessor recorded outputs
(fixtures/reference/qwen_video.json, recorded in the reference venv): the video_grid_thw of each clip,
its <|video_pad|> and <|vision_start|> counts and the whole input_ids length of a prompt with it (Qwen3-VL's
"<t seconds>" timestamps are text tokens there), or the processor's refusal; and the video settings read
from the fixture folders as AutoVideoProcessor reads them."""

from __future__ import annotations

import dataclasses

import pytest

from fixtures.reference import _records, qwen_video
from tests.conftest import PROCESSORS
from tests.families._video import clip_meta, prompt_length
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError, load_model, qwen_vl
from vlmlint.models.base import VideoCount

RECORDS = _records.load("qwen_video")
CASES = RECORDS["cases"]
PROMPT = qwen_video.PROMPT

pytestmark = pytest.mark.skipif(
    _records.version_mismatch("qwen_video") is not None, reason=str(_records.version_mismatch("qwen_video"))
)


@pytest.fixture(scope="module")
def scanners():
    cache: dict[str, Scanner] = {}

    def get(folder: str) -> Scanner:
        if folder not in cache:
            cache[folder] = Scanner(ScanConfig(dataset="", model=str(PROCESSORS / folder)))
        return cache[folder]

    return get


def with_kwargs(settings: qwen_vl.QwenVideoSettings, kwargs: dict) -> qwen_vl.QwenVideoSettings:
    """The call kwargs a case passes, as the processor merges them over its own settings."""
    changes = {
        key: kwargs[key]
        for key in ("do_sample_frames", "fps", "num_frames", "cap_pixels_per_frame")
        if key in kwargs
    }
    if "size" in kwargs:
        changes["min_pixels"] = kwargs["size"]["shortest_edge"]
        changes["max_pixels"] = kwargs["size"]["longest_edge"]
    return dataclasses.replace(settings, **changes)


meta = clip_meta  # (tests/reference imports it by this name)


def row_length(scanner: Scanner, video: VideoCount) -> int:
    """The recorder's prompt with the video composed and tokenized."""
    return prompt_length(scanner, PROMPT, (video,))


def test_video_settings_come_from_the_folder_as_transformers_reads_them():
    """No video_preprocessor_config.json: the video processor reads preprocessor_config.json (its
    min_pixels / max_pixels), over Qwen2VLVideoProcessor's class defaults."""
    model = load_model(str(PROCESSORS / "qwen2-vl"))
    assert model.video_refusal is None
    assert model.video_settings == qwen_vl.QwenVideoSettings(
        processor="Qwen2VLVideoProcessor", patch_size=14, merge_size=2, temporal_patch_size=2,
        min_pixels=3136, max_pixels=12845056, do_resize=True, do_sample_frames=False, fps=None,
        num_frames=None, min_frames=4, max_frames=768, cap_pixels_per_frame=False, max_video_tokens=128000,
    )  # fmt: skip


@pytest.mark.parametrize(
    "case",
    CASES,
    ids=lambda c: (
        f"{c['folder']}-{c['frames']}f-{c['size'][0]}x{c['size'][1]}-{c['fps']:.3g}{c['kwargs'] or ''}"
    ),
)
def test_formula_matches_the_real_video_processor(case, scanners):
    scanner = scanners(case["folder"])
    settings = with_kwargs(scanner.model.video_settings, case["kwargs"])
    result = case["result"]
    if "error" in result:
        with pytest.raises(CountError):
            qwen_vl.count_video(meta(case), settings)
        return
    count = qwen_vl.count_video(meta(case), settings)
    assert list(count.grid) == result["grid"]
    assert count.tokens == result["video_tokens"]
    template_pair = (
        0 if qwen_vl.video_wrapper(settings) else 1
    )  # 5.25's Qwen3VLProcessor drops the template's
    assert template_pair + (count.grid[0] if settings.qwen3 else 0) == result["vision_start"]  # each group's
    scanner.model.video_settings = settings  # the expansion reads the model's video settings
    try:
        assert row_length(scanner, count) == result["input_ids"]
    finally:
        scanner.model.video_settings = load_model(str(PROCESSORS / case["folder"])).video_settings


def test_the_records_cover_sampling_modes_and_refusals():
    kinds = {tuple(sorted(case["kwargs"])) for case in CASES}
    assert {
        (),
        ("do_sample_frames", "fps"),
        ("do_sample_frames", "num_frames"),
        ("cap_pixels_per_frame",),
    } <= kinds
    assert sum("error" in case["result"] for case in CASES) >= 4
