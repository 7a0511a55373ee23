"""--pipeline swift's video counts against qwen-vl-utils 0.0.14's and ms-swift 4.6.0's own code.

fixtures/qwen_vl_utils_videos.json (fixtures/qwen_vl_utils_video_record.py, in a throwaway environment
with torch, torchcodec, qwen-vl-utils and ms-swift, none of which vlmlint installs) holds, for every
fixture clip, each setting of swift's environment variables and the Qwen2-VL and Qwen3-VL fixture
processors: what fetch_video returned with the real torchcodec reader (frames, size, frames_indices,
fps, or its error) and what swift's Template.encode made of a one-video row (input_ids length, video
tokens, grid, the text around them). Its `synthetic` part is fetch_video's sizing on a seeded grid of clip
facts. Here vlmlint's prediction, from the clip's header alone, is compared with each.
"""

from __future__ import annotations

import json
import shutil
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import PROCESSORS
from vlmlint.config import build_config
from vlmlint.engine import Scanner
from vlmlint.models import load_model
from vlmlint.models.base import CountError
from vlmlint.pipelines import PipelineError, load_pipeline
from vlmlint.pipelines.swift import SWIFT_VERSION, VIDEO_DEFAULTS, qvu_fetch_video, torch_linspace_round
from vlmlint.records import VideoMeta
from vlmlint.video import probe_video

ROOT = Path(__file__).resolve().parents[1]
RECORD = json.loads((ROOT / "fixtures" / "qwen_vl_utils_videos.json").read_text())
CLIP_CASES = RECORD["clips"]


@cache
def _model(name: str):
    return load_model(str(PROCESSORS / name))


def _options(setting: dict) -> dict:
    return {key: float(value) if key == "FPS" else int(value) for key, value in setting.items()}


def _bound(model: str, setting: dict):
    pipeline = load_pipeline("swift", _options(setting))
    pipeline.bind(_model(model))
    return pipeline


def test_record_was_made_with_the_pinned_versions():
    assert RECORD["trainer"] == SWIFT_VERSION
    assert RECORD["qwen_vl_utils"] == "0.0.14"
    assert RECORD["reader"] == "torchcodec"
    # the record holds counted clips and refused ones, for both templates
    assert {case["model"] for case in CLIP_CASES} == {"qwen2-vl", "qwen3-vl"}
    assert any("error" in case["encode"] for case in CLIP_CASES)
    assert sum("error" not in case["encode"] for case in CLIP_CASES) > 200


@pytest.mark.parametrize("index", range(len(RECORD["synthetic"])))
def test_sizing_matches_fetch_video_on_clip_facts(index):
    case = RECORD["synthetic"][index]
    facts, fetched = case["facts"], case["fetch"]
    meta = VideoMeta(
        frames=facts["frames"],
        fps=facts["fps"],
        duration=facts["frames"] / facts["fps"],
        width=facts["width"],
        height=facts["height"],
        header_frames=facts["frames"],
        content_fps=facts["fps"],
    )
    constants = {**VIDEO_DEFAULTS, **case["constants"]}
    if "error" in fetched:
        with pytest.raises(CountError):
            qvu_fetch_video(meta, constants, case["patch"])
        return
    video = qvu_fetch_video(meta, constants, case["patch"])
    assert (video.frames, [video.height, video.width]) == (fetched["frames"], fetched["size"])
    assert list(video.indices) == fetched["indices"]
    assert (video.total, video.fps) == (fetched["total"], fetched["fps"])


def test_linspace_is_torchs():
    # a few of torch.linspace(...).round() values, from the record's indices
    for case in RECORD["synthetic"]:
        fetched = case["fetch"]
        if "indices" in fetched:
            indices = fetched["indices"]
            assert torch_linspace_round(0, fetched["total"] - 1, len(indices)) == indices


def _avi_every_frame(case: dict, meta: VideoMeta, pipeline) -> bool:
    """The known gap (docs/video.md, Limits): torchcodec fails on an MPEG-4 AVI with B-frames when asked
    for every one of its frames (qwen-vl-utils then falls back to torchvision's missing read_video);
    vlmlint, which sees no codec in the header facts it keeps, counts the frames."""
    if not case["clip"].endswith(".avi"):
        return False
    video = qvu_fetch_video(meta, pipeline.video_constants, pipeline.video_patch_size)
    return video.frames == video.total


def _clip_ids():
    return [f"{c['model']}-{json.dumps(c['setting'])}-{Path(c['clip']).name}" for c in CLIP_CASES]


@pytest.mark.parametrize("case", CLIP_CASES, ids=_clip_ids())
def test_clip_counts_match_fetch_video_and_swifts_encode(case):
    model = "qwen2-vl" if case["model"] == "qwen2-vl" else "qwen3-vl"
    pipeline = _bound(model, case["setting"])
    loaded = _model(model)
    try:
        meta = probe_video(str(ROOT / case["clip"]))
    except Exception:  # noqa: BLE001 (vlmlint's VLM201: the row is not counted; swift fails on it too)
        assert "error" in case["encode"]
        return
    fetched, encoded = case["fetch"], case["encode"]
    if "error" in fetched:
        assert "error" in encoded
        if _avi_every_frame(case, meta, pipeline):
            return
        with pytest.raises(CountError):
            pipeline.count_video(loaded.family, meta, loaded.video_settings)
        return
    count = pipeline.count_video(loaded.family, meta, loaded.video_settings)
    assert (count.frames, [count.resized_height, count.resized_width]) == (fetched["frames"], fetched["size"])
    assert list(count.grid) == encoded["grid"]
    assert count.tokens == encoded["video_tokens"]
    if model == "qwen3-vl":  # the timestamps swift's processor call writes, as text
        stamps = [f"<{t:.1f} seconds>" for t in count.timestamps[: count.grid[0]]]
        assert "".join(f"{s}<|vision_start|><|vision_end|>" for s in stamps) in encoded["text"]


