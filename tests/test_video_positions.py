"""M-RoPE positions of rows with videos (VLM404's max_position_id) against get_rope_index's video branch.

rope_positions ports Qwen2VLModel / Qwen2_5_VLModel / Qwen3VLModel.get_rope_index (transformers 5.24.0)
to numpy, videos included: a video's tokens get start + (t, h, w) on its (grid_t, grid_h / merge,
grid_w / merge) grid and the text after it starts at start + max(grid_h, grid_w) // merge, whatever
grid_t; Qwen2.5-VL steps t by tokens_per_second * second_per_grid_ts in float32 (the processor's list
becomes a float32 tensor), truncated; Qwen3-VL splits a video's grid into one (1, h, w) grid per
temporal group (its timestamps are text between them).

Here (no torch): the port follows the installed source; qwen_vl.video_position_span agrees with it
over hypothesis grids; and the engine's max_position_id for rows with clips and images equals the
port's largest position on input_ids from the real processor class (its image processor's
image_grid_thw, its tokenizer), the video pads written from the clip's grid (the video processor needs
torchvision: tests/families/test_qwen_video.py proves the grid against the real one, and
tests/reference/test_video_positions.py runs the real video processor and the real get_rope_index).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from fixtures.clips import encode
from tests.conftest import FIXTURES, PROCESSORS, real_processor
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import load_model, qwen_vl
from vlmlint.models.base import VideoCount
from vlmlint.records import ImageRef, MediaRef, Message, Part, Role, Sample
from vlmlint.template_cache import conversation_for_template

CLIPS = FIXTURES / "datasets" / "media" / "clips"


def rope_positions(
    token_types: list[int],
    image_grid_thw,
    video_grid_thw,
    merge: int,
    tokens_per_second: float | None = None,
    second_per_grid_ts=None,
    split_videos: bool = False,
) -> np.ndarray:
    """get_rope_index (transformers 5.24.0) for one row without padding, in numpy, line for line.

    `tokens_per_second` and `second_per_grid_ts`: Qwen2.5-VL's time scale (None: Qwen2-VL's 1.0);
    `split_videos`: Qwen3-VL's one (1, h, w) grid per temporal group.
    """
    videos = [tuple(int(v) for v in grid) for grid in video_grid_thw]
    if split_videos:
        videos = [(1, h, w) for t, h, w in videos for _ in range(t)]
    grids = {1: iter([tuple(int(v) for v in grid) for grid in image_grid_thw]), 2: iter(videos)}
    seconds = (
        iter(np.asarray(second_per_grid_ts, dtype=np.float32)) if second_per_grid_ts is not None else None
    )
    pieces, current = [], 0
    for modality, group in itertools.groupby(token_types):
        length = len(list(group))
        if modality == 0:
            pieces.append(np.broadcast_to(np.arange(length), (3, length)) + current)
            current += length
            continue
        grid_t, grid_h, grid_w = next(grids[modality])
        temporal = np.arange(grid_t)
        if modality == 2 and tokens_per_second is not None:
            assert seconds is not None
            interval = np.float32(tokens_per_second) * next(seconds)  # a float32 0-dim tensor
            temporal = (temporal.astype(np.float32) * interval).astype(np.int64)  # .long() truncates
        t_grid, h_grid, w_grid = np.meshgrid(
            temporal,
            np.arange(grid_h // merge) + current,
            np.arange(grid_w // merge) + current,
            indexing="ij",
        )
        vision = np.stack([t_grid, h_grid, w_grid]).reshape(3, -1)
        vision[0] += current
        assert vision.shape[1] == length  # one position per vision token
        pieces.append(vision)
        current += max(grid_h, grid_w) // merge
    return np.concatenate(pieces, axis=1)


@pytest.mark.parametrize("module", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_the_port_follows_the_installed_get_rope_index(module):
    source = Path(importlib.util.find_spec("transformers").origin).parent / "models" / module
    text = (source / f"modeling_{module}.py").read_text()
    assert "current_pos += max(grid_thw[1], grid_thw[2]) // spatial_merge_size" in text
    assert "position_temporal = (torch.arange(llm_grid_t, device=device) * time_interval).long()" in text
    assert "vision_position_ids[0] += start_position  # must be after time_interval multiply" in text
    if module == "qwen2_5_vl":
        assert "time_interval = tokens_per_second * next(second_per_grid_ts)" in text
    else:
        assert (
            "second_per_grid_ts" not in text.split("def get_rope_index", 1)[1].split("return position_ids")[0]
        )
    if module == "qwen3_vl":
        assert "video_grid_thw = torch.repeat_interleave(video_grid_thw, video_grid_thw[:, 0], dim=0)" in text
    processing = Path(importlib.util.find_spec("transformers").origin).parent / "models" / "qwen2_5_vl"
    assert (
        "second_per_grid_ts = [self.video_processor.temporal_patch_size / tmp for tmp in fps]"
        in (processing / "processing_qwen2_5_vl.py").read_text()
    )


# -- the formula over grids ---------------------------------------------------------------------------


def _video_settings(folder: str, **changes) -> qwen_vl.QwenVideoSettings:
    return dataclasses.replace(load_model(str(PROCESSORS / folder)).video_settings, **changes)


SETTINGS = {folder: _video_settings(folder) for folder in ("qwen2-vl", "qwen2.5-vl", "qwen3-vl")}


@settings(max_examples=400, deadline=None)
@given(
    folder=st.sampled_from(sorted(SETTINGS)),
    grid_t=st.integers(1, 300),
    grid_h=st.integers(1, 40).map(lambda n: 2 * n),
    grid_w=st.integers(1, 40).map(lambda n: 2 * n),
    before=st.integers(1, 30),
    after=st.integers(1, 30),
    tokens_per_second=st.sampled_from([1, 2, 4, 25, 0.5]),
    kept=st.integers(1, 400),
    total=st.integers(1, 400),
    fps=st.sampled_from([1.0, 2.0, 12.5, 24.0, 25.0, 30000 / 1001, 60.0]),
)
def test_video_position_span_is_get_rope_index(
    folder, grid_t, grid_h, grid_w, before, after, tokens_per_second, kept, total, fps
):
    """One video between two text runs (Qwen3-VL: `gap` text tokens between its frame groups): the
    largest position the port gives is the last text token's or, where the video reaches beyond the
    text after it, the video's own."""
    video_settings = dataclasses.replace(SETTINGS[folder], tokens_per_second=tokens_per_second)
    merge = video_settings.merge_size
    sampled_fps = kept / total * fps  # VideoMetadata.sampled_fps
    per_group = grid_h * grid_w // merge**2
    count = VideoCount(
        2 * grid_t, 0, 0, (grid_t, grid_h, grid_w), grid_t * per_group, "", sampled_fps=sampled_fps
    )
    spans = qwen_vl.video_position_span(count, video_settings)
    gap = 7  # "<1.5 seconds><|vision_start|>" and the group's <|vision_end|>, about
    if video_settings.qwen3:
        types = [0] * before + ([2] * per_group + [0] * gap) * (grid_t - 1) + [2] * per_group + [0] * after
        positions = rope_positions(types, [], [count.grid], merge, split_videos=True)
        text_between = gap * (grid_t - 1)
    else:
        types = [0] * before + [2] * count.tokens + [0] * after
        scale = video_settings.time_scaled
        positions = rope_positions(
            types, [], [count.grid], merge,
            tokens_per_second=tokens_per_second if scale else None,
            second_per_grid_ts=[video_settings.temporal_patch_size / sampled_fps] if scale else None,
        )  # fmt: skip
        text_between = 0
    assert spans.beyond is not None
    next_text = before + text_between + spans.advance  # the position of the token after the video
    assert positions[:, before + count.tokens + text_between].tolist() == [next_text] * 3
    assert int(positions.max()) == max(next_text + after - 1, next_text + spans.beyond)


