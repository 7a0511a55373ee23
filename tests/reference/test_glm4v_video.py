"""GLM-4.1V / GLM-4.6V video counts against the real Glm4vVideoProcessor / Glm46VVideoProcessor
(reference venv only): hypothesis clips (frame count, size, fps, sampling kwargs, the video processor's
max_duration) through the recorder's own call (fixtures/reference/glm4v_video.py record), compared with
the formula as tests/families/test_glm4v_video.py compares the committed records; and the smart_resize
vlmlint reuses (Qwen3-VL's copy) against GLM's video smart_resize itself."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fixtures.reference import glm4v_video  # noqa: E402
from tests.conftest import PROCESSORS  # noqa: E402
from tests.families.test_glm4v_video import full_ids, meta, row_length, with_kwargs  # noqa: E402
from vlmlint.config import ScanConfig  # noqa: E402
from vlmlint.engine import Scanner  # noqa: E402
from vlmlint.models import CountError, glm4v, qwen_vl  # noqa: E402

SCANNERS: dict[str, Scanner] = {}


def _scanner(folder: str) -> Scanner:
    if folder not in SCANNERS:
        SCANNERS[folder] = Scanner(ScanConfig(dataset="", model=str(PROCESSORS / folder)))
    return SCANNERS[folder]


KWARGS = st.sampled_from(
    [{}, {}, {"fps": 1.0}, {"fps": 3.0}, {"do_sample_frames": False}, {"max_duration": 5}]
)
INIT = st.sampled_from([{}, {}, {"max_duration": 8}, {"max_duration": 20, "fps": 1}])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(glm4v_video.FOLDERS),
    st.one_of(st.integers(1, 48), st.integers(49, 1500)),
    st.integers(1, 400),
    st.integers(1, 400),
    st.sampled_from([0.5, 1.0, 2.0, 5.0, 12.5, 24.0, 30000 / 1001, 60.0]),
    KWARGS,
    INIT,
)
def test_formula_is_the_real_video_processor(folder, frames, height, width, fps, kwargs, init):
    if frames > 48:
        height, width = min(height, 32), min(width, 32)  # long clips: tiny frames (the sampling is the point)
    case = {
        "folder": folder,
        "frames": frames,
        "size": [height, width],
        "fps": fps,
        "kwargs": kwargs,
        "init": init,
    }
    real = glm4v_video.record(case)
    scanner = _scanner(folder)
    video_settings = with_kwargs(scanner.model.video_settings, kwargs, init)
    if "error" in real:
        with pytest.raises(CountError):
            glm4v.count_video(meta(case), video_settings)
        return
    count = glm4v.count_video(meta(case), video_settings)
    assert (list(count.grid), count.tokens) == (real["grid"], real["video_tokens"])
    assert full_ids(scanner, count, video_settings) == real["ids"]
    saved = scanner.model.video_settings
    scanner.model.video_settings = video_settings
    try:
        assert row_length(scanner, count) == real["input_ids"]
    finally:
        scanner.model.video_settings = saved


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 700),
    st.integers(1, 3000),
    st.integers(1, 3000),
    st.sampled_from([1, 2, 3]),
    st.sampled_from([14, 16]),
    st.sampled_from([1, 2]),
    st.integers(1, 200_000),
    st.integers(1, 50_000_000),
)
def test_the_reused_smart_resize_is_glms_video_smart_resize(
    frames, height, width, temporal, patch, merge, low, high
):
    from transformers.models.glm4v.video_processing_glm4v import smart_resize

    factor = patch * merge
    try:
        real = smart_resize(frames, height, width, temporal, factor, low, high)
    except ValueError:
        with pytest.raises(CountError):
            qwen_vl.qwen3_smart_resize(frames, height, width, temporal, factor, low, high)
        return
    assert qwen_vl.qwen3_smart_resize(frames, height, width, temporal, factor, low, high) == real
