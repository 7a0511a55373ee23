"""--pipeline llamafactory: predictions against LLaMA-Factory 0.9.5's own code on fixtures/llamafactory.

fixtures/llamafactory/expected.json holds what LLaMA-Factory's loader, converters, template, image
plugin and supervised processors did to each row of the fixture datasets (fixtures/llamafactory/
reference.py ran them). Each run here scans the same dataset with the same settings and compares
vlmlint's TrainerFate row by row: status, length fed to the model, answer and image tokens lost.
With LLAMAFACTORY_SRC set to an unpacked llamafactory wheel, LLaMA-Factory runs again (subprocess)
and must still give expected.json.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from functools import cache
from types import SimpleNamespace

import pytest
from PIL import Image
from typer.testing import CliRunner

from tests.conftest import FIXTURES, PROCESSORS, ROOT
from vlmlint.cli import app
from vlmlint.config import build_config
from vlmlint.engine import Scanner
from vlmlint.models import glm4v, load_model, qwen_omni
from vlmlint.pipelines import PipelineError, load_pipeline
from vlmlint.pipelines.llamafactory import LlamaFactoryPipeline, infer_seqlen, preprocess_size
from vlmlint.readers import DatasetError, iter_samples
from vlmlint.readers.llamafactory import DatasetAttr
from vlmlint.records import ImageError

LF = FIXTURES / "llamafactory"
REFERENCE = importlib.import_module("fixtures.llamafactory.reference")
DATA = LF / "data"
EXPECTED = json.loads((LF / "expected.json").read_text(encoding="utf-8"))


@cache
def _model(name: str):
    return load_model(str(PROCESSORS / name))


def _scan(dataset: str, model: str, options: dict, data: str | None = None, **flags) -> list:
    config = build_config(
        str(ROOT / data if data else DATA),
        {},
        {
            "model": str(PROCESSORS / model),
            "jobs": 1,
            "pipeline": "llamafactory",
            "pipeline_options": options,
            "dataset_name": dataset,
            **flags,
        },
    )
    return list(Scanner(config, model=_model(model)).scan())


def _outcome(outcome) -> dict:
    """vlmlint's prediction in expected.json's terms; a row VLM101 says LLaMA-Factory skips is dropped,
    and a row with an image the model's processor rejects (VLM203) raises in LLaMA-Factory too."""
    fate = outcome.result.trainer
    if fate is None and any(image.error_code is ImageError.REJECTED for image in outcome.result.images):
        return {"status": "raise"}
    if fate is None:
        skipped = [p for p in outcome.result.sample.problems if "LLaMA-Factory skips the row" in p.message]
        assert skipped, (
            outcome.result.sample.location,
            outcome.result.sample.problems,
            outcome.result.count_error,
        )
        return {"status": "dropped"}
    if fate.status in ("dropped", "raise"):
        return {"status": fate.status}
    return {
        "status": fate.status,
        "length": fate.length,
        "answer_tokens_lost": fate.answer_tokens_lost,
        "image_tokens_lost": fate.image_tokens_lost,
    }


def _expected(row: dict) -> dict:
    return {
        key: value
        for key, value in row.items()
        if key not in ("full_length", "error", "video_tokens", "video_features")
    }


RUNS = [pytest.param(run, id=f"{run['dataset']}-{run['model']}-{run['options']}") for run in EXPECTED["runs"]]


def test_expected_json_comes_from_the_pinned_version():
    assert EXPECTED["llamafactory"] == "0.9.5" == LlamaFactoryPipeline.trainer.split()[-1]


@pytest.mark.parametrize("run", RUNS)
def test_predictions_match_llamafactory(run, monkeypatch):
    """Every row, every length: the cheap bound is switched off so that each row is encoded."""
    monkeypatch.setattr(LlamaFactoryPipeline, "_surely_fits", lambda self, turns, counts: False)
    outcomes = _scan(run["dataset"], run["model"], run["options"], run.get("data"))
    got = [_outcome(outcome) for outcome in outcomes]
    assert got == [_expected(row) for row in run["rows"]]
    # each video's tokens as the collator's real video processor gave them (the decoded frames)
    features = [[m.tokens for m in outcome.result.media if m.kind == "video"] for outcome in outcomes]
    assert features == [row.get("video_features", features[i]) for i, row in enumerate(run["rows"])]
    # GLM4VPlugin's video call: vlmlint names the very TypeError LLaMA-Factory raised
    for outcome, row in zip(outcomes, run["rows"], strict=True):
        if row.get("error", "").startswith("TypeError: Glm"):
            assert row["error"] in outcome.result.trainer.reason