def test_qwen2_5_vl_needs_the_frame_rate_and_the_time_scale():
    video_settings = SETTINGS["qwen2.5-vl"]
    assert video_settings.time_scaled and video_settings.tokens_per_second == 4  # the config class's default
    count = VideoCount(8, 56, 56, (4, 4, 4), 16, "", sampled_fps=None)
    assert qwen_vl.video_position_span(count, video_settings).beyond is None
    unknown = dataclasses.replace(video_settings, tokens_per_second=None)
    assert qwen_vl.video_position_span(dataclasses.replace(count, sampled_fps=2.0), unknown).beyond is None
    assert not SETTINGS["qwen2-vl"].time_scaled and SETTINGS["qwen2-vl"].tokens_per_second is None


# -- the engine on rows with clips and images -----------------------------------------------------


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    folder = tmp_path_factory.mktemp("video-positions")
    files = {}
    for name, (width, height) in {"wide.png": (900, 200), "small.png": (100, 300)}.items():
        Image.new("RGB", (width, height), (10, 20, 30)).save(folder / name)
        files[name] = folder / name
    # a long clip of small frames: many frame groups, few patches (its time reaches past its text)
    (folder / "long.mp4").write_bytes(encode("mp4", "libx264", 32, 24, 1, 120))
    (folder / "long30.mp4").write_bytes(encode("mp4", "libx264", 64, 48, Fraction(30000, 1001), 90))
    files["long.mp4"] = folder / "long.mp4"
    files["long30.mp4"] = folder / "long30.mp4"
    for name in ("mpeg4_96x64_60fps.mkv", "h264_320x240_24fps.mp4", "mpeg4_64x48_29.97fps.mp4"):
        files[name] = CLIPS / name
    return files


