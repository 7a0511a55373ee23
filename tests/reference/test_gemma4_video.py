"""Gemma 4 video counts against the real Gemma4VideoProcessor through Gemma4Processor (reference venv
only): hypothesis clips (frame count, size, fps, the video processor's settings, frame lists) through the
recorder's own call (fixtures/reference/gemma4_video.py record), compared with the formula as
tests/families/test_gemma4_video.py compares the committed records."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fixtures.reference import gemma4_video  # noqa: E402
from tests.families.test_gemma4_video import FOLDER, meta, row_length, with_config  # noqa: E402
from vlmlint.config import ScanConfig  # noqa: E402
from vlmlint.engine import Scanner  # noqa: E402
from vlmlint.models import CountError, gemma4  # noqa: E402
from vlmlint.models.base import Run  # noqa: E402

SCANNER = []

CONFIGS = st.one_of(
    st.sampled_from(
        [{}, {"do_sample_frames": False}, {"fps": 1.0}, {"do_resize": False, "do_sample_frames": False}]
    ),
    st.builds(lambda k: {"num_frames": k}, st.integers(1, 48)),
    st.builds(lambda f: {"num_frames": None, "fps": f}, st.sampled_from([0.5, 1.0, 2.0, 5.0])),
    st.builds(
        lambda m: {"max_soft_tokens": m, "do_sample_frames": False}, st.sampled_from([70, 140, 280, 560])
    ),
)


def _scanner() -> Scanner:
    if not SCANNER:
        SCANNER.append(Scanner(ScanConfig(dataset="", model=str(FOLDER))))
    return SCANNER[0]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(1, 64),
    st.integers(1, 400),
    st.integers(1, 400),
    st.sampled_from([0.5, 1.0, 5.0, 12.5, 24.0, 30000 / 1001, 60.0]),
    st.booleans(),
    CONFIGS,
)
def test_formula_is_the_real_video_processor(frames, height, width, fps, frame_list, config):
    case = {"frames": frames, "size": [height, width], "fps": None if frame_list else fps, "config": config}
    if frame_list:
        case["frame_list"] = True
    real = gemma4_video.record(case)
    scanner = _scanner()
    video_settings = with_config(scanner.model.video_settings, config)
    if "error" in real:
        with pytest.raises(CountError):
            gemma4.count_video(meta(case), video_settings)
        return
    count = gemma4.count_video(meta(case), video_settings)
    assert (count.frames, count.tokens) == (real["frames"], real["video_tokens"])
    assert [gemma4._stamp(t) for t in count.timestamps] == real["stamps"]
    text = "".join(seg for seg in gemma4.expand_video(count, video_settings) if not isinstance(seg, Run))
    assert text.count("<|image>") == real["boi"]
    assert row_length(scanner, count, video_settings) == real["input_ids"]
