"""GLM-4.1V / GLM-4.6V videos against the real Glm4vVideoProcessor / Glm46VVideoProcessor recorded
outputs (fixtures/reference/glm4v_video.json, recorded in the reference venv through Glm4vProcessor and
Glm46VProcessor): each clip's video_grid_thw, its <|image|> and <|begin_of_image|> counts, the whole
input_ids of a prompt with it (every timestamp's tokens, runs of <|image|> compressed) and its length
through the scanner's compose, or the processor's refusal; and the video settings read from the fixture
folders as AutoVideoProcessor reads them."""

from __future__ import annotations

import dataclasses

import pytest

from fixtures.reference import _records, glm4v_video
from tests.conftest import PROCESSORS
from tests.families._video import clip_meta, prompt_length
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError, glm4v, load_model
from vlmlint.models.base import Run, VideoCount
from vlmlint.records import VideoMeta

RECORDS = _records.load("glm4v_video")
CASES = RECORDS["cases"]
PROMPT = glm4v_video.PROMPT

pytestmark = pytest.mark.skipif(
    _records.version_mismatch("glm4v_video") is not None, reason=str(_records.version_mismatch("glm4v_video"))
)


@pytest.fixture(scope="module")
def scanners():
    cache: dict[str, Scanner] = {}

    def get(folder: str) -> Scanner:
        if folder not in cache:
            cache[folder] = Scanner(ScanConfig(dataset="", model=str(PROCESSORS / folder)))
        return cache[folder]

    return get


def with_kwargs(settings: glm4v.GlmVideoSettings, kwargs: dict, init: dict) -> glm4v.GlmVideoSettings:
    """The video processor's attributes a case sets (`init`), then its call kwargs, as the processor
    merges them; a call's max_duration is not read by sample_frames (self.max_duration is)."""
    changes = {key: init[key] for key in ("max_duration", "fps", "do_sample_frames") if key in init}
    changes.update({key: kwargs[key] for key in ("do_sample_frames", "fps", "do_resize") if key in kwargs})
    if "size" in kwargs:
        changes["shortest_edge"] = kwargs["size"]["shortest_edge"]
        changes["longest_edge"] = kwargs["size"]["longest_edge"]
    return dataclasses.replace(settings, **changes)


meta = clip_meta  # (tests/reference imports it by this name)


def row_length(scanner: Scanner, video: VideoCount) -> int:
    """The recorder's prompt with the video composed and tokenized."""
    return prompt_length(scanner, PROMPT, (video,))


def full_ids(scanner: Scanner, video: VideoCount, settings: glm4v.GlmVideoSettings) -> str:
    """The prompt with the video's expansion written out in full, tokenized: the recorder's digest of it."""
    text = "".join(
        seg.token * seg.count if isinstance(seg, Run) else seg for seg in glm4v.expand_video(video, settings)
    )
    tokenizer = scanner.model.tokenizer
    ids = tokenizer(PROMPT.replace(glm4v.VIDEO_PLACEHOLDER, text), add_special_tokens=True)["input_ids"]
    return glm4v_video.ids_digest(ids, tokenizer.convert_tokens_to_ids("<|image|>"))


def test_video_settings_come_from_the_folder_as_transformers_reads_them():
    """No video_preprocessor_config.json: preprocessor_config.json's size over the class defaults; the
    GLM-4.6V folder's class inferred from its image_processor_type (Glm46VImageProcessor), as
    AutoVideoProcessor infers it (its model type glm4v_moe maps to no video processor)."""
    thinking = load_model(str(PROCESSORS / "glm-4.1v-9b-thinking"))
    assert thinking.video_refusal is None
    assert thinking.video_settings == glm4v.GlmVideoSettings(
        processor="Glm4vVideoProcessor", timestamps="integer", patch_size=14, merge_size=2,
        temporal_patch_size=2, shortest_edge=12544, longest_edge=9633792, do_resize=True,
        do_sample_frames=True, fps=2, max_duration=300,
    )  # fmt: skip
    v46 = load_model(str(PROCESSORS / "glm-4.6v"))
    assert v46.video_refusal is None
    assert dataclasses.replace(v46.video_settings, processor="Glm4vVideoProcessor", timestamps="integer") == (
        thinking.video_settings
    )
    assert (v46.video_settings.processor, v46.video_settings.timestamps) == (
        "Glm46VVideoProcessor",
        "seconds",
    )


def test_unknown_video_processors_are_refused():
    with pytest.raises(CountError, match="not one vlmlint reproduces"):
        glm4v.video_settings_from({"video_processor_type": "GlmgaVideoProcessor"}, None, "Glm4vProcessor")
    with pytest.raises(CountError, match="shortest_edge"):
        glm4v.video_settings_from(
            {"video_processor_type": "Glm4vVideoProcessor", "size": {"height": 3}}, None, "Glm4vProcessor"
        )


def _id(case: dict) -> str:
    extra = {**case["kwargs"], **{f"init.{k}": v for k, v in case["init"].items()}}
    return f"{case['folder']}-{case['frames']}f-{case['size'][0]}x{case['size'][1]}-{case['fps']:.3g}{extra or ''}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_formula_matches_the_real_video_processor(case, scanners):
    scanner = scanners(case["folder"])
    settings = with_kwargs(scanner.model.video_settings, case["kwargs"], case["init"])
    result = case["result"]
    if "error" in result:
        with pytest.raises(CountError):
            glm4v.count_video(meta(case), settings)
        return
    count = glm4v.count_video(meta(case), settings)
    assert list(count.grid) == result["grid"]
    assert count.tokens == result["video_tokens"]
    assert count.grid[0] == result["begin_of_image"]  # one <|begin_of_image|> per temporal group
    assert full_ids(scanner, count, settings) == result["ids"]
    saved = scanner.model.video_settings
    scanner.model.video_settings = settings  # the expansion reads the model's video settings
    try:
        assert row_length(scanner, count) == result["input_ids"]
    finally:
        scanner.model.video_settings = saved


def test_frame_lists_are_sampled_only_when_sampling_is_off():
    """A frame list has no fps: sampling refuses it (the processor's message); unsampled, every frame,
    timestamps at the processor's fallback 24 fps."""
    settings = load_model(str(PROCESSORS / "glm-4.1v-9b-thinking")).video_settings
    frames = VideoMeta(frames=6, fps=None, duration=None, width=64, height=48, frames_from="frame list")
    with pytest.raises(CountError, match="list of images"):
        glm4v.count_video(frames, settings)
    count = glm4v.count_video(frames, dataclasses.replace(settings, do_sample_frames=False))
    assert (count.frames, count.grid[0], count.timestamps) == (6, 3, (0.0, 2 / 24, 4 / 24))


def test_the_records_cover_sampling_modes_and_refusals():
    kinds = {key for case in CASES for key in case["kwargs"]} | {
        f"init.{k}" for c in CASES for k in c["init"]
    }
    assert {
        "fps",
        "do_sample_frames",
        "max_duration",
        "size",
        "do_resize",
        "init.max_duration",
        "init.fps",
    } <= kinds
    assert {case["folder"] for case in CASES} == set(glm4v_video.FOLDERS)
    assert set(range(1, 41)) <= {case["frames"] for case in CASES}
    assert sum("error" in case["result"] for case in CASES) >= 6