def _sample(media: dict, items: list[str]) -> Sample:
    parts, images, videos = [], [], []
    for position, item in enumerate(items):
        parts.append(Part(text=f"Part {position}: look at this.\n"))
        path = str(media[item])
        if item.endswith(".png"):
            parts.append(Part(is_image=True))
            images.append(ImageRef(path, path=path))
        else:
            parts.append(Part(media="video"))
            videos.append(MediaRef("video", path, path=path))
    parts.append(Part(text="What happens?"))
    messages = (Message(Role.USER, tuple(parts)), Message(Role.ASSISTANT, (Part(text="Not much."),)))
    return Sample(source="positions", index=0, messages=messages, images=tuple(images), media=tuple(videos))


SCANNERS: dict[str, Scanner] = {}


def _scanner(folder: str) -> Scanner:
    if folder not in SCANNERS:
        SCANNERS[folder] = Scanner(ScanConfig(dataset="", model=str(PROCESSORS / folder), max_length=1))
    return SCANNERS[folder]


ROWS = [
    ["mpeg4_64x48_29.97fps.mp4"],
    ["long.mp4"],
    ["wide.png", "long.mp4", "small.png"],
    ["long30.mp4", "wide.png", "mpeg4_96x64_60fps.mkv"],
    ["h264_320x240_24fps.mp4", "long.mp4", "small.png", "long30.mp4"],
]


