"""SmolVLM2 videos against the real SmolVLMVideoProcessor's recorded outputs (fixtures/reference/smolvlm_video.json,
recorded in the reference venv through SmolVLMProcessor): per row of clips, each video's intro (frame count in
words, H:MM:SS duration), its "Frame from MM:SS:" stamps and <image> runs, the row's <image> ids, the padded
frame axis and the whole input_ids length, or the processor's refusal; the settings read as
AutoVideoProcessor reads the fixture folder; PyAV clips scanned end to end, one and two to a row."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from fixtures.reference import _records, smolvlm_video
from tests.conftest import PROCESSORS
from tests.families.test_llava_onevision_video import write_clip
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError, idefics3, load_model
from vlmlint.models.base import Run, VideoCount
from vlmlint.models.video_config import video_processor_config
from vlmlint.records import VideoMeta

RECORDS = _records.load("smolvlm_video")
CASES = RECORDS["cases"]
FOLDER = PROCESSORS / smolvlm_video.FOLDER

pytestmark = pytest.mark.skipif(
    _records.version_mismatch("smolvlm_video") is not None,
    reason=str(_records.version_mismatch("smolvlm_video")),
)


@pytest.fixture(scope="module")
def scanner() -> Scanner:
    return Scanner(ScanConfig(dataset="", model=str(FOLDER)))


def file_config(config: dict) -> dict:
    """The video processor's settings as vlmlint reads the folder, with a case's keys (None: removed)."""
    _, settings, _ = video_processor_config(str(FOLDER), {}, "smolvlm")
    for key, value in config.items():
        if value is None:
            settings.pop(key, None)
        else:
            settings[key] = value
    return settings


def meta(spec: dict) -> VideoMeta:
    height, width = spec["size"]
    if spec.get("frame_list"):
        return VideoMeta(
            frames=spec["frames"],
            fps=None,
            duration=None,
            width=width,
            height=height,
            frames_from="frame list",
        )
    fps = spec["fps"]
    return VideoMeta(
        frames=spec["frames"], fps=fps, duration=spec["frames"] / fps, width=width, height=height
    )


def count_row(case: dict, scanner: Scanner) -> tuple[list[VideoCount], idefics3.SmolVLMVideoSettings]:
    """The row's videos as the engine counts them: video_settings_from, count_video each, row_videos."""
    settings = idefics3.video_settings_from(
        file_config(case["config"]), scanner.model.settings, "SmolVLMProcessor"
    )
    counts = [idefics3.count_video(meta(spec), settings) for spec in case["videos"]]
    return idefics3.row_videos(counts, settings), settings


def row_length(scanner: Scanner, videos: list[VideoCount], settings: idefics3.SmolVLMVideoSettings) -> int:
    """The recorder's prompt composed with the row's videos and tokenized."""
    saved_settings = scanner.model.video_settings
    scanner.model.video_settings = settings  # the expansion reads the model's video settings
    try:
        composed, saved = scanner.encoder.compose(smolvlm_video.prompt(len(videos)), [], videos=tuple(videos))
    finally:
        scanner.model.video_settings = saved_settings
    ids = scanner.model.tokenizer(composed, add_special_tokens=scanner.model.family.add_special_tokens)
    return len(ids["input_ids"]) + saved


def written(expansion) -> str:
    return "".join(seg.token * seg.count if isinstance(seg, Run) else seg for seg in expansion)


def test_video_settings_are_the_folders_video_sampling():
    """No video processor file: SmolVLMVideoProcessor (config.json's model_type smolvlm) from
    preprocessor_config.json, whose video_sampling gives fps 1 and 64 frames; do_sample_frames is the
    class default, False."""
    model = load_model(str(FOLDER))
    assert model.video_refusal is None
    assert model.video_settings == idefics3.SmolVLMVideoSettings(
        image_seq_len=64,
        do_sample_frames=False,
        num_frames=64,
        fps=1,
        do_pad=True,
        do_resize=True,
        max_image_size=512,
    )


def test_smolvlm_v1_and_idefics3_say_why_videos_are_not_counted():
    for name in ("smolvlm-256m-instruct", "idefics3-8b-llama3"):
        model = load_model(str(PROCESSORS / name))
        assert model.video_settings is None
        assert "Idefics3Processor" in model.video_refusal


def _id(case: dict) -> str:
    clips = "+".join(
        f"{c['frames']}f{c['size'][0]}x{c['size'][1]}@{'list' if c.get('frame_list') else format(c['fps'], '.3g')}"
        for c in case["videos"]
    )
    return f"{clips}-{json.dumps(case['config'], sort_keys=True) if case['config'] else 'hub'}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_formula_matches_the_real_video_processor(case, scanner):
    result = case["result"]
    if "error" in result:
        with pytest.raises(CountError):
            count_row(case, scanner)
        return
    videos, settings = count_row(case, scanner)
    for video, real in zip(videos, result["videos"], strict=True):
        assert video.frames == len(real["stamps"]) == real["image_runs"] // 64
        assert video.tokens == real["image_runs"]
        text = written(idefics3.expand_video(video, settings))
        assert len(text) == real["chars"]
        (intro,) = smolvlm_video.INTRO.findall(text)
        assert intro == (real["frame_words"], real["duration"])
        assert smolvlm_video.STAMP.findall(text) == real["stamps"]
    assert max(video.grid[0] for video in videos) == result["padded_frames"]
    assert sum(video.tokens for video in videos) == result["image_tokens"]
    assert row_length(scanner, videos, settings) == result["input_ids"]


