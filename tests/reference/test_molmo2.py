"""Molmo2's formula against the real torchvision Molmo2ImageProcessor (reference venv only)."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from PIL import Image  # noqa: E402

from tests.conftest import PROCESSORS  # noqa: E402
from vlmlint.models import load_model, molmo2  # noqa: E402

FOLDER = PROCESSORS / "molmo2-8b"


@pytest.fixture(scope="module")
def model():
    return load_model(str(FOLDER))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, 6000), st.integers(1, 6000), st.sampled_from([1, 2, 3, 8, 12]))
@example(1, 1, 8)
@example(112, 4000, 8)
@example(379, 379, 8)
def test_grid_is_get_image_grid_and_crops(model, height, width, max_crops):
    """The processor's own header helper (the same select_tiling the preprocess runs)."""
    s = dataclasses.replace(model.settings, max_crops=max_crops)
    grid, crops = model.image_processor.get_image_grid_and_crops(height, width, {"max_crops": max_crops})
    _, (tiling_h, tiling_w) = molmo2.image_grid(height, width, s)
    assert (list(molmo2.count(height, width, s).grid), tiling_h * tiling_w + 1) == (grid, crops)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, 2500), st.integers(1, 2500))
def test_grid_is_the_preprocess_output(model, height, width):
    out = model.image_processor(images=[Image.new("RGB", (width, height))])
    assert list(molmo2.count(height, width, model.settings).grid) == out["image_grids"][0].tolist()


def test_verify_runs_the_real_image_processor(model):
    images = [Image.new("RGB", (w, h)) for h, w in [(300, 1000), (1, 4000), (2000, 2000)]]
    exact = molmo2.count_exact(model.image_processor, images, model.settings)
    assert exact == [molmo2.count(i.height, i.width, model.settings) for i in images]
