"""InternVL video counts against the real InternVLVideoProcessor through InternVLProcessor (reference venv
only): hypothesis clips (frame count, size, fps, sampling kwargs) through the recorder's own call
(fixtures/reference/internvl_video.py record), compared with the formula as
tests/families/test_internvl_video.py compares the committed records."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fixtures.reference import internvl_video  # noqa: E402
from tests.conftest import PROCESSORS  # noqa: E402
from tests.families.test_internvl_video import full_ids, meta, row_length, with_kwargs  # noqa: E402
from vlmlint.config import ScanConfig  # noqa: E402
from vlmlint.engine import Scanner  # noqa: E402
from vlmlint.models import CountError, internvl  # noqa: E402

SCANNER: list[Scanner] = []


def _scanner() -> Scanner:
    if not SCANNER:
        SCANNER.append(Scanner(ScanConfig(dataset="", model=str(PROCESSORS / internvl_video.FOLDER))))
    return SCANNER[0]


KWARGS = st.one_of(
    st.just({}),
    st.builds(lambda n: {"do_sample_frames": True, "num_frames": n}, st.integers(1, 20)),
    st.builds(lambda f: {"do_sample_frames": True, "fps": f}, st.sampled_from([0.25, 0.5, 1.0, 2.0, 5.0])),
    st.builds(
        lambda n, s: {"do_sample_frames": True, "num_frames": n, "initial_shift": s},
        st.integers(1, 12),
        st.one_of(st.booleans(), st.floats(0, 6, allow_nan=False)),
    ),
    st.just({"do_resize": False}),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(1, 120),
    st.integers(1, 300),
    st.integers(1, 300),
    st.sampled_from([1.0, 5.0, 12.5, 24.0, 30000 / 1001, 60.0]),
    KWARGS,
)
def test_formula_is_the_real_video_processor(frames, height, width, fps, kwargs):
    if not kwargs.get("do_sample_frames"):
        frames = min(frames, 40)  # every frame is 256 tokens
    case = {"folder": internvl_video.FOLDER, "frames": frames, "size": [height, width], "fps": fps}
    case.update(kwargs=kwargs, init={})
    real = internvl_video.record(case)
    scanner = _scanner()
    video_settings = with_kwargs(scanner.model.video_settings, kwargs, {})
    if "error" in real:
        with pytest.raises(CountError):
            internvl.count_video(meta(case), video_settings)
        return
    count = internvl.count_video(meta(case), video_settings)
    assert (count.frames, count.tokens) == (real["frames"], real["video_tokens"])
    assert full_ids(scanner, count, video_settings) == real["ids"]
    saved = scanner.model.video_settings
    scanner.model.video_settings = video_settings
    try:
        assert row_length(scanner, count) == real["input_ids"]
    finally:
        scanner.model.video_settings = saved
