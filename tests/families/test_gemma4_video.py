"""Gemma 4 videos against the real Gemma4VideoProcessor's recorded outputs (fixtures/reference/gemma4_video.json,
recorded in the reference venv through Gemma4Processor): each clip's kept frames, soft tokens per frame, its
<|video|> and <|image> counts, the MM:SS stamps of its text and the whole input_ids length of a prompt with
it, or the processor's refusal; and the video settings read as AutoVideoProcessor reads them."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from fixtures.reference import _records, gemma4_video
from tests.conftest import PROCESSORS
from tests.families.test_llava_onevision_video import write_clip
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError, gemma4, load_model
from vlmlint.models.base import Run, VideoCount
from vlmlint.records import VideoMeta

RECORDS = _records.load("gemma4_video")
CASES = RECORDS["cases"]
FOLDER = PROCESSORS / gemma4_video.FOLDER

pytestmark = pytest.mark.skipif(
    _records.version_mismatch("gemma4_video") is not None,
    reason=str(_records.version_mismatch("gemma4_video")),
)


@pytest.fixture(scope="module")
def scanner() -> Scanner:
    return Scanner(ScanConfig(dataset="", model=str(FOLDER)))


def with_config(settings: gemma4.Gemma4VideoSettings, config: dict) -> gemma4.Gemma4VideoSettings:
    """A case's video processor settings over the class defaults, as its file would give them."""
    return dataclasses.replace(settings, **config)


def meta(case: dict) -> VideoMeta:
    height, width = case["size"]
    if case.get("frame_list"):
        return VideoMeta(
            frames=case["frames"],
            fps=None,
            duration=None,
            width=width,
            height=height,
            frames_from="frame list",
        )
    fps = case["fps"]
    return VideoMeta(
        frames=case["frames"], fps=fps, duration=case["frames"] / fps, width=width, height=height
    )


def row_length(scanner: Scanner, video: VideoCount, settings: gemma4.Gemma4VideoSettings) -> int:
    """The recorder's prompt (the template's video slot and a text) composed and tokenized."""
    saved_settings = scanner.model.video_settings
    scanner.model.video_settings = settings  # the expansion reads the model's video settings
    try:
        composed, saved = scanner.encoder.compose(gemma4_video.PROMPT, [], videos=(video,))
    finally:
        scanner.model.video_settings = saved_settings
    ids = scanner.model.tokenizer(composed, add_special_tokens=scanner.model.family.add_special_tokens)
    return len(ids["input_ids"]) + saved


def test_video_settings_are_the_class_defaults_the_hub_ships():
    """The fixture folder has no video processor file: Gemma4VideoProcessor's class defaults (read from
    the transformers source through config.json's model_type), which are the hub's video_processor values."""
    model = load_model(str(FOLDER))
    assert model.video_refusal is None
    assert model.video_settings == gemma4.Gemma4VideoSettings(
        patch_size=16, pooling_kernel_size=3, max_soft_tokens=70, do_resize=True, do_sample_frames=True,
        num_frames=32, fps=None, boi_token="<|image>", eoi_token="<image|>",
    )  # fmt: skip


def test_a_nested_video_processor_section_is_read(tmp_path):
    """processor_config.json's `video_processor` (as the hub ships it) wins over the class defaults; an
    unsupported budget makes the model say why its videos are not counted."""
    folder = tmp_path / "gemma4"
    shutil.copytree(FOLDER, folder)
    config = json.loads((folder / "processor_config.json").read_text())
    config["video_processor"] = {
        "video_processor_type": "Gemma4VideoProcessor",
        "num_frames": 8,
        "max_soft_tokens": 140,
    }
    (folder / "processor_config.json").write_text(json.dumps(config))
    settings = load_model(str(folder)).video_settings
    assert (settings.num_frames, settings.max_soft_tokens, settings.do_sample_frames) == (8, 140, True)
    config["video_processor"]["max_soft_tokens"] = 100
    (folder / "processor_config.json").write_text(json.dumps(config))
    model = load_model(str(folder))
    assert model.video_settings is None and "max_soft_tokens" in model.video_refusal


