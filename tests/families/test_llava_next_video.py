"""LLaVA-NeXT-Video (fixtures/processors/llava-next-video-7b-hf).

Images: vlmlint's count (llava_next's, which the family imports) against the real LlavaNextVideoProcessor
(transformers' own class, its PIL image processor and the fixture tokenizer, built by tests/conftest.py's
real_processor): the <image> ids in input_ids and the whole length of a chat-template prompt, on the
pinpoint edges of tests/families/test_llava_next.py and hypothesis sizes.

Videos: against the real LlavaNextVideoVideoProcessor's recorded outputs (fixtures/reference/
llava_next_video.json, recorded in the reference venv): each clip's kept frames and frame size, its
<video> count and the whole input_ids length of a prompt with it (one or two videos), or the refusal.
"""

from __future__ import annotations

import dataclasses
import json
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from fixtures.reference import _records
from fixtures.reference import llava_next_video as recorder
from tests.conftest import PROCESSORS, real_processor
from tests.families.test_llava_next import EDGES, PINPOINT_SWITCHES, ROUNDING
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError, llava_next, llava_next_video, load_model
from vlmlint.models.base import VideoCount
from vlmlint.models.compat import installed_at_least
from vlmlint.models.llava import Size
from vlmlint.records import VideoMeta

FOLDER = PROCESSORS / recorder.FOLDER
RECORDS = _records.load("llava_next_video")
CASES = RECORDS["cases"]
IMAGE_PROMPT = "USER: <image>\nWhat is shown? ASSISTANT:"

video_records = pytest.mark.skipif(
    _records.version_mismatch("llava_next_video") is not None,
    reason=str(_records.version_mismatch("llava_next_video")),
)


@pytest.fixture(scope="module")
def scanner() -> Scanner:
    return Scanner(ScanConfig(dataset="", model=str(FOLDER)))


@pytest.fixture(scope="module")
def processor():
    return real_processor(FOLDER)


# ---- images ---------------------------------------------------------------------------------------


def test_the_family_claims_the_processor_with_llava_next_settings():
    model = load_model(str(FOLDER))
    assert model.family.name == "llava-next-video"
    assert (model.family.count, model.family.expand) == (llava_next.count, llava_next.expand)
    assert isinstance(model.settings, llava_next.LlavaNextSettings)
    assert (
        model.settings.patch_size,
        model.settings.dropped,
        model.settings.num_additional_image_tokens,
    ) == (
        14,
        1,
        1,
    )


def _real_image(processor, height: int, width: int) -> tuple[int, int] | str:
    image = Image.fromarray(np.zeros((height, width, 3), dtype=np.uint8))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ids = list(processor(text=[IMAGE_PROMPT], images=[image], return_tensors="np")["input_ids"][0])
    except (ValueError, ZeroDivisionError) as exc:
        return str(exc)
    return ids.count(processor.image_token_id), len(ids)


def _assert_image(processor, scanner, height: int, width: int) -> None:
    real = _real_image(processor, height, width)
    if isinstance(real, str):
        with pytest.raises(CountError):
            llava_next_video.count(height, width, scanner.model.settings)
        return
    count = llava_next_video.count(height, width, scanner.model.settings)
    composed, saved = scanner.encoder.compose(IMAGE_PROMPT, [count])
    length = len(scanner.model.tokenizer(composed)["input_ids"]) + saved
    assert (count.tokens, length) == real, (height, width)


@pytest.mark.parametrize("height,width", EDGES + PINPOINT_SWITCHES + ROUNDING)
def test_image_counts_match_the_real_processor(processor, scanner, height, width):
    _assert_image(processor, scanner, height, width)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, 2000), st.integers(1, 2000))
def test_image_counts_match_the_real_processor_on_any_size(processor, scanner, height, width):
    _assert_image(processor, scanner, height, width)


# ---- videos ---------------------------------------------------------------------------------------

CALL_KEYS = ("do_sample_frames", "fps", "num_frames", "do_resize", "do_center_crop")


def with_kwargs(
    settings_: llava_next_video.LlavaNextVideoSettings, kwargs: dict
) -> llava_next_video.LlavaNextVideoSettings:
    """The call kwargs a case passes, as the processor merges them over its own settings."""
    changes = {key: kwargs[key] for key in CALL_KEYS if key in kwargs}
    for key in ("size", "crop_size"):
        if key in kwargs:
            changes[key] = Size.of(kwargs[key])
    return dataclasses.replace(settings_, **changes)


def meta(frames: int, size: list[int], fps: float | None, frame_list: bool = False) -> VideoMeta:
    height, width = size
    if frame_list:
        return VideoMeta(
            frames=frames, fps=None, duration=None, width=width, height=height, frames_from="frame list"
        )
    return VideoMeta(frames=frames, fps=fps, duration=frames / fps, width=width, height=height)


def case_metas(case: dict) -> list[VideoMeta]:
    metas = [meta(case["frames"], case["size"], case["fps"], bool(case.get("frame_list")))]
    if case.get("pair"):
        metas.append(meta(case["pair"]["frames"], case["pair"]["size"], case["fps"]))
    return metas


def row_length(scanner: Scanner, videos: list[VideoCount]) -> int:
    """The recorder's prompt (the template's video slots and a text) composed and tokenized."""
    prompt = recorder.PAIR_PROMPT if len(videos) == 2 else recorder.PROMPT
    composed, saved = scanner.encoder.compose(prompt, [], videos=tuple(videos))
    ids = scanner.model.tokenizer(composed, add_special_tokens=scanner.model.family.add_special_tokens)
    return len(ids["input_ids"]) + saved


