"""LLaVA-OneVision videos against the real LlavaOnevisionVideoProcessor's recorded outputs
(fixtures/reference/llava_onevision_video.json, recorded in the reference venv): each clip's processed
frame count and size, its <video> count and the whole input_ids length of a prompt with it, or the
processor's refusal; and the video settings read from the fixture folder as AutoVideoProcessor reads them."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fixtures.reference import _records, llava_onevision_video
from tests.conftest import PROCESSORS
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError, llava_onevision, load_model
from vlmlint.models.base import VideoCount
from vlmlint.records import VideoMeta

RECORDS = _records.load("llava_onevision_video")
CASES = RECORDS["cases"]
FOLDER = PROCESSORS / llava_onevision_video.FOLDER

pytestmark = pytest.mark.skipif(
    _records.version_mismatch("llava_onevision_video") is not None,
    reason=str(_records.version_mismatch("llava_onevision_video")),
)


@pytest.fixture(scope="module")
def scanner() -> Scanner:
    return Scanner(ScanConfig(dataset="", model=str(FOLDER)))


def with_kwargs(
    settings: llava_onevision.OnevisionVideoSettings, kwargs: dict
) -> llava_onevision.OnevisionVideoSettings:
    """The call kwargs a case passes, as the processor merges them over its own settings."""
    return dataclasses.replace(
        settings, **{key: kwargs[key] for key in ("do_sample_frames", "fps", "num_frames") if key in kwargs}
    )


def meta(case: dict) -> VideoMeta:
    height, width = case["size"]
    fps = case["fps"]
    if case.get("frame_list"):
        return VideoMeta(
            frames=case["frames"],
            fps=None,
            duration=None,
            width=width,
            height=height,
            frames_from="frame list",
        )
    return VideoMeta(
        frames=case["frames"], fps=fps, duration=case["frames"] / fps, width=width, height=height
    )


def row_length(scanner: Scanner, video: VideoCount) -> int:
    """The recorder's prompt (the template's video slot and a text) composed and tokenized."""
    composed, saved = scanner.encoder.compose(llava_onevision_video.PROMPT, [], videos=(video,))
    ids = scanner.model.tokenizer(composed, add_special_tokens=scanner.model.family.add_special_tokens)
    return len(ids["input_ids"]) + saved


def test_video_settings_come_from_the_folder_as_transformers_reads_them():
    """No video_preprocessor_config.json: LlavaOnevisionVideoProcessor's class defaults under the image
    processor's preprocessor_config.json; num_image_tokens from processor_config.json."""
    model = load_model(str(FOLDER))
    assert model.video_refusal is None
    assert model.video_settings == llava_onevision.OnevisionVideoSettings(
        num_image_tokens=729, do_sample_frames=False, fps=None, num_frames=None, do_resize=True,
        size_height=384, size_width=384, shortest_edge=None,
    )  # fmt: skip
    assert model.video_settings.pooled == 14


def _id(case: dict) -> str:
    kind = "list" if case.get("frame_list") else f"{case['fps']:.3g}"
    return f"{case['frames']}f-{case['size'][0]}x{case['size'][1]}-{kind}{case['kwargs'] or ''}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_formula_matches_the_real_video_processor(case, scanner):
    settings = with_kwargs(scanner.model.video_settings, case["kwargs"])
    result = case["result"]
    if "error" in result:
        with pytest.raises(CountError):
            llava_onevision.count_video(meta(case), settings)
        return
    count = llava_onevision.count_video(meta(case), settings)
    assert count.frames == result["frames"]
    assert [count.resized_height, count.resized_width] == result["frame_size"]
    assert count.tokens == result["video_tokens"]
    assert row_length(scanner, count) == result["input_ids"]


def test_the_records_cover_sampling_modes_and_refusals():
    kinds = {tuple(sorted(case["kwargs"])) for case in CASES}
    assert {
        (),
        ("do_sample_frames",),
        ("do_sample_frames", "fps"),
        ("do_sample_frames", "num_frames"),
    } <= kinds
    assert sum("error" in case["result"] for case in CASES) >= 4
    assert any(case.get("frame_list") for case in CASES)
    assert max(case["frames"] for case in CASES) >= 1000


def write_clip(path, frames: int, height: int, width: int, fps: int = 4) -> None:
    """A tiny MP4 (PyAV, mpeg4) of blank frames."""
    import av
    import numpy as np

    with av.open(str(path), "w") as out:
        stream = out.add_stream("mpeg4", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for _ in range(frames):
            frame = av.VideoFrame.from_ndarray(np.zeros((height, width, 3), dtype=np.uint8), format="rgb24")
            out.mux(stream.encode(frame))
        out.mux(stream.encode())


def test_a_video_row_is_counted_end_to_end(tmp_path):
    """A row's <video>: read from the clip's header, rendered by the chat template, expanded and counted."""
    write_clip(tmp_path / "a.mp4", 6, 48, 64)
    rows = [{"messages": [{"role": "user", "content": "<video>Describe the video."},
                          {"role": "assistant", "content": "Nothing."}], "videos": ["a.mp4"]}]  # fmt: skip
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    scanner = Scanner(ScanConfig(dataset=str(tmp_path / "rows.jsonl"), model=str(FOLDER), jobs=1))
    (outcome,) = list(scanner.scan())
    result = outcome.result
    (info,) = result.media
    assert (info.tokens, info.sampled) == (6 * 196 + 1, 6)
    assert info.counted_by == "llava-onevision: every frame (do_sample_frames is false)"
    assert not result.lengths_lower_bound and "VLM109" not in {f.code for f in outcome.findings}
    rendered = scanner.encoder.render(result.sample.messages, videos=True)
    assert rendered.count("<video>") == 1
    count = llava_onevision.count_video(
        VideoMeta(frames=6, fps=4.0, duration=1.5, width=64, height=48), scanner.model.video_settings
    )
    composed, saved = scanner.encoder.compose(rendered, [], videos=(count,))
    assert result.seq_len == len(scanner.model.tokenizer(composed)["input_ids"]) + saved


def test_a_row_whose_videos_keep_different_frames_is_refused_as_the_processor_refuses_it():
    """LlavaOnevisionProcessor stacks a row's videos (return_tensors="pt"): 8 and 90 kept frames raise
    ValueError in the real processor (tests/reference/test_stats_video_knobs.py's two-clip row), so the
    row is not counted; the same frame count stacks."""
    settings = load_model(str(PROCESSORS / llava_onevision_video.FOLDER)).video_settings
    clips = [
        VideoMeta(frames=n, fps=24.0, duration=n / 24, width=320, height=240, header_frames=n)
        for n in (8, 90, 8)
    ]
    counts = [llava_onevision.count_video(clip, settings) for clip in clips]
    with pytest.raises(CountError, match="stack expects each tensor to be equal size"):
        llava_onevision.check_videos(counts[:2], settings)
    llava_onevision.check_videos([counts[0], counts[2]], settings)
    assert llava_onevision.FAMILY.check_videos is llava_onevision.check_videos
