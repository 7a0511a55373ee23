"""Rows with videos: max_position_id against the real processor and the real get_rope_index (reference
venv only: torch and torchvision).

Each row (fixture clips and generated ones, images among them) is scanned; the fixture folder's real
processor (AutoProcessor: its real video processor) then gets the chat template's text, the images and
each clip as transformers' default reader hands it to the video processor (blank frames of the clip's
upright size and the VideoMetadata of its frame count and fps: fixtures/reference/_video.blank_clip),
and the model class's own get_rope_index (Qwen2VLModel / Qwen2_5_VLModel / Qwen3VLModel, called on a
stub that holds the folder's real config) gives the position ids: their largest is the row's
max_position_id, and their count its seq_len. hypothesis varies the clip's length, size and rate.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

import transformers  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from PIL import Image  # noqa: E402

from fixtures.clips import encode  # noqa: E402
from fixtures.reference._video import blank_clip  # noqa: E402
from tests.conftest import PROCESSORS  # noqa: E402
from tests.test_video_positions import CLIPS, _sample  # noqa: E402
from vlmlint.config import ScanConfig  # noqa: E402
from vlmlint.engine import Scanner  # noqa: E402
from vlmlint.template_cache import conversation_for_template  # noqa: E402

MODELS = {
    "qwen2-vl": transformers.Qwen2VLModel,
    "qwen2.5-vl": transformers.Qwen2_5_VLModel,
    "qwen3-vl": transformers.Qwen3VLModel,
}
SCANNERS: dict[str, Scanner] = {}
PROCESSOR_CACHE: dict[str, object] = {}


def _scanner(folder: str) -> Scanner:
    if folder not in SCANNERS:
        SCANNERS[folder] = Scanner(ScanConfig(dataset="", model=str(PROCESSORS / folder), max_length=1))
    return SCANNERS[folder]


def _processor(folder: str):
    if folder not in PROCESSOR_CACHE:
        PROCESSOR_CACHE[folder] = transformers.AutoProcessor.from_pretrained(str(PROCESSORS / folder))
    return PROCESSOR_CACHE[folder]


class _Stub:
    """`self` for the model class's get_rope_index: its config and its own get_vision_position_ids."""

    def __init__(self, model_class, config) -> None:
        self.config = config
        self._model_class = model_class

    def get_vision_position_ids(self, *args, **kwargs):
        return self._model_class.get_vision_position_ids(self, *args, **kwargs)


def real_positions(folder: str, sample, result) -> torch.Tensor:
    processor = _processor(folder)
    text = processor.apply_chat_template(conversation_for_template(sample.messages))
    images = [Image.open(ref.path).convert("RGB") for ref in sample.images]
    videos, metadata = [], []
    for info in result.media:
        meta = info.video.as_torchcodec()
        video, meta_data = blank_clip(meta.frames, meta.height, meta.width, meta.fps)
        videos.append(video)
        metadata.append(meta_data)
    output = processor(
        text=[text], images=images or None, videos=videos, video_metadata=metadata, return_tensors="pt"
    )
    model_class = MODELS[folder]
    config = transformers.AutoConfig.from_pretrained(str(PROCESSORS / folder))
    positions, _ = model_class.get_rope_index(
        _Stub(model_class, config),
        input_ids=output["input_ids"],
        mm_token_type_ids=output["mm_token_type_ids"],
        image_grid_thw=output.get("image_grid_thw"),
        video_grid_thw=output.get("video_grid_thw"),
        second_per_grid_ts=output.get("second_per_grid_ts"),
    )
    return positions


def _check(folder: str, sample, refusals: bool = False) -> int | None:
    result = next(_scanner(folder).scan_samples([sample])).result
    if refusals and result.count_error is not None:  # (the video processor's refusal: another test's)
        return None
    assert result.count_error is None and result.seq_len is not None
    positions = real_positions(folder, sample, result)
    assert positions.shape[-1] == result.seq_len
    assert result.max_position_id == int(positions.max())
    return result.max_position_id


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    folder = tmp_path_factory.mktemp("video-positions-reference")
    files = {}
    for name, (width, height) in {"wide.png": (900, 200), "small.png": (100, 300)}.items():
        Image.new("RGB", (width, height), (10, 20, 30)).save(folder / name)
        files[name] = folder / name
    (folder / "long.mp4").write_bytes(encode("mp4", "libx264", 32, 24, 1, 120))
    (folder / "long30.mp4").write_bytes(encode("mp4", "libx264", 64, 48, Fraction(30000, 1001), 90))
    files["long.mp4"], files["long30.mp4"] = folder / "long.mp4", folder / "long30.mp4"
    for name in ("mpeg4_96x64_60fps.mkv", "h264_320x240_24fps.mp4", "mpeg4_64x48_29.97fps.mp4", "rot90.mp4"):
        files[name] = CLIPS / name
    return files


ROWS = [
    ["mpeg4_64x48_29.97fps.mp4"],
    ["long.mp4"],
    ["rot90.mp4", "long30.mp4"],
    ["wide.png", "long.mp4", "small.png"],
    ["long30.mp4", "wide.png", "mpeg4_96x64_60fps.mkv"],
    ["h264_320x240_24fps.mp4", "long.mp4", "small.png", "long30.mp4"],
]


@pytest.mark.parametrize("folder", sorted(MODELS))
@pytest.mark.parametrize("items", ROWS, ids="+".join)
def test_max_position_id_is_the_real_get_rope_index(folder, items, media):
    _check(folder, _sample(media, items))


RATES = [1, 2, 12, 24, 25, Fraction(30000, 1001), 60]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    folder=st.sampled_from(sorted(MODELS)),
    frames=st.integers(1, 160),
    width=st.integers(16, 160),
    height=st.integers(16, 160),
    rate=st.sampled_from(RATES),
    with_image=st.booleans(),
)
def test_generated_clips(folder, frames, width, height, rate, with_image, media, tmp_path_factory):
    path = tmp_path_factory.mktemp("clip") / "clip.mp4"
    path.write_bytes(encode("mp4", "libx264", width - width % 2, height - height % 2, rate, frames))
    files = dict(media, **{"clip.mp4": path})
    _check(folder, _sample(files, ["clip.mp4", "wide.png"] if with_image else ["clip.mp4"]), refusals=True)