def _row_cases():
    keys = sorted({(c["model"], json.dumps(c["setting"])) for c in CLIP_CASES})
    return [pytest.param(model, setting, id=f"{model}-{setting}") for model, setting in keys]


@pytest.mark.parametrize(("model", "setting"), _row_cases())
def test_rows_match_swifts_encoded_length(tmp_path, model, setting):
    """A one-video row per clip scanned with --pipeline swift: the length swift's Template.encode gives."""
    cases = [c for c in CLIP_CASES if c["model"] == model and json.dumps(c["setting"]) == setting]
    rows = []
    for case in cases:
        name = Path(case["clip"]).name
        shutil.copy(ROOT / case["clip"], tmp_path / name)
        rows.append(
            {
                "messages": [
                    {"role": "user", "content": "<video>What happens?"},
                    {"role": "assistant", "content": "A blank clip."},
                ],
                "videos": [name],
            }
        )
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = build_config(
        str(tmp_path / "data.jsonl"),
        {},
        {
            "model": str(PROCESSORS / model),
            "jobs": 1,
            "pipeline": "swift",
            "pipeline_options": _options(json.loads(setting)),
        },
    )
    outcomes = list(Scanner(config, model=_model(model)).scan())
    assert len(outcomes) == len(cases)
    # swift's Qwen3VLTemplate writes a bare <|video_pad|> and takes each video's tokens from the processor's
    # own expansion of <|vision_start|><|video_pad|><|vision_end|> (swift/template/templates/qwen.py,
    # Qwen3VLTemplate._encode). The record was made on transformers 5.24.0; from 5.25 that expansion drops
    # the outer pair (the processor's outputs on 5.25.0: fixtures/reference/qwen_video@5.25.0.json), so
    # swift encodes each video 2 tokens shorter there.
    video_settings = _model(model).video_settings
    shorter = 2 if model == "qwen3-vl" and video_settings.wrapper_collapsed else 0
    for outcome, case in zip(outcomes, cases, strict=True):
        result, encoded = outcome.result, case["encode"]
        counted = result.trainer is not None and not result.lengths_lower_bound
        if "error" in encoded:
            if case["clip"].endswith(".avi") and counted:  # the known AVI gap above
                continue
            assert not counted, case["clip"]
            continue
        assert counted, (case["clip"], result.count_error)
        assert result.trainer.length == encoded["length"] - shorter, case["clip"]
        (video,) = result.media
        assert video.tokens == encoded["video_tokens"]
        assert video.counted_by.startswith("qwen-vl: ms-swift 4.6.0")


def test_the_10s_720p_clip():
    """docs/video.md's worked example: 10 s of 1280x720 at 30 fps under swift's defaults and settings."""
    meta = VideoMeta(
        frames=300, fps=30.0, duration=10.0, width=1280, height=720, header_frames=300, content_fps=30.0
    )
    expected = {
        ("qwen2.5-vl", "{}"): (20, 560, 1008, 7200),
        ("qwen2.5-vl", '{"FPS": 1}'): (10, 560, 1008, 3600),
        ("qwen2.5-vl", '{"VIDEO_MAX_PIXELS": 151200}'): (20, 280, 504, 1800),
        ("qwen3-vl", "{}"): (20, 640, 1152, 7200),
    }
    for (profile, setting), (frames, height, width, tokens) in expected.items():
        model = load_model(profile)
        pipeline = load_pipeline("swift", json.loads(setting))
        pipeline.bind(model)
        count = pipeline.count_video(model.family, meta, model.video_settings)
        assert (count.frames, count.resized_height, count.resized_width, count.tokens) == (
            frames,
            height,
            width,
            tokens,
        )


def test_other_models_videos_are_not_counted_and_options_are_checked():
    pipeline = load_pipeline("swift", {})
    pipeline.bind(_model("llama-4-scout-17b-16e-instruct"))
    assert pipeline.video_sampling is None  # VLM109: the trainer's video sampling is not reproduced
    qwen = _bound("qwen2-vl", {})
    assert qwen.video_sampling == "swift (qwen-vl-utils)"
    for options in ({"FPS": 0}, {"FPS_MAX_FRAMES": 2.5}, {"VIDEO_MAX_PIXELS": "a"}):
        with pytest.raises(PipelineError):
            load_pipeline("swift", options)
    with pytest.raises(PipelineError, match="not reproduced"):
        load_pipeline("swift", {"FORCE_QWENVL_VIDEO_READER": "decord"})
    # VIDEO_MAX_PIXELS becomes VIDEO_MAX_TOKEN_NUM as compat_qwen_vl_utils converts it (patch 14 x merge 2)
    assert _bound("qwen2-vl", {"VIDEO_MAX_PIXELS": 50176}).video_constants["VIDEO_MAX_TOKEN_NUM"] == 64
    assert _bound("qwen3-vl", {"VIDEO_MAX_PIXELS": 50176}).video_constants["VIDEO_MAX_TOKEN_NUM"] == 49