def ours(case: dict, video_settings) -> list[VideoCount]:
    """The formula for a case; CountError where the processor would refuse it."""
    if case.get("no_video_config"):
        raise CountError("no video_preprocessor_config.json")  # checked on the folder below
    settings_ = with_kwargs(video_settings, case["kwargs"])
    counts = [llava_next_video.count_video(m, settings_) for m in case_metas(case)]
    llava_next_video.check_videos(counts, settings_)
    return counts


def test_video_settings_come_from_the_folder_as_transformers_reads_them():
    """video_preprocessor_config.json over LlavaNextVideoVideoProcessor's class defaults; patch_size
    from processor_config.json."""
    model = load_model(str(FOLDER))
    assert model.video_refusal is None
    assert model.video_settings == llava_next_video.LlavaNextVideoSettings(
        patch_size=14, do_sample_frames=False, fps=None, num_frames=None, do_resize=True,
        size=Size(shortest_edge=336), do_center_crop=True, crop_size=Size(height=336, width=336),
    )  # fmt: skip


def test_a_folder_without_its_video_config_is_refused_as_transformers_fails_to_load_it(tmp_path):
    """Recorded: AutoProcessor recurses (RecursionError; from transformers 5.25 it builds the processor
    without a tokenizer, AttributeError) when preprocessor_config.json alone names the video processor:
    the model loads in vlmlint, its videos are not counted and say why."""
    (case,) = [c for c in CASES if c.get("no_video_config")]
    error = "AttributeError" if installed_at_least("5.25.0") else "RecursionError"
    assert case["result"] == {"at": "load", "error": error}
    folder = tmp_path / recorder.FOLDER
    folder.mkdir()
    for path in FOLDER.iterdir():
        if path.name != "video_preprocessor_config.json":
            (folder / path.name).write_bytes(path.read_bytes())
    model = load_model(str(folder))
    assert model.video_settings is None
    assert (
        "video_preprocessor_config.json" in model.video_refusal
        and case["result"]["error"] in model.video_refusal
    )


def _id(case: dict) -> str:
    kind = "list" if case.get("frame_list") else f"{case['fps']:.3g}"
    pair = f"+{case['pair']['frames']}f{case['pair']['size']}" if case.get("pair") else ""
    return f"{case['frames']}f-{case['size'][0]}x{case['size'][1]}-{kind}{pair}{case['kwargs'] or ''}"


@video_records
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_video_formula_matches_the_real_video_processor(case, scanner):
    result = case["result"]
    if "error" in result:
        with pytest.raises(CountError):
            ours(case, scanner.model.video_settings)
        return
    counts = ours(case, scanner.model.video_settings)
    assert [count.frames for count in counts] == result["frames"]
    assert [[count.resized_height, count.resized_width] for count in counts] == result["frame_size"]
    assert sum(count.tokens for count in counts) == result["video_tokens"]
    assert row_length(scanner, counts) == result["input_ids"]


def test_the_records_cover_sampling_modes_sizes_and_refusals():
    kinds = {tuple(sorted(case["kwargs"])) for case in CASES}
    assert {
        (),
        ("do_sample_frames",),
        ("do_sample_frames", "fps"),
        ("do_sample_frames", "num_frames"),
    } <= kinds
    assert {("do_center_crop",), ("crop_size",), ("do_center_crop", "size")} <= kinds
    assert sum("error" in case["result"] for case in CASES) >= 8
    assert any(case.get("frame_list") for case in CASES) and any(case.get("pair") for case in CASES)
    assert max(case["frames"] for case in CASES) >= 1000


def write_clip(path, frames: int, height: int, width: int, fps: int = 4) -> None:
    """A tiny MP4 (PyAV, mpeg4) of blank frames."""
    import av

    with av.open(str(path), "w") as out:
        stream = out.add_stream("mpeg4", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for _ in range(frames):
            frame = av.VideoFrame.from_ndarray(np.zeros((height, width, 3), dtype=np.uint8), format="rgb24")
            out.mux(stream.encode(frame))
        out.mux(stream.encode())


def test_a_video_row_is_counted_end_to_end(tmp_path):
    """A row's <video>: read from the clip's header, rendered by the chat template, expanded and counted."""
    write_clip(tmp_path / "a.mp4", 6, 48, 64)
    rows = [{"messages": [{"role": "user", "content": "<video>Describe the video."},
                          {"role": "assistant", "content": "Nothing."}], "videos": ["a.mp4"]}]  # fmt: skip
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    scanner = Scanner(ScanConfig(dataset=str(tmp_path / "rows.jsonl"), model=str(FOLDER), jobs=1))
    (outcome,) = list(scanner.scan())
    result = outcome.result
    (info,) = result.media
    assert (info.tokens, info.sampled) == (6 * 144, 6)
    assert info.counted_by == "llava-next-video: every frame (do_sample_frames is false)"
    assert not result.lengths_lower_bound and "VLM109" not in {f.code for f in outcome.findings}
    rendered = scanner.encoder.render(result.sample.messages, videos=True)
    assert rendered.count("<video>") == 1
    count = llava_next_video.count_video(
        VideoMeta(frames=6, fps=4.0, duration=1.5, width=64, height=48), scanner.model.video_settings
    )
    composed, saved = scanner.encoder.compose(rendered, [], videos=(count,))
    assert result.seq_len == len(scanner.model.tokenizer(composed)["input_ids"]) + saved