@pytest.mark.parametrize("folder", ["qwen2-vl", "qwen2.5-vl"])
@pytest.mark.parametrize("items", ROWS, ids="+".join)
def test_max_position_id_of_rows_with_videos(folder, items, media):
    scanner = _scanner(folder)
    sample = _sample(media, items)
    result = next(scanner.scan_samples([sample])).result
    assert result.count_error is None and result.seq_len is not None
    video_settings = scanner.model.video_settings
    counts = [
        qwen_vl.count_video(info.video.as_torchcodec(), video_settings) for info in result.media if info.video
    ]
    processor = real_processor(PROCESSORS / folder)
    text = processor.apply_chat_template(conversation_for_template(sample.messages))
    pieces = text.split("<|video_pad|>")
    assert len(pieces) == len(counts) + 1
    text = pieces[0] + "".join(
        "<|video_pad|>" * c.tokens + piece for c, piece in zip(counts, pieces[1:], strict=True)
    )
    images = [Image.open(ref.path).convert("RGB") for ref in sample.images]
    # the pads are written already: the processor's check for videos to go with them is skipped
    token, processor.video_token = processor.video_token, None
    try:
        output = processor(text=[text], images=[images] if images else None, return_tensors=None)
    finally:
        processor.video_token = token
    types = list(output["mm_token_type_ids"][0])
    assert types.count(2) == sum(c.tokens for c in counts)
    scaled = video_settings.time_scaled
    positions = rope_positions(
        types, output.get("image_grid_thw", []), [c.grid for c in counts], video_settings.merge_size,
        tokens_per_second=video_settings.tokens_per_second if scaled else None,
        second_per_grid_ts=[video_settings.temporal_patch_size / c.sampled_fps for c in counts] if scaled else None,
    )  # fmt: skip
    assert positions.shape[1] == result.seq_len
    assert result.max_position_id == int(positions.max())
    if items == ["long.mp4"] and folder == "qwen2-vl":  # the case this proves: a video past its text
        assert result.max_position_id > result.seq_len - 1 - result.media[0].tokens + counts[0].grid[1] // 2


@pytest.mark.parametrize("items", ROWS[:3], ids="+".join)
def test_qwen3_vl_rows_with_videos_have_their_max_position(items, media):
    """Qwen3-VL's frame groups never reach past the text after them: the last token's position."""
    result = next(_scanner("qwen3-vl").scan_samples([_sample(media, items)])).result
    assert result.count_error is None and result.max_position_id is not None
    assert result.max_position_id < result.seq_len


def test_a_trainer_s_unknown_frame_rate_leaves_the_position_unknown(media):
    """--pipeline llamafactory: Qwen2VLPlugin's second_per_grid_ts comes from its own fps_per_video
    (not reproduced), so a Qwen2.5-VL row with a video gets no max_position_id; Qwen2-VL's does."""
    sample = _sample(media, ["long.mp4"])
    for folder, known in (("qwen2.5-vl", False), ("qwen2-vl", True)):
        config = ScanConfig(dataset="", model=str(PROCESSORS / folder), pipeline="llamafactory")
        result = next(Scanner(config).scan_samples([sample])).result
        assert result.seq_len is not None
        assert (result.max_position_id is not None) is known


def test_vlm404_fires_on_a_video_whose_positions_pass_the_context(media, tmp_path):
    """Qwen2.5-VL: a 2-minute 1 fps clip's frame groups reach position 497 in a 403-token row; with a
    context of 450 the row's tokens fit, its positions do not."""
    import json
    import shutil

    folder = tmp_path / "qwen2.5-vl-450"
    shutil.copytree(PROCESSORS / "qwen2.5-vl", folder)
    config = json.loads((folder / "config.json").read_text())
    config["max_position_embeddings"] = config["text_config"]["max_position_embeddings"] = 450
    (folder / "config.json").write_text(json.dumps(config))
    outcome = next(
        Scanner(ScanConfig(dataset="", model=str(folder))).scan_samples([_sample(media, ["long.mp4"])])
    )
    assert (outcome.result.seq_len, outcome.result.max_position_id) == (403, 497)
    (finding,) = [f for f in outcome.findings if f.code == "VLM404"]
    assert "largest M-RoPE position id 497 >= the model's context 450" in finding.message
    assert "though its 403 tokens fit" in finding.message


@pytest.mark.parametrize("light", [False, True])
def test_the_qwen2_5_vl_profile_has_its_checkpoint_s_time_scale(light):
    """Qwen/Qwen2.5-VL-7B-Instruct's config.json says tokens_per_second 2 (not the config class's 4):
    the built-in profile's trimmed config.json keeps it, on the light path too."""
    model = load_model("qwen2.5-vl", light=light)
    assert model.video_settings.time_scaled and model.video_settings.tokens_per_second == 2
