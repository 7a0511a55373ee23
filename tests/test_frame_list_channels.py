"""Frame lists 1 or 3 px high: transformers' video processors read such frames channels-first (W px high,
3 px wide). Gemma 4 and LLaVA-NeXT-Video reproduce it (models/base.frames_as_read; proven against the
real processors in tests/reference/test_llava_next_video.py and the Gemma 4 records); Qwen-VL and GLM
do not, so they refuse such a frame list instead of counting it wrong."""

from __future__ import annotations

import dataclasses

import pytest

from tests.conftest import PROCESSORS
from vlmlint.models import load_model
from vlmlint.models.base import CountError, frames_as_read
from vlmlint.records import VideoMeta


def _frames(height: int, width: int, frames_from: str = "frame list") -> VideoMeta:
    meta = VideoMeta(frames=4, fps=24.0, duration=4 / 24, width=width, height=height, header_frames=4)
    return dataclasses.replace(meta, frames_from=frames_from)


@pytest.mark.parametrize(
    ("height", "width", "read"), [(1, 40, (40, 3)), (3, 500, (500, 3)), (2, 40, (2, 40))]
)
def test_frames_as_read(height, width, read):
    assert frames_as_read(_frames(height, width)) == read
    assert frames_as_read(_frames(height, width, "header")) == (height, width)  # a decoded clip: as stored


@pytest.mark.parametrize("folder", ["qwen2-vl", "qwen3-vl", "glm-4.1v-9b-thinking"])
def test_families_that_do_not_reproduce_it_refuse(folder):
    model = load_model(str(PROCESSORS / folder))
    if model.video_settings is None:  # this transformers release's videos are refused for it already
        pytest.skip(f"{folder}: videos not counted here: {model.video_refusal}")
    with pytest.raises(CountError, match="channels-first"):
        model.family.count_video(_frames(3, 64), model.video_settings)
    try:  # a frame list 28 px high is counted, or refused for another reason (sampling a list of images)
        model.family.count_video(_frames(28, 64), model.video_settings)
    except CountError as exc:
        assert "channels-first" not in str(exc)
