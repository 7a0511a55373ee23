"""InternVL videos against the real InternVLVideoProcessor recorded outputs
(fixtures/reference/internvl_video.json, recorded in the reference venv through InternVLProcessor): each
clip's kept frames, its <IMG_CONTEXT> and <img> counts, the whole input_ids ("FrameN: " text included, as
a digest) and their length through the scanner's compose, or the processor's refusal; and the video
settings read from the fixture folder as AutoVideoProcessor reads them."""

from __future__ import annotations

import dataclasses

import pytest

from fixtures.reference import _records, glm4v_video, internvl_video
from tests.conftest import PROCESSORS
from tests.families._video import clip_meta, prompt_length
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError, internvl, load_model
from vlmlint.models.base import Run, VideoCount
from vlmlint.records import VideoMeta

RECORDS = _records.load("internvl_video")
CASES = RECORDS["cases"]
PROMPT = internvl_video.PROMPT

pytestmark = pytest.mark.skipif(
    _records.version_mismatch("internvl_video") is not None,
    reason=str(_records.version_mismatch("internvl_video")),
)


@pytest.fixture(scope="module")
def scanner() -> Scanner:
    return Scanner(ScanConfig(dataset="", model=str(PROCESSORS / internvl_video.FOLDER)))


KEYS = ("do_sample_frames", "num_frames", "fps", "initial_shift", "do_resize")


def with_kwargs(
    settings: internvl.InternVLVideoSettings, kwargs: dict, init: dict
) -> internvl.InternVLVideoSettings:
    """The video processor's attributes a case sets (`init`), then its call kwargs."""
    changes = {}
    for source in (init, kwargs):
        changes.update({key: source[key] for key in KEYS if key in source})
        if "size" in source:
            changes["frame_height"], changes["frame_width"] = (
                source["size"]["height"],
                source["size"]["width"],
            )
    return dataclasses.replace(settings, **changes)


meta = clip_meta  # (tests/reference imports it by this name)


def row_length(scanner: Scanner, video: VideoCount) -> int:
    """The recorder's prompt with the video composed and tokenized."""
    return prompt_length(scanner, PROMPT, (video,))


def full_ids(scanner: Scanner, video: VideoCount, settings: internvl.InternVLVideoSettings) -> str:
    """The prompt with the video's expansion written out in full, tokenized: the recorder's digest of it."""
    text = "".join(
        seg.token * seg.count if isinstance(seg, Run) else seg
        for seg in internvl.expand_video(video, settings)
    )
    tokenizer = scanner.model.tokenizer
    ids = tokenizer(PROMPT.replace(internvl.VIDEO_PLACEHOLDER, text), add_special_tokens=True)["input_ids"]
    return glm4v_video.ids_digest(ids, tokenizer.convert_tokens_to_ids(internvl.PLACEHOLDER))


def test_video_settings_come_from_the_folder_as_transformers_reads_them():
    """No video_preprocessor_config.json: preprocessor_config.json's 448x448 over InternVLVideoProcessor's
    defaults (384x384, sampling off, initial_shift on); the processor's image_seq_length."""
    model = load_model(str(PROCESSORS / internvl_video.FOLDER))
    assert model.video_refusal is None
    assert model.video_settings == internvl.InternVLVideoSettings(
        frame_height=448, frame_width=448, do_resize=True, do_sample_frames=False, num_frames=None,
        fps=None, initial_shift=True, image_seq_length=256,
    )  # fmt: skip


def test_other_video_processors_are_refused():
    with pytest.raises(CountError, match="not one vlmlint reproduces"):
        internvl.video_settings_from(
            {"video_processor_type": "Qwen2VLVideoProcessor"}, None, "InternVLProcessor"
        )
    with pytest.raises(CountError, match="height and width"):
        internvl.video_settings_from(
            {"video_processor_type": "InternVLVideoProcessor", "size": {"shortest_edge": 448}},
            None,
            "InternVLProcessor",
        )


def _id(case: dict) -> str:
    extra = {**case["kwargs"], **{f"init.{k}": v for k, v in case["init"].items()}}
    return f"{case['frames']}f-{case['size'][0]}x{case['size'][1]}-{case['fps']:.3g}{extra or ''}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_formula_matches_the_real_video_processor(case, scanner):
    settings = with_kwargs(scanner.model.video_settings, case["kwargs"], case["init"])
    result = case["result"]
    if "error" in result:
        with pytest.raises(CountError):
            internvl.count_video(meta(case), settings)
        return
    count = internvl.count_video(meta(case), settings)
    assert count.frames == result["frames"] == result["img"]
    assert count.tokens == result["video_tokens"]
    assert full_ids(scanner, count, settings) == result["ids"]
    saved = scanner.model.video_settings
    scanner.model.video_settings = settings
    try:
        assert row_length(scanner, count) == result["input_ids"]
    finally:
        scanner.model.video_settings = saved


def test_frame_lists_are_counted_unsampled_and_refused_sampled():
    settings = load_model(str(PROCESSORS / internvl_video.FOLDER)).video_settings
    frames = VideoMeta(frames=4, fps=None, duration=None, width=64, height=48, frames_from="frame list")
    assert internvl.count_video(frames, settings).tokens == 4 * 256
    with pytest.raises(CountError, match="list of images"):
        internvl.count_video(frames, dataclasses.replace(settings, do_sample_frames=True, num_frames=2))


def test_the_records_cover_sampling_modes_and_refusals():
    kinds = {key for case in CASES for key in case["kwargs"]} | {
        f"init.{k}" for c in CASES for k in c["init"]
    }
    assert {"do_sample_frames", "num_frames", "fps", "initial_shift", "do_resize", "init.num_frames"} <= kinds
    assert set(range(1, 41)) <= {case["frames"] for case in CASES}
    errors = {case["result"]["error"] for case in CASES if "error" in case["result"]}
    assert {"ValueError", "ZeroDivisionError", "TypeError", "RuntimeError"} <= errors


def test_a_row_whose_videos_keep_different_frames_is_the_processors_error():
    """InternVLProcessor stacks a row's videos (checked in the reference venv: 4 and 6 frames raise
    ValueError "stack expects each tensor to be equal size"; 4 and 4 frames of different sizes do not,
    since every frame is resized to 448x448)."""
    model = load_model(str(PROCESSORS / "internvl3-1b-hf"))
    settings = model.video_settings
    four = internvl.count_video(VideoMeta(frames=4, fps=24.0, duration=4 / 24, width=64, height=64), settings)
    other = internvl.count_video(
        VideoMeta(frames=4, fps=24.0, duration=4 / 24, width=96, height=128), settings
    )
    six = internvl.count_video(VideoMeta(frames=6, fps=24.0, duration=6 / 24, width=64, height=64), settings)
    internvl.check_videos([four, other], settings)
    with pytest.raises(CountError, match="stack expects each tensor to be equal size"):
        internvl.check_videos([four, six], settings)
