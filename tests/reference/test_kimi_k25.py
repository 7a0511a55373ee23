"""Kimi K2.5's formula against the real torchvision Kimi_K25ImageProcessor (reference venv only)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from PIL import Image  # noqa: E402

from tests.conftest import PROCESSORS  # noqa: E402
from vlmlint.models import kimi_k25, load_model  # noqa: E402

FOLDER = PROCESSORS / "kimi-k2.5"


@pytest.fixture(scope="module")
def model():
    return load_model(str(FOLDER))


def real_grid(image_processor, height: int, width: int) -> list[int]:
    return image_processor(images=[Image.new("RGB", (width, height))])["image_grid_thw"][0].tolist()


def test_load_model_builds_the_real_image_processor(model):
    assert type(model.image_processor).__name__ == "Kimi_K25ImageProcessor"
    assert model.settings == kimi_k25.settings_from(dict(kimi_k25.DEFAULTS), {}, {})


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, 3000), st.integers(1, 3000))
@example(1, 1)
@example(1, 4000)
@example(4000, 1)
@example(1792, 1793)
@example(2401, 2401)
def test_count_is_the_image_processors_grid(model, height, width):
    count = kimi_k25.count(height, width, model.settings)
    assert list(count.grid) == real_grid(model.image_processor, height, width)


@pytest.mark.parametrize("max_patches", [1, 64, 1000])
@pytest.mark.parametrize("size", [[5, 9], [700, 300], [1, 2000]])
def test_other_budgets(max_patches, size):
    from transformers import AutoImageProcessor

    image_processor = AutoImageProcessor.from_pretrained(str(FOLDER), max_patches=max_patches)
    s = kimi_k25.KimiK25Settings(max_patches=max_patches)
    assert list(kimi_k25.count(*size, s).grid) == real_grid(image_processor, *size)


def test_verify_runs_the_real_image_processor(model):
    images = [Image.new("RGB", (w, h)) for h, w in [(300, 1000), (1, 4000), (2000, 2000)]]
    exact = kimi_k25.count_exact(model.image_processor, images, model.settings)
    assert exact == [kimi_k25.count(i.height, i.width, model.settings) for i in images]