def _id(case: dict) -> str:
    kind = "list" if case.get("frame_list") else f"{case['fps']:.3g}"
    return f"{case['frames']}f-{case['size'][0]}x{case['size'][1]}-{kind}{case['config'] or ''}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_formula_matches_the_real_video_processor(case, scanner):
    result = case["result"]
    config = case["config"]
    if config.get("max_soft_tokens", 70) not in gemma4.SUPPORTED_SOFT_TOKENS:
        with pytest.raises(CountError):  # Gemma4VideoProcessor.__init__ refuses it: so does the loader
            gemma4.video_settings_from(
                {"video_processor_type": "Gemma4VideoProcessor", **config},
                scanner.model.settings,
                "Gemma4Processor",
            )
        assert "error" in result
        return
    settings = with_config(scanner.model.video_settings, config)
    if "error" in result:
        with pytest.raises(CountError):
            gemma4.count_video(meta(case), settings)
        return
    count = gemma4.count_video(meta(case), settings)
    assert count.frames == result["frames"]
    assert count.tokens == result["video_tokens"]
    assert count.tokens // count.frames == result["soft_tokens_per_frame"]
    text = "".join(seg for seg in gemma4.expand_video(count, settings) if not isinstance(seg, Run))
    assert text.count("<|image>") == result["boi"]  # one per frame (the prompt has no image)
    assert [gemma4._stamp(t) for t in count.timestamps] == result["stamps"]
    assert row_length(scanner, count, settings) == result["input_ids"]


def test_the_records_cover_sampling_modes_budgets_and_refusals():
    kinds = {tuple(sorted(case["config"])) for case in CASES}
    assert {(), ("do_sample_frames",), ("fps", "num_frames"), ("num_frames",), ("fps",)} <= kinds
    assert {case["config"].get("max_soft_tokens", 70) for case in CASES} >= {70, 140, 280, 560, 1120, 100}
    assert sum("error" in case["result"] for case in CASES) >= 8
    assert any(case.get("frame_list") for case in CASES)
    assert any(
        int(stamp.split(":")[0]) >= 100 for case in CASES for stamp in case["result"].get("stamps", [])
    )


def test_the_expansion_is_the_processors_replacement_text():
    """replace_video_token's string for two frames at 0 s and 61.5 s, 3 soft tokens each."""
    count = VideoCount(2, 48, 48, (2, 3, 3), 6, "num_frames 2", (0.0, 61.5))
    settings = gemma4.Gemma4VideoSettings()
    text = "".join(
        seg.token * seg.count if isinstance(seg, Run) else seg for seg in gemma4.expand_video(count, settings)
    )
    assert (
        text == "00:00 <|image>" + "<|video|>" * 3 + "<image|> 01:01 <|image>" + "<|video|>" * 3 + "<image|>"
    )


def test_a_video_row_is_counted_end_to_end(tmp_path):
    """A row's <video>: read from the clip's header, rendered by the chat template, expanded and counted."""
    write_clip(tmp_path / "a.mp4", 40, 48, 64)
    rows = [{"messages": [{"role": "user", "content": "<video>Describe the video."},
                          {"role": "assistant", "content": "Nothing."}], "videos": ["a.mp4"]}]  # fmt: skip
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    scanner = Scanner(ScanConfig(dataset=str(tmp_path / "rows.jsonl"), model=str(FOLDER), jobs=1))
    (outcome,) = list(scanner.scan())
    result = outcome.result
    (info,) = result.media
    assert (info.tokens, info.sampled) == (32 * 63, 32)  # the [48, 64] records: 63 soft tokens a frame
    assert info.counted_by == "gemma4: num_frames 32"
    assert not result.lengths_lower_bound and "VLM109" not in {f.code for f in outcome.findings}
    rendered = scanner.encoder.render(result.sample.messages, videos=True)
    assert rendered.count("<|video|>") == 1
    count = gemma4.count_video(
        VideoMeta(frames=40, fps=4.0, duration=10.0, width=64, height=48), scanner.model.video_settings
    )
    composed, saved = scanner.encoder.compose(rendered, [], videos=(count,))
    assert result.seq_len == len(scanner.model.tokenizer(composed)["input_ids"]) + saved


def test_a_clip_shorter_than_num_frames_is_the_rows_count_error(tmp_path):
    write_clip(tmp_path / "a.mp4", 10, 48, 64)
    rows = [{"messages": [{"role": "user", "content": "<video>Describe."},
                          {"role": "assistant", "content": "No."}], "videos": ["a.mp4"]}]  # fmt: skip
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    scanner = Scanner(ScanConfig(dataset=str(tmp_path / "rows.jsonl"), model=str(FOLDER), jobs=1))
    (outcome,) = list(scanner.scan())
    assert outcome.result.seq_len is None
    assert any("num_frames=32" in finding.message for finding in outcome.findings)
