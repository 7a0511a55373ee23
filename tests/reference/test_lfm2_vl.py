"""LFM2-VL's formula against the real torchvision Lfm2VlImageProcessor and Lfm2VlProcessor (reference venv only)."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from PIL import Image  # noqa: E402

from fixtures.reference import lfm2_vl as recorder  # noqa: E402
from tests.conftest import PROCESSORS  # noqa: E402
from vlmlint.models import CountError, lfm2_vl, load_model  # noqa: E402

FOLDER = PROCESSORS / "lfm2-vl-1.6b"
KWARGS = [
    {}, {"use_thumbnail": False}, {"max_image_tokens": 128}, {"min_tiles": 1, "max_tiles": 6},
    {"max_pixels_tolerance": 1.0}, {"do_image_splitting": False}, {"min_image_tokens": 16},
]  # fmt: skip


@pytest.fixture(scope="module")
def model():
    return load_model(str(FOLDER))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, 12000), st.integers(1, 12000), st.sampled_from(KWARGS))
@example(1, 1, {})
@example(724, 724, {})
@example(725, 725, {})
@example(1, 4000, {})
@example(2176, 1024, {})
def test_layout_is_resize_and_split(model, height, width, kwargs):
    """The image processor's own size helpers (the same calls resize_and_split makes, no pixels)."""
    s = dataclasses.replace(model.settings, **kwargs)
    ip = model.image_processor
    min_tiles, max_tiles = (s.min_tiles, s.max_tiles) if s.do_image_splitting else (1, 1)
    new_w, new_h = ip.smart_resize(
        height, width, s.downsample_factor, s.min_image_tokens, s.max_image_tokens, s.encoder_patch_size
    )
    large = ip._is_image_too_large(
        height, width, s.max_image_tokens, s.encoder_patch_size, s.downsample_factor, s.max_pixels_tolerance
    )
    if large and not min_tiles == max_tiles == 1:
        cols, rows, *_ = ip._get_grid_layout(height, width, min_tiles, max_tiles, s.tile_size)
    else:
        rows = cols = 1
    assert lfm2_vl.layout(height, width, s) == (rows, cols, new_h, new_w)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.integers(1, 2500),
    st.integers(1, 2500),
    st.sampled_from(KWARGS + [{"use_image_special_tokens": False}]),
)
@example(16, 16000, {})
@example(1, 100000, {})
@example(1000, 1000, {})
def test_whole_call_matches_the_processor(model, height, width, kwargs):
    """image_rows / cols / sizes and every special token of the real processor's input_ids."""
    s = dataclasses.replace(model.settings, **kwargs)
    got = recorder.record({"folder": recorder.FOLDER, "sizes": [[height, width]], "kwargs": kwargs})
    if "error" in got:
        with pytest.raises(CountError):
            lfm2_vl.count(height, width, s)
        return
    count = lfm2_vl.count(height, width, s)
    (image,) = got["images"]
    assert list(count.grid) == [image["rows"], image["cols"], *image["size"]]
    assert count.tokens == got["specials"]["<image>"]
    expansion = lfm2_vl.expand(count, s)
    texts = [x for x in expansion if isinstance(x, str)]
    for token in ("<|image_start|>", "<|image_end|>", "<|img_thumbnail|>"):
        assert texts.count(token) == got["specials"][token], token
    assert sum(t.startswith("<|img_row_") for t in texts) == got["tile_markers"]


def test_verify_runs_the_real_image_processor(model):
    images = [Image.new("RGB", (w, h)) for h, w in [(300, 1000), (1, 4000), (2000, 2000), (1080, 1920)]]
    exact = lfm2_vl.count_exact(model.image_processor, images, model.settings)
    assert exact == [lfm2_vl.count(i.height, i.width, model.settings) for i in images]
