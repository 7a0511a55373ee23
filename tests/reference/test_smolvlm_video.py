"""SmolVLM2 video counts against the real SmolVLMVideoProcessor through SmolVLMProcessor (reference venv only):
hypothesis rows of one to three clips (frame count, size, fps, the video processor's settings, frame lists)
through the recorder's own call (fixtures/reference/smolvlm_video.py record), compared with the formula as
tests/families/test_smolvlm_video.py compares the committed records; and the folder's settings as
AutoVideoProcessor.from_pretrained loads them."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fixtures.reference import smolvlm_video  # noqa: E402
from tests.families.test_smolvlm_video import FOLDER, count_row, row_length, written  # noqa: E402
from vlmlint.config import ScanConfig  # noqa: E402
from vlmlint.engine import Scanner  # noqa: E402
from vlmlint.models import CountError, idefics3, load_model  # noqa: E402

SCANNER = []

CONFIGS = st.one_of(
    st.sampled_from([{}, smolvlm_video.SAMPLE, {"do_resize": False}, {"do_pad": False}]),
    st.builds(
        smolvlm_video.sampling,
        st.sampled_from([0, 0.25, 0.5, 1, 2, 3, 7.5]),
        st.integers(1, 80),
    ),
)


def _scanner() -> Scanner:
    if not SCANNER:
        SCANNER.append(Scanner(ScanConfig(dataset="", model=str(FOLDER))))
    return SCANNER[0]


def test_the_folder_loads_as_vlmlint_reads_it():
    from transformers import AutoVideoProcessor

    real = AutoVideoProcessor.from_pretrained(FOLDER)
    ours = load_model(str(FOLDER)).video_settings
    assert type(real).__name__ == idefics3.VIDEO_PROCESSOR
    assert (real.do_sample_frames, real.num_frames, real.fps, real.do_pad) == (
        ours.do_sample_frames,
        ours.num_frames,
        ours.fps,
        ours.do_pad,
    )


CLIP = st.builds(
    lambda frames, height, width, fps: smolvlm_video.clip(frames, [height, width], fps),
    st.integers(1, 48),
    st.integers(1, 200),
    st.integers(1, 200),
    st.sampled_from([0.5, 1.0, 5.0, 12.5, 24.0, 30000 / 1001, 60.0]),
)
LONG_CLIP = st.builds(
    lambda frames, fps: smolvlm_video.clip(frames, [4, 4], fps),
    st.integers(1, 6000),
    st.sampled_from([0.5, 1.0, 10.0, 24.0, 25.0, 30000 / 1001]),
)
FRAME_LIST = st.builds(
    lambda frames, height, width: smolvlm_video.clip(frames, [height, width], None, frame_list=True),
    st.integers(1, 30),
    st.integers(1, 64),
    st.integers(1, 64),
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(st.lists(CLIP, min_size=1, max_size=3), st.lists(FRAME_LIST, min_size=1, max_size=2)),
    CONFIGS,
)
def test_formula_is_the_real_video_processor(clips, config):
    _check({"videos": clips, "config": config})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(LONG_CLIP, min_size=1, max_size=2), CONFIGS.filter(lambda c: c.get("do_sample_frames")))
def test_long_clips_are_sampled_as_the_real_video_processor_samples(clips, config):
    _check({"videos": clips, "config": config})


def _check(case: dict) -> None:
    real = smolvlm_video.record(case)
    scanner = _scanner()
    if "error" in real:
        with pytest.raises(CountError):
            count_row(case, scanner)
        return
    videos, video_settings = count_row(case, scanner)
    for video, recorded in zip(videos, real["videos"], strict=True):
        text = written(idefics3.expand_video(video, video_settings))
        assert smolvlm_video.INTRO.findall(text) == [(recorded["frame_words"], recorded["duration"])]
        assert smolvlm_video.STAMP.findall(text) == recorded["stamps"]
        assert (video.tokens, len(text)) == (recorded["image_runs"], recorded["chars"])
    assert max(video.grid[0] for video in videos) == real["padded_frames"]
    assert row_length(scanner, videos, video_settings) == real["input_ids"]
