"""LLaVA-NeXT-Video video counts against the real LlavaNextVideoVideoProcessor (reference venv only):
hypothesis clips (frame count, size, fps, sampling and frame-processing kwargs, frame lists, a second
clip in the row) through the recorder's own call (fixtures/reference/llava_next_video.py record),
compared with the formula as tests/families/test_llava_next_video.py compares the committed records."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fixtures.reference import llava_next_video as recorder  # noqa: E402
from tests.families.test_llava_next_video import FOLDER, ours, row_length  # noqa: E402
from vlmlint.config import ScanConfig  # noqa: E402
from vlmlint.engine import Scanner  # noqa: E402
from vlmlint.models import CountError  # noqa: E402

SCANNER = []

KWARGS = st.one_of(
    st.sampled_from(
        [
            {},
            {"do_sample_frames": True},
            {"do_sample_frames": False},
            {"fps": 2.0},
            {"num_frames": 3},
            {"do_center_crop": False},
            {"do_resize": False},
            {"do_center_crop": False, "do_resize": False},
        ]
    ),  # fmt: skip
    st.builds(
        lambda fps: {"do_sample_frames": True, "fps": fps}, st.sampled_from([0.5, 1.0, 2.0, 5.0, 30.0])
    ),
    st.builds(lambda k: {"do_sample_frames": True, "num_frames": k}, st.integers(1, 50)),
    st.builds(lambda edge: {"do_center_crop": False, "size": {"shortest_edge": edge}}, st.integers(14, 400)),
    st.builds(
        lambda h, w: {"crop_size": {"height": h, "width": w}}, st.integers(1, 400), st.integers(1, 400)
    ),
)


def _scanner() -> Scanner:
    if not SCANNER:
        SCANNER.append(Scanner(ScanConfig(dataset="", model=str(FOLDER))))
    return SCANNER[0]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(1, 40),
    st.integers(1, 300),
    st.integers(1, 300),
    st.sampled_from([1.0, 5.0, 12.5, 24.0, 30000 / 1001, 60.0]),
    st.booleans(),
    KWARGS,
    st.none() | st.tuples(st.integers(1, 8), st.integers(1, 80), st.integers(1, 80)),
)
# found by hypothesis in CI: a frame list 1 or 3 px high is read channels-first (W px high, 3 px wide)
@example(1, 1, 1, 1.0, True, {"do_center_crop": False, "size": {"shortest_edge": 14}}, None)
@example(2, 3, 40, 1.0, True, {"do_center_crop": False, "size": {"shortest_edge": 14}}, None)
def test_formula_is_the_real_video_processor(frames, height, width, fps, frame_list, kwargs, pair):
    case = {"frames": frames, "size": [height, width], "fps": None if frame_list else fps, "kwargs": kwargs}
    if frame_list:
        case["frame_list"] = True
    elif pair is not None:
        case["pair"] = {"frames": pair[0], "size": [pair[1], pair[2]]}
    real = recorder.record(case)
    scanner = _scanner()
    if "error" in real:
        with pytest.raises(CountError):
            ours(case, scanner.model.video_settings)
        return
    counts = ours(case, scanner.model.video_settings)
    assert [count.frames for count in counts] == real["frames"]
    assert [[count.resized_height, count.resized_width] for count in counts] == real["frame_size"]
    assert sum(count.tokens for count in counts) == real["video_tokens"]
    assert row_length(scanner, counts) == real["input_ids"]
