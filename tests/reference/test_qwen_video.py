"""Qwen-VL video counts against the real Qwen2VLVideoProcessor / Qwen3VLVideoProcessor (reference venv
only): hypothesis clips (frame count, size, fps, sampling kwargs) through the recorder's own call
(fixtures/reference/qwen_video.py record), compared with the formula as tests/families/test_qwen_video.py
compares the committed records."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fixtures.reference import qwen_video  # noqa: E402
from tests.conftest import PROCESSORS  # noqa: E402
from tests.families.test_qwen_video import meta, row_length, with_kwargs  # noqa: E402
from vlmlint.config import ScanConfig  # noqa: E402
from vlmlint.engine import Scanner  # noqa: E402
from vlmlint.models import CountError, qwen_vl  # noqa: E402

SCANNERS = {}


def _scanner(folder: str) -> Scanner:
    if folder not in SCANNERS:
        SCANNERS[folder] = Scanner(ScanConfig(dataset="", model=str(PROCESSORS / folder)))
    return SCANNERS[folder]


KWARGS = st.sampled_from(
    [{}, {"do_sample_frames": True, "fps": 2.0}, {"do_sample_frames": True, "num_frames": 6},
     {"do_sample_frames": False}, {"cap_pixels_per_frame": True}, {"fps": 1.0}]
)  # fmt: skip


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["qwen2-vl", "qwen2.5-vl", "qwen3-vl"]),
    st.integers(1, 48),
    st.integers(1, 900),
    st.integers(1, 900),
    st.sampled_from([1.0, 5.0, 12.5, 24.0, 30000 / 1001, 60.0]),
    KWARGS,
)
def test_formula_is_the_real_video_processor(folder, frames, height, width, fps, kwargs):
    if folder != "qwen3-vl" and kwargs.get("fps") and not kwargs.get("do_sample_frames"):
        kwargs = {}  # Qwen2VLVideoProcessor samples only with do_sample_frames
    case = {"folder": folder, "frames": frames, "size": [height, width], "fps": fps, "kwargs": kwargs}
    real = qwen_video.record(case)
    scanner = _scanner(folder)
    video_settings = with_kwargs(scanner.model.video_settings, kwargs)
    if "error" in real:
        with pytest.raises(CountError):
            qwen_vl.count_video(meta(case), video_settings)
        return
    count = qwen_vl.count_video(meta(case), video_settings)
    assert (list(count.grid), count.tokens) == (real["grid"], real["video_tokens"])
    saved = scanner.model.video_settings
    scanner.model.video_settings = video_settings
    try:
        assert row_length(scanner, count) == real["input_ids"]
    finally:
        scanner.model.video_settings = saved