def _run(dataset: str, model: str, options: dict):
    return next(
        param
        for param in RUNS
        if param.values[0]["dataset"] == dataset
        and param.values[0]["model"] == model
        and param.values[0]["options"] == options
    )


@pytest.mark.parametrize(
    "run",
    [*RUNS[:3], _run("thinking_demo", "glm-4.1v-9b-thinking", {}), _run("mllm_demo", "qwen2.5-omni-7b", {})],
)
def test_the_fast_path_never_changes_a_verdict(run):
    """With the bound on, rows it proves short are kept without a length; every other field agrees."""
    got = [_outcome(outcome) for outcome in _scan(run["dataset"], run["model"], run["options"])]
    fast = 0
    for mine, theirs in zip(got, run["rows"], strict=True):
        if mine.get("length", 0) is None:
            fast += 1
            assert mine["status"] == theirs["status"] == "kept"
        else:
            assert mine == _expected(theirs)
    assert fast >= 3  # the short ASCII rows took the bound


@pytest.mark.skipif(
    not os.environ.get("LLAMAFACTORY_SRC"), reason="LLAMAFACTORY_SRC (an unpacked wheel) not set"
)
def test_llamafactory_itself_still_gives_expected_json():
    """The Llama 4 runs need torchvision: with the reference venv (make test-reference builds it) every run
    is rerun; without it, the runs it skips are named and every other run must match."""
    python = ROOT / ".venv-reference" / "bin" / "python"
    done = subprocess.run(
        [str(python) if python.exists() else sys.executable, str(LF / "reference.py"), "--stdout"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout)
    skipped = got.pop("skipped (no torchvision)", [])
    assert all(REFERENCE.needs_torch(run["dataset"], run["model"]) for run in skipped)
    kept = [run for run in EXPECTED["runs"] if {k: v for k, v in run.items() if k != "rows"} not in skipped]
    assert got == {**EXPECTED, "runs": kept}


# -- the rules ---------------------------------------------------------------------------------------


def test_rules_report_crash_as_error_truncation_and_drop_as_warnings():
    by_row = {}
    for outcome in _scan("mllm_demo", "qwen2-vl", {}):
        by_row[outcome.result.sample.index] = {
            f.code: f.severity.value for f in outcome.findings if f.code.startswith("VLM6")
        }
    assert by_row[3] == {"VLM601": "error"}  # the cut falls inside the third image
    assert by_row[2] == by_row[4] == {"VLM602": "warning"}  # answer tokens lost
    assert by_row[5] == by_row[6] == {"VLM603": "warning"}  # bad turn order: skipped
    assert by_row[0] == by_row[7] == by_row[8] == by_row[9] == {}


def test_cli_scans_a_llamafactory_data_folder():
    result = CliRunner().invoke(
        app,
        [
            "scan",
            str(DATA),
            "--pipeline",
            "llamafactory",
            "--dataset",
            "mllm_demo",
            "--model",
            str(PROCESSORS / "qwen2-vl"),
            "--verify",
            "0",
            "-q",
            "-j",
            "1",
            "--format",
            "json",
        ],
    )
    assert result.exit_code == 1, result.output
    report = json.loads(result.output)
    codes = [finding["code"] for finding in report["findings"]]
    assert codes.count("VLM601") == 1 and codes.count("VLM602") == 2 and codes.count("VLM603") == 2
    crash = next(finding for finding in report["findings"] if finding["code"] == "VLM601")
    assert "LLaMA-Factory 0.9.5 (template qwen2_vl, cutoff_len 2048)" in crash["message"]
    assert "raise cutoff_len to 2351" in crash["fix"]


def test_cli_refuses_an_unknown_dataset_name():
    result = CliRunner().invoke(
        app,
        [
            "scan",
            str(DATA),
            "--dataset",
            "nope",
            "--model",
            str(PROCESSORS / "qwen2-vl"),
            "-q",
            "--verify",
            "0",
        ],
    )
    assert result.exit_code == 2
    assert "Undefined dataset 'nope'" in result.output and "mllm_demo" in result.output


# -- the reader -----------------------------------------------------------------------------------------


def test_reader_maps_columns_tags_and_media_dir():
    samples = list(iter_samples(str(DATA), dataset_name="mllm_demo"))
    assert len(samples) == 11
    first = samples[0]
    assert first.source.endswith("mllm_demo.json") and first.layout == "sharegpt"
    assert [m.role.value for m in first.messages] == ["user", "assistant"]
    assert first.images[0].path == str(DATA / "mllm_demo_data" / "small.jpg")  # the data folder, media_dir
    # a system turn, but the tags name no system_tag: LLaMA-Factory skips it (Invalid role tag)
    assert "no system_tag" in samples[10].problems[0].message
    # comma-separated names, in order; the default sharegpt tags and a system column
    both = list(iter_samples(str(DATA / "dataset_info.json"), dataset_name="sharegpt_demo,alpaca_demo"))
    assert [s.source.rsplit("/", 1)[-1] for s in both] == ["sharegpt_demo.jsonl"] * 3 + [
        "alpaca_demo.json"
    ] * 3
    assert [m.role.value for m in both[0].messages] == ["system", "user", "assistant"]
    assert both[0].messages[0].parts[0].text == "Answer in three words."
    assert "Invalid role tag" in both[2].problems[0].message
    assert [m.role.value for m in both[5].messages] == ["user"]  # no answer: the pipeline drops it


def test_columns_given_replace_every_default():
    """DatasetAttr.join in 0.9.5: set_attr's default is None for every column or tag not named."""
    attr = DatasetAttr.from_entry("x", {"file_name": "a.json", "columns": {"images": "images"}})
    assert attr.prompt is None and attr.response is None and attr.images == "images"
    attr = DatasetAttr.from_entry(
        "x", {"file_name": "a.json", "formatting": "sharegpt", "tags": {"role_tag": "role"}}
    )
    assert attr.system_tag is None and attr.messages == "conversations" and attr.content_tag is None
    assert DatasetAttr.from_entry("x", {"file_name": "a.json"}).prompt == "instruction"


def test_reader_refuses_what_it_cannot_read(tmp_path):
    with pytest.raises(DatasetError, match="hf_hub_url"):
        list(iter_samples(str(DATA), dataset_name="remote_demo"))
    with pytest.raises(DatasetError, match="no dataset_info.json"):
        list(iter_samples(str(tmp_path), dataset_name="x"))
    (tmp_path / "dataset_info.json").write_text(
        json.dumps({"d": {"file_name": "d.csv"}, "r": {"file_name": "d.csv", "ranking": True}})
    )
    (tmp_path / "d.csv").write_text("a,b\n")
    with pytest.raises(DatasetError, match="csv"):
        list(iter_samples(str(tmp_path), dataset_name="d"))
    with pytest.raises(DatasetError, match="ranking"):
        list(iter_samples(str(tmp_path), dataset_name="r"))


# -- the pieces -------------------------------------------------------------------------------------------


def test_infer_seqlen_cases():
    assert infer_seqlen(100, 200, 1000) == (100, 200)  # fits
    assert infer_seqlen(3000, 100, 1000) == (900, 100)  # source cut
    assert infer_seqlen(100, 3000, 1000) == (100, 900)  # target cut
    assert infer_seqlen(800, 1200, 1000) == (400, 600)  # both, in proportion
    assert infer_seqlen(500, 500, 1000) == (500, 500)


def test_preprocess_size_matches_pil_resizes():
    """LLaMA-Factory's _preprocess_image on real PIL images gives the sizes preprocess_size predicts."""

    def plugin(width, height, max_pixels, min_pixels):  # MMPluginMixin + Qwen2VLPlugin, 0.9.5, verbatim logic
        import math

        image = Image.new("RGB", (width, height))
        if image.width * image.height > max_pixels:
            factor = math.sqrt(max_pixels / (image.width * image.height))
            image = image.resize((int(image.width * factor), int(image.height * factor)))
        if image.width * image.height < min_pixels:
            factor = math.sqrt(min_pixels / (image.width * image.height))
            image = image.resize((int(image.width * factor), int(image.height * factor)))
        if min(image.width, image.height) < 28:
            image = image.resize((max(image.width, 28), max(image.height, 28)))
        if image.width / image.height > 200:
            image = image.resize((image.height * 180, image.height))
        if image.height / image.width > 200:
            image = image.resize((image.width, image.width * 180))
        return image.size

    for size in [(640, 480), (1600, 1200), (10, 10), (6000, 20), (20, 6000), (3000, 5), (769, 768), (31, 33)]:
        assert preprocess_size(*size, 768 * 768, 32 * 32, qwen=True) == plugin(*size, 768 * 768, 32 * 32), (
            size
        )


@pytest.mark.parametrize(
    ("template", "qwen"),
    [
        ("qwen2_vl", True),
        ("qwen2_omni", True),
        ("qwen3_omni_nothink", True),
        ("glm4v", True),
        ("ernie_vl", False),
        ("llama4", False),
        ("llava", False),
    ],
)
def test_the_qwen_pre_resize_follows_the_plugin(template, qwen):
    """Qwen2OmniPlugin and GLM4VPlugin subclass Qwen2VLPlugin without overriding _preprocess_image: the
    28-pixel floor. ErnieVLPlugin is a BasePlugin: the 6000x20 banner stays, and ERNIE's processor rejects it."""
    pipeline = load_pipeline("llamafactory", {"template": template})
    assert pipeline.resize(20, 6000) == preprocess_size(6000, 20, 768 * 768, 32 * 32, qwen)[::-1]
    assert (pipeline.resize(20, 6000)[0] == 28) is qwen


def test_options_are_validated():
    with pytest.raises(PipelineError, match="cutoff_len must be int"):
        load_pipeline("llamafactory", {"cutoff_len": "long"})
    with pytest.raises(PipelineError, match="incompatible"):
        load_pipeline("llamafactory", {"mask_history": True, "train_on_prompt": True})
    with pytest.raises(PipelineError, match="cannot be smaller"):
        load_pipeline("llamafactory", {"image_max_pixels": 100, "image_min_pixels": 1000})
    with pytest.raises(PipelineError, match="not reproduced"):
        load_pipeline("llamafactory", {"template": "gemma3"})
    with pytest.raises(PipelineError, match="enable_thinking must be bool"):
        load_pipeline("llamafactory", {"enable_thinking": "maybe"})
    with pytest.raises(PipelineError, match="glm4v does not support train_on_prompt"):
        load_pipeline("llamafactory", {"template": "glm4v", "train_on_prompt": True})
    pipeline = load_pipeline("llamafactory", {"packing": True, "cutoff_len": 1024})
    assert pipeline.limit == 1023 and not pipeline.exif_transpose


def test_unsupported_family_and_mismatched_template_are_refused():
    config = build_config(
        str(DATA), {}, {"model": str(PROCESSORS / "idefics3-8b-llama3"), "pipeline": "llamafactory"}
    )
    with pytest.raises(PipelineError, match="no LLaMA-Factory template is reproduced for idefics3"):
        Scanner(config, model=_model("idefics3-8b-llama3"))
    config = build_config(
        str(DATA),
        {},
        {
            "model": str(PROCESSORS / "qwen2-vl"),
            "pipeline": "llamafactory",
            "pipeline_options": {"template": "llava"},
        },
    )
    with pytest.raises(PipelineError, match="template llava is for llava models, not qwen-vl"):
        Scanner(config, model=_model("qwen2-vl"))


def test_default_templates_by_model():
    assert LlamaFactoryPipeline._default_template(_model("qwen2-vl")) == "qwen2_vl"
    assert LlamaFactoryPipeline._default_template(_model("qwen2.5-vl")) == "qwen2_vl"
    assert LlamaFactoryPipeline._default_template(_model("qwen3-vl")) == "qwen3_vl_nothink"
    assert LlamaFactoryPipeline._default_template(_model("llava-1.5-7b")) == "llava"
    assert LlamaFactoryPipeline._default_template(_model("llava-v1.6-mistral-7b")) == "llava_next_mistral"
    assert LlamaFactoryPipeline._default_template(_model("qwen2.5-omni-7b")) == "qwen2_omni"
    assert (
        LlamaFactoryPipeline._default_template(_model("qwen3-omni-30b-a3b-instruct")) == "qwen3_omni_nothink"
    )
    assert LlamaFactoryPipeline._default_template(_model("glm-4.1v-9b-thinking")) == "glm4v"
    assert LlamaFactoryPipeline._default_template(_model("glm-4.6v")) == "glm4_5v"
    assert LlamaFactoryPipeline._default_template(_model("ernie-4.5-vl-28b-a3b")) == "ernie_vl"
    assert LlamaFactoryPipeline._default_template(_model("llama-4-scout-17b-16e-instruct")) == "llama4"


@pytest.mark.parametrize(
    ("module", "processor_class", "name", "template"),
    [
        (qwen_omni, "Qwen3OmniMoeProcessor", "Qwen/Qwen3-Omni-30B-A3B-Thinking", "qwen3_omni"),
        (qwen_omni, "Qwen3OmniMoeProcessor", "Qwen/Qwen3-Omni-30B-A3B-Captioner", "qwen3_omni_nothink"),
        (qwen_omni, "Qwen2_5OmniProcessor", "Qwen/Qwen2.5-Omni-7B", "qwen2_omni"),
        (glm4v, "Glm4vProcessor", "zai-org/GLM-4.1V-9B-Thinking", "glm4v"),
        (glm4v, "Glm4vProcessor", "zai-org/GLM-4.5V", "glm4_5v"),
        (glm4v, "Glm46VProcessor", "zai-org/GLM-OCR", "glm_ocr"),
        (glm4v, "Glm46VProcessor", "./my-glm", "glm4_5v"),
    ],
)
def test_templates_chosen_by_checkpoint_name(module, processor_class, name, template):
    """extras/constants.py registers these by checkpoint name, several per processor class."""
    model = SimpleNamespace(processor_class=processor_class, checkpoint=None, name=name)
    assert module.trainer_template("llamafactory", model) == template
    assert template in module.FAMILY.trainer_templates["llamafactory"]


def test_train_on_prompt_is_refused_for_an_efficient_eos_template_chosen_by_model():
    config = build_config(
        str(DATA),
        {},
        {
            "model": str(PROCESSORS / "glm-4.1v-9b-thinking"),
            "pipeline": "llamafactory",
            "pipeline_options": {"train_on_prompt": True},
        },
    )
    with pytest.raises(PipelineError, match="glm4v does not support train_on_prompt"):
        Scanner(config, model=_model("glm-4.1v-9b-thinking"))


@pytest.mark.parametrize(("options", "status"), [({}, "kept"), ({"enable_thinking": False}, "crash")])
def test_an_image_inside_a_removed_thought_block_is_a_crash(tmp_path, options, status):
    """remove_thought cuts the image's tokens out of the answer; the collator still sends its features.

    (Rendered raw: GLM-4.1V's own chat template drops the thought block too, which VLM301 reports.)"""
    Image.new("RGB", (64, 64)).save(tmp_path / "a.png")
    row = {
        "messages": [
            {"role": "user", "content": "Look."},
            {"role": "assistant", "content": "<think>\n<image>\n</think>\n\nA square."},
        ],
        "images": ["a.png"],
    }
    (tmp_path / "d.jsonl").write_text(json.dumps(row) + "\n")
    config = build_config(
        str(tmp_path / "d.jsonl"),
        {},
        {
            "model": str(PROCESSORS / "glm-4.1v-9b-thinking"),
            "pipeline": "llamafactory",
            "pipeline_options": options,
            "jobs": 1,
            "use_chat_template": False,
        },
    )
    (outcome,) = list(Scanner(config, model=_model("glm-4.1v-9b-thinking")).scan())
    assert outcome.result.trainer.status == status
    if status == "crash":
        assert outcome.result.trainer.image_tokens_lost == outcome.result.images[0].tokens > 0
        assert "remove_thought" in outcome.result.trainer.reason


def test_image_placeholder_in_the_system_prompt_raises(tmp_path):
    Image.new("RGB", (64, 64)).save(tmp_path / "a.png")
    row = {
        "messages": [
            {"role": "system", "content": "<image>"},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Yo"},
        ],
        "images": ["a.png"],
    }
    (tmp_path / "d.jsonl").write_text(json.dumps(row) + "\n")
    config = build_config(
        str(tmp_path / "d.jsonl"),
        {},
        {"model": str(PROCESSORS / "qwen2-vl"), "pipeline": "llamafactory", "jobs": 1},
    )
    (outcome,) = list(Scanner(config, model=_model("qwen2-vl")).scan())
    assert outcome.result.trainer.status == "raise"
    assert "VLM604" in [f.code for f in outcome.findings]


@pytest.mark.parametrize("model", ["qwen2-vl", "llava-v1.6-mistral-7b"])
def test_exact_images_give_the_same_fates(model, monkeypatch):
    """--exact: decoded images are transposed back to their stored size and pre-resized the same way.

    LLaVA-NeXT's count depends on the orientation: the EXIF-rotated row (8) is 1972 tokens stored,
    1992 rotated, and LLaMA-Factory gives 1972.
    """
    monkeypatch.setattr(LlamaFactoryPipeline, "_surely_fits", lambda self, turns, counts: False)
    run = next(run for run in EXPECTED["runs"] if run["model"] == model and run["dataset"] == "mllm_demo")
    exact = [_outcome(outcome) for outcome in _scan(run["dataset"], model, run["options"], exact=True)]
    assert exact == [_expected(row) for row in run["rows"]]


# -- videos ------------------------------------------------------------------------------------------


def test_video_options_are_validated():
    with pytest.raises(PipelineError, match="video_max_pixels cannot be smaller"):
        load_pipeline("llamafactory", {"video_max_pixels": 100, "video_min_pixels": 1000})
    with pytest.raises(PipelineError, match="video_fps must be above 0"):
        load_pipeline("llamafactory", {"video_fps": 0})
    with pytest.raises(PipelineError, match="video_maxlen must be"):
        load_pipeline("llamafactory", {"video_maxlen": 0})
    with pytest.raises(PipelineError, match="video_fps must be float"):
        load_pipeline("llamafactory", {"video_fps": "fast"})
    assert load_pipeline("llamafactory", {"video_fps": 4}).video_fps == 4.0  # an int is a float here


@pytest.mark.parametrize(
    ("template", "sampling"),
    [("qwen2_vl", "llamafactory"), ("qwen3_vl_nothink", "llamafactory"), ("glm4v", None), ("llava", None)],
)
def test_video_sampling_is_declared_for_the_plugins_reproduced(template, sampling):
    assert load_pipeline("llamafactory", {"template": template}).video_sampling == sampling


@pytest.mark.parametrize("model", ["glm-4.1v-9b-thinking", "glm-4.6v"])
def test_glm_video_rows_raise_and_their_videos_stay_uncounted(model):
    """GLM4VPlugin's video call raises on transformers 5.x (expected.json's GLM runs): VLM604 names the
    error and the fix, and the clips get VLM109 (their lengths are lower bounds)."""
    outcomes = _scan("mllm_video_demo", model, {}, "fixtures/datasets/media")
    processor = "Glm46VVideoProcessor" if model == "glm-4.6v" else "Glm4vVideoProcessor"
    for outcome in outcomes:
        fate = outcome.result.trainer
        assert fate.status == "raise"
        assert f"{processor}InitKwargs.__init__() got an unexpected keyword argument 'images'" in fate.reason
        assert "patch GLM4VPlugin._get_mm_inputs" in fate.fix
        codes = {f.code for f in outcome.findings}
        assert {"VLM604", "VLM109"} <= codes
        (finding,) = [f for f in outcome.findings if f.code == "VLM109"]
        assert (
            "--pipeline llamafactory: the trainer's video sampling is not reproduced yet" in finding.message
        )


def test_omni_video_rows_are_not_counted():
    """Qwen2OmniPlugin's videos: the qwen_omni family has no video formula, so VLM109 and no fate."""
    outcomes = _scan("mllm_video_demo", "qwen2.5-omni-7b", {}, "fixtures/datasets/media")
    for outcome in outcomes:
        assert outcome.result.trainer is None
        (finding,) = [f for f in outcome.findings if f.code == "VLM109"]
        assert "vlmlint does not count Qwen2.5-Omni / Qwen3-Omni (images) videos yet" in finding.message


def test_the_endless_stream_and_the_header_path_in_words():
    """An MKV with a duration but no frame count: the header path writes video_maxlen frames' tokens,
    the decoder gives one frame; and each video says how LLaMA-Factory sampled it."""
    by_row = {o.result.sample.index: o for o in _scan("video_demo", "qwen2-vl", {})}
    fate = by_row[3].result.trainer
    assert fate.status == "crash"
    assert "the stream header path counts 128 frames, the decoder gives 2" in fate.reason
    assert "Video features and video tokens do not match" in fate.reason
    (media,) = by_row[2].result.media  # an MKV without a duration: the first frames, decoded
    assert media.counted_by.startswith("qwen-vl: LLaMA-Factory 0.9.5 (video_fps 2, video_maxlen 128)")
    assert "no frame count in the header, the first 20" in media.counted_by
    (media,) = by_row[0].result.media
    assert media.counted_by.endswith("1 of 8 frames, padded to even, pre-resized to 295x221")


def test_qwen3_vl_rows_the_plugin_cannot_expand():
    by_row = {
        o.result.sample.index: o
        for o in _scan("video_demo", "qwen3-vl", {"video_fps": 30.0, "video_maxlen": 16})
    }
    assert by_row[9].result.trainer.status == "raise"
    assert "video_metadata[2]" in by_row[9].result.trainer.reason
    fate = by_row[8].result.trainer  # two clips sampled to different lengths
    assert fate.status == "crash" and "writes video 1's temporal groups for every video" in fate.reason


_LF_PIECES = r"""
import json, sys, types
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from fixtures.llamafactory.reference import load_llamafactory
lf = load_llamafactory(Path(sys.argv[2]))
import importlib
plugin = importlib.import_module("llamafactory.data.mm_plugin").Qwen2VLPlugin(
    "<|image_pad|>", "<|video_pad|>", None
)
out = []
for frames, duration, fps, maxlen, width, height, max_pixels, min_pixels in json.loads(sys.stdin.read()):
    stream = types.SimpleNamespace(frames=frames, duration=duration, time_base=1)
    indices = plugin._get_video_sample_indices(stream, video_fps=fps, video_maxlen=maxlen)
    try:
        size = list(plugin._get_qwen_video_size_after_regularization(width, height, max_pixels, min_pixels))
    except ZeroDivisionError:  # a side scaled to 0 pixels: the plugin divides by it
        size = None
    out.append([[int(i) for i in indices], size])
print(json.dumps(out))
"""


@pytest.mark.skipif(
    not os.environ.get("LLAMAFACTORY_SRC"), reason="LLAMAFACTORY_SRC (an unpacked wheel) not set"
)
def test_video_sampling_and_pre_resize_match_the_plugin():
    """lf_sample_indices and the video pre-resize against Qwen2VLPlugin's own methods, 150 cases."""
    import random

    from vlmlint.pipelines.llamafactory import lf_sample_indices
    from vlmlint.records import VideoMeta

    rng = random.Random(20)
    cases = []
    for _ in range(150):
        frames = rng.choice([0, 1, 2, 3, rng.randint(1, 40), rng.randint(40, 3000)])
        duration = round(rng.uniform(0.01, 120), rng.choice([1, 3, 6]))
        fps = rng.choice([0.5, 1.0, 2.0, 2.5, 10.0, 30.0, rng.uniform(0.1, 60)])
        maxlen = rng.choice([1, 2, 16, 128, rng.randint(1, 300)])
        width, height = rng.randint(1, 4000), rng.choice([1, 10, 27, rng.randint(1, 3000)])
        max_pixels = rng.choice([256 * 256, 128 * 128, rng.randint(1000, 10**6)])
        min_pixels = rng.choice([16 * 16, 0, rng.randint(0, 1000)])
        cases.append([frames, duration, fps, maxlen, width, height, max_pixels, min_pixels])
    done = subprocess.run(
        [sys.executable, "-c", _LF_PIECES, str(ROOT), os.environ["LLAMAFACTORY_SRC"]],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = json.loads(done.stdout.splitlines()[-1])
    for case, (indices, size) in zip(cases, theirs, strict=True):
        frames, duration, fps, maxlen, width, height, max_pixels, min_pixels = case
        meta = VideoMeta(
            frames=frames or 1,
            fps=24.0,
            duration=None,
            width=width,
            height=height,
            header_frames=frames,
            stream_duration=float(duration),
        )
        assert lf_sample_indices(meta, fps, maxlen) == indices, case
        mine = preprocess_size(width, height, max_pixels, min_pixels, True)
        # (where the plugin divides by a side scaled to 0, PIL refuses the resize too: a 0 side here)
        assert list(mine) == size if size is not None else 0 in mine, case
