"""LLaVA-OneVision video counts against the real LlavaOnevisionVideoProcessor (reference venv only):
hypothesis clips (frame count, size, fps, sampling kwargs, frame lists) through the recorder's own call
(fixtures/reference/llava_onevision_video.py record), compared with the formula as
tests/families/test_llava_onevision_video.py compares the committed records."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fixtures.reference import llava_onevision_video  # noqa: E402
from tests.families.test_llava_onevision_video import FOLDER, meta, row_length, with_kwargs  # noqa: E402
from vlmlint.config import ScanConfig  # noqa: E402
from vlmlint.engine import Scanner  # noqa: E402
from vlmlint.models import CountError, llava_onevision  # noqa: E402

SCANNER = []

KWARGS = st.one_of(
    st.sampled_from(
        [{}, {"do_sample_frames": True}, {"do_sample_frames": False}, {"fps": 2.0}, {"num_frames": 3}]
    ),
    st.builds(
        lambda fps: {"do_sample_frames": True, "fps": fps}, st.sampled_from([0.5, 1.0, 2.0, 5.0, 30.0])
    ),
    st.builds(lambda k: {"do_sample_frames": True, "num_frames": k}, st.integers(1, 50)),
)


def _scanner() -> Scanner:
    if not SCANNER:
        SCANNER.append(Scanner(ScanConfig(dataset="", model=str(FOLDER))))
    return SCANNER[0]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(1, 48),
    st.integers(1, 300),
    st.integers(1, 300),
    st.sampled_from([1.0, 5.0, 12.5, 24.0, 30000 / 1001, 60.0]),
    st.booleans(),
    KWARGS,
)
def test_formula_is_the_real_video_processor(frames, height, width, fps, frame_list, kwargs):
    case = {"frames": frames, "size": [height, width], "fps": None if frame_list else fps, "kwargs": kwargs}
    if frame_list:
        case["frame_list"] = True
    real = llava_onevision_video.record(case)
    scanner = _scanner()
    video_settings = with_kwargs(scanner.model.video_settings, kwargs)
    if "error" in real:
        with pytest.raises(CountError):
            llava_onevision.count_video(meta(case), video_settings)
        return
    count = llava_onevision.count_video(meta(case), video_settings)
    assert (count.frames, [count.resized_height, count.resized_width], count.tokens) == (
        real["frames"],
        real["frame_size"],
        real["video_tokens"],
    )
    assert row_length(scanner, count) == real["input_ids"]
