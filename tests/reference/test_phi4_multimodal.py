"""Phi-4-multimodal's formula against the real torchvision Phi4MultimodalImageProcessor (reference venv)."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from PIL import Image  # noqa: E402

from tests.conftest import PROCESSORS  # noqa: E402
from vlmlint.models import CountError, load_model, phi4_multimodal  # noqa: E402

FOLDER = PROCESSORS / "phi-4-multimodal"


@pytest.fixture(scope="module")
def model():
    return load_model(str(FOLDER))


def real(image_processor, height: int, width: int, **kwargs) -> tuple[int, list[int]] | str:
    try:
        out = image_processor(images=[Image.new("RGB", (width, height))], **kwargs)
    except ValueError as exc:
        return str(exc)
    return int(out["num_img_tokens"][0]), [int(v) for v in out["image_sizes"][0]]


def ours(height: int, width: int, s) -> tuple[int, list[int]] | str:
    try:
        c = phi4_multimodal.count(height, width, s)
    except CountError as exc:
        return str(exc)
    return c.tokens, [c.resized_height, c.resized_width]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, 3500), st.integers(1, 3500))
@example(1, 1)
@example(10, 4000)
@example(2689, 2689)
@example(463, 448)
def test_count_is_the_image_processors(model, height, width):
    assert ours(height, width, model.settings) == real(model.image_processor, height, width)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(20, 3000), st.integers(20, 3000), st.sampled_from([1, 2, 4, 9, 16]))
def test_other_crop_caps(model, height, width, dynamic_hd):
    s = dataclasses.replace(model.settings, dynamic_hd=dynamic_hd)
    assert ours(height, width, s) == real(model.image_processor, height, width, dynamic_hd=dynamic_hd)


def test_verify_runs_the_real_image_processor(model):
    images = [Image.new("RGB", (w, h)) for h, w in [(300, 1000), (448, 449), (3000, 3000)]]
    exact = phi4_multimodal.count_exact(model.image_processor, images, model.settings)
    assert exact == [phi4_multimodal.count(i.height, i.width, model.settings) for i in images]
    with pytest.raises(CountError, match="very extreme"):
        phi4_multimodal.count_exact(model.image_processor, [Image.new("RGB", (4000, 1))], model.settings)