def test_the_records_cover_sampling_modes_rows_and_refusals():
    configs = [case["config"] for case in CASES]
    assert {} in configs and smolvlm_video.SAMPLE in configs and {"do_resize": False} in configs
    assert sum("error" in case["result"] for case in CASES) >= 4
    assert any(spec.get("frame_list") for case in CASES for spec in case["videos"])
    assert any(len(case["videos"]) >= 2 for case in CASES if "error" not in case["result"])
    durations = [v["duration"] for case in CASES for v in case["result"].get("videos", [])]
    assert "1 day, 1:00:00" in durations and any(d.startswith("2:") for d in durations)
    stamps = [s for case in CASES for v in case["result"].get("videos", []) for s in v["stamps"]]
    assert any(int(stamp.split(":")[0]) >= 100 for stamp in stamps)


def test_the_expansion_is_the_processors_replacement_text():
    """replace_video_token's string for two frames at 0 s and 61.5 s of a 62 s clip, 3 tokens a frame."""
    count = VideoCount(2, 512, 512, (2, 62), 6, "every frame", (0.0, 61.5))
    settings = idefics3.SmolVLMVideoSettings(image_seq_len=3)
    block = "<fake_token_around_image><global-img>" + "<image>" * 3 + "<fake_token_around_image>"
    assert written(idefics3.expand_video(count, settings)) == (
        "You are provided the following series of two frames from a 0:01:02 [H:MM:SS] video.\n"
        f"\nFrame from 00:00:{block}\nFrame from 01:01:{block}\n\n"
    )
    assert str(timedelta(seconds=62)) == "0:01:02"


def _rows(tmp_path, videos: list[str]) -> Scanner:
    rows = [{"messages": [{"role": "user", "content": "<video>" * len(videos) + "Describe."},
                          {"role": "assistant", "content": "Nothing."}], "videos": videos}]  # fmt: skip
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return Scanner(ScanConfig(dataset=str(tmp_path / "rows.jsonl"), model=str(FOLDER), jobs=1))


def test_a_video_row_is_counted_end_to_end(tmp_path):
    """A row's <video>: read from the clip's header, rendered by the chat template, expanded and counted."""
    write_clip(tmp_path / "a.mp4", 6, 48, 64)
    scanner = _rows(tmp_path, ["a.mp4"])
    (outcome,) = list(scanner.scan())
    result = outcome.result
    (info,) = result.media
    assert (info.tokens, info.sampled) == (6 * 64, 6)
    assert info.counted_by == "idefics3: every frame (do_sample_frames is false)"
    assert not result.lengths_lower_bound and "VLM109" not in {f.code for f in outcome.findings}
    rendered = scanner.encoder.render(result.sample.messages, videos=True)
    assert rendered.count("<video>") == 1
    count = idefics3.count_video(
        VideoMeta(frames=6, fps=4.0, duration=1.5, width=64, height=48), scanner.model.video_settings
    )
    composed, saved = scanner.encoder.compose(rendered, [], videos=(count,))
    assert "series of six frames from a 0:00:01" in composed
    assert result.seq_len == len(scanner.model.tokenizer(composed)["input_ids"]) + saved


def test_two_clips_in_a_row_name_the_longer_ones_frame_count(tmp_path):
    """One processor call pads pixel_values to the most frames: up to transformers 5.24 both intros say
    'ten'; from 5.25 each names its own clip's (len(timestamps))."""
    write_clip(tmp_path / "a.mp4", 3, 48, 64)
    write_clip(tmp_path / "b.mp4", 10, 48, 64)
    scanner = _rows(tmp_path, ["a.mp4", "b.mp4"])
    (outcome,) = list(scanner.scan())
    result = outcome.result
    assert [info.sampled for info in result.media] == [3, 10]
    rendered = scanner.encoder.render(result.sample.messages, videos=True)
    counts = idefics3.row_videos(
        [
            idefics3.count_video(VideoMeta(n, 4.0, n / 4, 64, 48), scanner.model.video_settings)
            for n in (3, 10)
        ],
        scanner.model.video_settings,
    )
    composed, saved = scanner.encoder.compose(rendered, [], videos=tuple(counts))
    if scanner.model.video_settings.intro_names_own_frames:
        assert composed.count("series of three frames") == composed.count("series of ten frames") == 1
    else:
        assert composed.count("series of ten frames") == 2
    assert result.seq_len == len(scanner.model.tokenizer(composed)["input_ids"]) + saved
