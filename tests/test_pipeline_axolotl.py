"""`--pipeline axolotl` against axolotl 0.19.0's own ProcessingStrategy.__call__ and the real processors.

tests/trainers/axolotl_truth.json is recorded by tests/trainers/record_axolotl.py, which runs
ProcessingStrategy.__call__ from axolotl's source (torch-free) on the rows of fixtures/axolotl21.py: the
messages it hands the processor (where each image part sits, which image it holds, the bare parts left
without one) and the size its image_size resize gives. Here:

- vlmlint's placement (AxolotlPipeline.prepare on the rows as vlmlint reads them) equals the recorded one;
- each row's counts under --pipeline axolotl equal the real processor's apply_chat_template on the recorded
  messages with the fixture's images (the collator's call), for four processors, the resize included; a
  row whose recorded messages the processor refuses is VLM301;
- without the pipeline, a string-content row stays VLM301, and its message says why and names the pipeline;
- where axolotl's source is on this machine ($AXOLOTL_SRC), the recording is redone and must be unchanged.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import orjson
import pytest
from jinja2.exceptions import TemplateError
from PIL import Image, ImageOps
from typer.testing import CliRunner

from tests.conftest import DATASETS, PROCESSORS, real_processor
from vlmlint.cli import app
from vlmlint.pipelines import PipelineError, load_pipeline
from vlmlint.pipelines.axolotl import AXOLOTL_VERSION, vision_image_size

HERE = Path(__file__).parent
TRUTH = json.loads((HERE / "trainers" / "axolotl_truth.json").read_text())
DATASET = DATASETS / "axolotl21_chat"
runner = CliRunner()


def _recorder():
    spec = importlib.util.spec_from_file_location("record_axolotl", HERE / "trainers" / "record_axolotl.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_truth_is_of_the_reproduced_version():
    assert AXOLOTL_VERSION == f"axolotl {TRUTH['axolotl']}"
    assert len(TRUTH["rows"]) == len((DATASET / "data.jsonl").read_text().splitlines())


@pytest.mark.skipif(not os.environ.get("AXOLOTL_SRC"), reason="axolotl's unpacked source: set $AXOLOTL_SRC")
def test_the_recording_is_what_axolotl_does_now():
    recorder = _recorder()
    cls = recorder.strategy_class(Path(os.environ["AXOLOTL_SRC"]))
    rows = [json.loads(line) for line in (DATASET / "data.jsonl").read_text().splitlines()]
    for row, recorded in zip(rows, TRUTH["rows"], strict=True):
        (out,) = recorder.strategy(cls)([row])
        assert recorder.canonical(out["messages"]) == recorded["messages"]


def _scan(model: str, pipeline: str | None = None, *options: str, path: Path = DATASET / "data.jsonl"):
    args = ["scan", str(path), "--model", model, "--format", "jsonl", "--all-rows", "--verify", "0"]
    if pipeline:
        args += ["--pipeline", pipeline]
    for option in options:
        args += ["--pipeline-option", option]
    result = runner.invoke(app, args)
    assert result.exit_code in (0, 1), result.output
    return [orjson.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def _canonical(sample) -> list[dict]:
    """vlmlint's prepared row in the recording's form: adjacent texts merged, images bound in order."""
    images = iter(ref.reference for ref in sample.images)
    turns = []
    for message in sample.messages:
        parts: list[list] = []
        for part in message.parts:
            if part.is_image:
                parts.append(["image", next(images, None)])
            elif part.text and parts and parts[-1][0] == "text":
                parts[-1][1] += part.text
            elif part.text:
                parts.append(["text", part.text])
        turns.append({"role": message.role.value, "parts": parts})
    return turns


def _recorded_binding(messages: list[dict]) -> list[dict]:
    """The recording with its one image bound as vlmlint binds it (the first image part), for the rows
    where the images and parts disagree (those are VLM301 either way)."""
    placed = [value for turn in messages for kind, value in turn["parts"] if kind == "image" and value]
    images = iter(placed)
    return [
        {
            "role": t["role"],
            "parts": [[k, next(images, None)] if k == "image" else [k, v] for k, v in t["parts"]],
        }
        for t in messages
    ]


def test_placement_as_processing_strategy():
    from vlmlint.readers.layouts import row_to_sample

    pipeline = load_pipeline("axolotl")
    lines = (DATASET / "data.jsonl").read_text().splitlines()
    for index, (line, recorded) in enumerate(zip(lines, TRUTH["rows"], strict=True)):
        sample = row_to_sample(
            json.loads(line),
            layout=None,
            resolve=lambda ref, **_: _ref(ref),
            source="data.jsonl",
            index=index,
        )
        assert not sample.problems, sample.problems
        assert _canonical(pipeline.prepare(sample)) == _recorded_binding(recorded["messages"]), recorded[
            "note"
        ]


def _ref(reference):
    from vlmlint.records import ImageRef

    return ImageRef(str(reference), path=str(DATASET / str(reference)))


def _live(processor, messages: list[dict], image_size) -> int | str | None:
    """The collator's processor.apply_chat_template on the recorded messages (None: the processor raises,
    "template": the chat template raises)."""
    conversation = []
    for turn in messages:
        content = []
        for kind, value in turn["parts"]:
            if kind == "text":
                content.append({"type": "text", "text": value})
            elif value is None:
                content.append({"type": "image"})  # a bare part axolotl left without an image
            else:
                image = Image.open(DATASET / value).convert("RGB")
                if isinstance(image_size, int):  # ProcessingStrategy.__call__'s resize, as it calls it
                    image = ImageOps.pad(image, (image_size, image_size), method=Image.Resampling.BILINEAR)
                elif image_size is not None:
                    image = image.resize(tuple(image_size), Image.Resampling.BILINEAR)
                content.append({"type": "image", "image": image})
        conversation.append({"role": turn["role"], "content": content})
    try:
        out = processor.apply_chat_template(
            [conversation],
            add_generation_prompt=False,
            tokenize=True,
            return_dict=True,
            processor_kwargs={"padding": True},
        )
    except TemplateError:  # Gemma's template: roles must alternate (a row without a user turn)
        return "template"
    except (ValueError, TypeError, IndexError):  # the processor refuses more placeholders than images
        return None
    return len(out["input_ids"][0])


@pytest.mark.parametrize(
    ("model", "image_size"),
    [("qwen2-vl", None), ("llava-1.5-7b", 336), ("smolvlm-256m-instruct", 512), ("gemma-3-4b-it", 896)],
)
def test_counts_as_the_collators_processor_call(model, image_size):
    folder = PROCESSORS / model
    config = json.loads((folder / "config.json").read_text())
    expected_size = None if image_size is None else (image_size, image_size)
    assert vision_image_size(config) == expected_size  # check_model_config's vision_config.image_size
    processor = real_processor(folder)
    outcomes = _scan(str(folder), "axolotl")
    for outcome, recorded in zip(outcomes, TRUTH["rows"], strict=True):
        live = _live(processor, recorded["messages"], image_size)
        if live is None:
            assert "VLM301" in outcome["findings"], (model, recorded["note"])
            continue
        if live == "template":
            assert "VLM101" in outcome["findings"], (model, recorded["note"])
            continue
        # (VLM208, info: the processor's own resize after axolotl's pad is heavy for some sizes)
        assert set(outcome["findings"]) <= {"VLM208"}, (model, recorded["note"], outcome["findings"])
        assert outcome["trainer"]["status"] == "kept"
        assert outcome["trainer"]["length"] == live, (model, recorded["note"])


def test_raw_processor_keeps_the_finding_and_names_the_pipeline():
    outcomes = _scan("qwen2-vl")
    string_rows = [0, 1, 2, 3, 6]  # string content beside an images column
    for index in string_rows:
        assert outcomes[index]["findings"] == ["VLM301"], index
    result = runner.invoke(
        app, ["scan", str(DATASET / "data.jsonl"), "--model", "qwen2-vl", "--format", "json"]
    )
    findings = [f for f in json.loads(result.stdout)["findings"] if f["code"] == "VLM301"]
    hinted = [f for f in findings if "--pipeline axolotl" in f["message"] + f.get("fix", "")]
    assert {f["index"] for f in hinted} == set(string_rows)


def test_image_size_option_and_lone_string():
    assert load_pipeline("axolotl", {"image_size": 448}).resize(100, 300) == (448, 448)
    assert load_pipeline("axolotl", {"image_size": "640x320"}).resize(100, 300) == (320, 640)
    assert load_pipeline("axolotl", {"image_size": "none"}).resize(100, 300) == (100, 300)
    for bad in (0, "big", True):
        with pytest.raises(PipelineError, match="image_size"):
            load_pipeline("axolotl", {"image_size": bad})
    for image_size, (width, height), got in TRUTH["image_size"]:  # ProcessingStrategy's own resize
        option = image_size if isinstance(image_size, int) else "{}x{}".format(*image_size)
        assert load_pipeline("axolotl", {"image_size": option}).resize(height, width) == (got[1], got[0])


def test_image_size_from_the_model_and_a_string_images_field(tmp_path):
    qwen = _scan("qwen2-vl", "axolotl", "image_size=448")
    assert qwen[0]["images"][0]["resized_width"] == 448  # 448 x 448 after the pad: 16 x 16 merged patches
    assert qwen[0]["image_tokens"] == [256]
    (tmp_path / "img").mkdir()
    Image.new("RGB", (64, 64)).save(tmp_path / "img" / "a.png")
    row = {"messages": [{"role": "user", "content": "What?"}, {"role": "assistant", "content": "x"}]}
    (tmp_path / "d.jsonl").write_text(json.dumps({**row, "images": "img/a.png"}) + "\n")
    (outcome,) = _scan("qwen2-vl", "axolotl", path=tmp_path / "d.jsonl")
    assert outcome["trainer"]["status"] == "raise"  # images[0] is "i": load_image raises
    assert "VLM604" in outcome["findings"]
