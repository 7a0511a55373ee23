"""Command A Vision's formula against the real torchvision Cohere2VisionImageProcessor (reference venv only)."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from PIL import Image  # noqa: E402
from transformers.models.cohere2_vision import image_processing_cohere2_vision as real  # noqa: E402

from fixtures.reference import cohere2_vision as recorder  # noqa: E402
from tests.conftest import PROCESSORS  # noqa: E402
from vlmlint.models import cohere2_vision, load_model  # noqa: E402

FOLDER = PROCESSORS / "command-a-vision-07-2025"


@pytest.fixture(scope="module")
def model():
    return load_model(str(FOLDER))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, 15000), st.integers(1, 15000), st.sampled_from([1, 2, 4, 6, 9, 12, 20]), st.booleans())
@example(1, 1, 12, True)
@example(513, 512, 12, True)
@example(512, 6145, 12, True)
@example(1, 4000, 12, False)
def test_patches_are_the_image_processors(model, height, width, max_patches, crop):
    """get_optimal_tiled_canvas and get_number_of_image_patches, the processor's own header helpers."""
    s = dataclasses.replace(model.settings, max_patches=max_patches, crop_to_patches=crop)
    count = cohere2_vision.count(height, width, s)
    if crop:
        cols, rows = real.get_optimal_tiled_canvas((height, width), (512, 512), 1, max_patches)
        assert count.grid == (rows, cols)
    n = model.image_processor.get_number_of_image_patches(height, width, s.images_kwargs())
    assert count.tokens == n * 256


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.integers(1, 3000),
    st.integers(1, 3000),
    st.sampled_from([{}, {"max_patches": 4}, {"crop_to_patches": False}]),
)
@example(1, 4000, {})
@example(1537, 2048, {})
def test_whole_call_matches_the_processor(model, height, width, kwargs):
    s = dataclasses.replace(model.settings, **kwargs)
    got = recorder.record({"folder": recorder.FOLDER, "sizes": [[height, width]], "kwargs": kwargs})
    count = cohere2_vision.count(height, width, s)
    assert cohere2_vision.num_patches(*count.grid) == got["images"][0]["num_patches"] == got["tiles"]
    segments = cohere2_vision.expand(count, s)
    assert (
        sum(x.count for x in segments if isinstance(x, cohere2_vision.Run))
        == got["specials"]["<|IMG_PATCH|>"]
    )
    assert segments.count("<|IMG_LINE_BREAK|>") == got["specials"]["<|IMG_LINE_BREAK|>"]


def test_verify_runs_the_real_image_processor(model):
    images = [Image.new("RGB", (w, h)) for h, w in [(300, 1000), (1, 4000), (2000, 2000)]]
    exact = cohere2_vision.count_exact(model.image_processor, images, model.settings)
    assert exact == [cohere2_vision.count(i.height, i.width, model.settings) for i in images]
