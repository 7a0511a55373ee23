"""Differential tests: vlmlint's Qwen-VL formula against the real transformers image processor."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from vlmlint.models import CountError, qwen_vl

HUB_QWEN2 = dict(patch_size=14, merge_size=2, temporal_patch_size=2, min_pixels=3136, max_pixels=12845056)
HUB_QWEN3 = dict(patch_size=16, merge_size=2, temporal_patch_size=2, min_pixels=65536, max_pixels=16777216)


def real_grid(height: int, width: int, **kw):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    processor = Qwen2VLImageProcessorPil(**kw)
    image = Image.fromarray(np.zeros((height, width, 3), dtype=np.uint8))
    grid = processor(images=[image])["image_grid_thw"][0]
    return tuple(int(v) for v in grid)


def formula(height: int, width: int, **kw):
    settings = qwen_vl.QwenSettings(**kw)
    return qwen_vl.count(height, width, settings)


def assert_same(height: int, width: int, kw: dict) -> None:
    try:
        expected = real_grid(height, width, **kw)
    except ValueError as exc:
        assert "aspect ratio" in str(exc)
        with pytest.raises(CountError):
            formula(height, width, **kw)
        return
    got = formula(height, width, **kw)
    assert got.grid == expected
    assert got.tokens == expected[0] * expected[1] * expected[2] // kw["merge_size"] ** 2
    assert (got.resized_height, got.resized_width) == (
        expected[1] * kw["patch_size"],
        expected[2] * kw["patch_size"],
    )


EDGES = [
    (1, 1),
    (1, 4000),
    (4000, 1),
    (1, 199),
    (1, 200),
    (1, 201),
    (10, 1990),
    (10, 2000),
    (10, 2010),
    (28, 28),
    (27, 27),
    (29, 29),
    (41, 42),
    (42, 42),
    (43, 42),
    (14, 14),
    (56, 56),
    (55, 57),
    (1080, 1920),
    (336, 336),
    (224, 224),
    (3000, 4000),
    (3584, 3584),
    (3585, 3585),
]


@pytest.mark.parametrize("height,width", EDGES)
def test_qwen2_edges_match_real_processor(height, width):
    assert_same(height, width, HUB_QWEN2)


@pytest.mark.parametrize(
    "height,width", [(1, 1), (16, 16), (32, 32), (48, 47), (255, 256), (1080, 1920), (4095, 1)]
)
def test_qwen3_edges_match_real_processor(height, width):
    assert_same(height, width, HUB_QWEN3)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    height=st.integers(1, 1600),
    width=st.integers(1, 1600),
    patch=st.sampled_from([14, 16]),
    merge=st.sampled_from([1, 2]),
    min_tokens=st.integers(1, 64),
    max_tokens=st.integers(64, 2048),
)
@example(height=100, width=37, patch=14, merge=2, min_tokens=4, max_tokens=1280)
def test_qwen_random_sizes_and_settings_match_real_processor(
    height, width, patch, merge, min_tokens, max_tokens
):
    factor = patch * merge
    kw = dict(
        patch_size=patch,
        merge_size=merge,
        temporal_patch_size=2,
        min_pixels=min_tokens * factor * factor,
        max_pixels=max_tokens * factor * factor,
    )
    assert_same(height, width, kw)


def test_rounding_is_bankers_like_transformers():
    # 42 / 28 = 1.5 rounds to 2 (even), 70 / 28 = 2.5 rounds to 2 (even): Python's round, as transformers.
    assert qwen_vl.smart_resize(42, 70, 28, 3136, 12845056) == (56, 56)
