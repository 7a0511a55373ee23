"""Llama 4's formula against the real torchvision Llama4ImageProcessor and Llama4Processor (reference venv only)."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from PIL import Image  # noqa: E402
from transformers.image_utils import SizeDict  # noqa: E402
from transformers.models.llama4 import image_processing_llama4 as real  # noqa: E402

from fixtures.reference import llama4 as recorder  # noqa: E402
from tests.conftest import PROCESSORS  # noqa: E402
from vlmlint.models import llama4, load_model  # noqa: E402

FOLDER = PROCESSORS / "llama-4-scout-17b-16e-instruct"
FIT = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def model():
    return load_model(str(FOLDER))


def real_fit(height: int, width: int, s: llama4.Llama4Settings) -> tuple[list[int], list[int]]:
    """The canvas and the resized size exactly as `_preprocess` computes them (its own helpers)."""
    size = SizeDict(height=s.tile_size, width=s.tile_size)
    possible = torch.tensor(real.find_supported_resolutions(max_num_chunks=s.max_patches, patch_size=size))
    target = real.get_best_fit((height, width), possible, resize_to_max_canvas=s.resize_to_max_canvas)
    if s.resize_to_max_canvas:
        bound = target
    else:
        bound = (min(max(height, s.tile_size), target[0]), min(max(width, s.tile_size), target[1]))
    new = real.get_max_res_without_distortion((height, width), bound)
    return [int(v) for v in target], [max(int(new[0]), 1), max(int(new[1]), 1)]


@FIT
@given(st.integers(1, 12000), st.integers(1, 12000), st.sampled_from([1, 2, 4, 5, 9, 16, 30]), st.booleans())
@example(1, 1, 16, False)
@example(1, 4000, 16, False)
@example(4000, 1, 16, False)
@example(337, 337, 16, False)
@example(336, 5377, 16, False)
@example(100, 250, 9, True)
def test_canvas_and_resize_are_the_image_processors(model, height, width, max_patches, to_max):
    s = dataclasses.replace(model.settings, max_patches=max_patches, resize_to_max_canvas=to_max)
    canvas, resized = real_fit(height, width, s)
    assert list(llama4.best_fit(height, width, s)) == canvas
    count = llama4.count(height, width, s)
    assert [count.resized_height, count.resized_width] == resized
    assert list(count.grid) == [canvas[0] // 336, canvas[1] // 336]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.integers(1, 3000),
    st.integers(1, 3000),
    st.sampled_from([{}, {"max_patches": 4}, {"resize_to_max_canvas": True}]),
)
@example(1, 4000, {})
@example(2000, 300, {})
def test_whole_call_matches_the_processor(model, height, width, kwargs):
    """aspect_ratios, the resized extent and every special token of the real processor's input_ids."""
    s = dataclasses.replace(model.settings, **kwargs)
    got = recorder.record({"folder": recorder.FOLDER, "sizes": [[height, width]], "kwargs": kwargs})
    count = llama4.count(height, width, s)
    (image,) = got["images"]
    assert list(count.grid) == image["aspect_ratio"]
    assert [count.resized_height, count.resized_width] == image["resized"]
    assert count.tokens == image["chunks"] * s.tokens_per_tile == got["specials"]["<|patch|>"]
    segments = llama4.expand(count, s)
    for token in recorder.SPECIALS[:-1]:
        n = sum(
            x.count if isinstance(x, llama4.Run) else 1 for x in segments if getattr(x, "token", x) == token
        )
        assert n == got["specials"][token], token


def test_settings_from_the_object_equal_the_dicts(model):
    """With torchvision the loader hands settings_from the image processor object (SizeDict size)."""
    import json

    raw = json.loads((FOLDER / "preprocessor_config.json").read_text())
    processor = json.loads((FOLDER / "processor_config.json").read_text())
    assert model.settings == llama4.settings_from(raw, processor, {})
    assert model.image_processor.__class__.__name__.startswith("Llama4ImageProcessor")


def test_verify_runs_the_real_image_processor(model):
    images = [Image.new("RGB", (w, h)) for h, w in [(300, 1000), (1, 4000), (2000, 2000)]]
    exact = llama4.count_exact(model.image_processor, images, model.settings)
    assert exact == [llama4.count(i.height, i.width, model.settings) for i in images]
