"""--processor-option KEY=VALUE (and processor-options in the config file): an image processor key set as
if the processor's file held it.

Differential: for each option, the processor folder is copied and its file edited with the same key, and
transformers' own AutoImageProcessor loads the edited copy; vlmlint's model with the option must hold the
same image processor (to_dict), the same family settings, and count every size as the real processor
(called on decoded images) counts the edited copy's.
"""

from __future__ import annotations

import json
import shutil

import orjson
import pytest
from PIL import Image
from transformers import AutoImageProcessor
from typer.testing import CliRunner

from tests.conftest import PROCESSORS
from vlmlint.cli import app
from vlmlint.config import ConfigError, build_config
from vlmlint.models import ModelError, load_model

runner = CliRunner()

# (processor folder, the options, the same as the file would hold them)
CASES = [
    ("qwen2-vl-small", {"max_pixels": 50176, "min_pixels": 784}, {"max_pixels": 50176, "min_pixels": 784}),
    ("qwen2.5-vl", {"max_pixels": 50176}, {"max_pixels": 50176}),
    ("idefics3-8b-llama3", {"size.longest_edge": 728}, {"size": {"longest_edge": 728}}),
    ("internvl3-1b-hf", {"max_patches": 4}, {"max_patches": 4}),
    ("smolvlm-256m-instruct", {"do_image_splitting": False}, {"do_image_splitting": False}),
]
SIZES = [(28, 28), (100, 300), (448, 448), (480, 640), (1080, 1920), (2000, 333), (64, 4000)]


def _edited_copy(tmp_path, folder: str, written: dict) -> str:
    copy = tmp_path / folder
    shutil.copytree(PROCESSORS / folder, copy)
    path = copy / "preprocessor_config.json"
    config = json.loads(path.read_text())
    for key, value in written.items():
        config[key] = {**config[key], **value} if isinstance(value, dict) else value
    path.write_text(json.dumps(config))
    return str(copy)


@pytest.mark.parametrize(("folder", "options", "written"), CASES, ids=[case[0] for case in CASES])
def test_an_option_acts_as_the_files_key(tmp_path, folder, options, written):
    edited = _edited_copy(tmp_path, folder, written)
    optioned = load_model(str(PROCESSORS / folder), processor_options=options)
    from_file = load_model(edited)
    real = AutoImageProcessor.from_pretrained(edited)
    assert type(optioned.image_processor) is type(real)
    assert optioned.image_processor.to_dict() == real.to_dict()
    assert optioned.settings == from_file.settings
    assert optioned.settings != load_model(str(PROCESSORS / folder)).settings  # the option did something
    family, settings = optioned.family, optioned.settings
    images = [Image.new("RGB", (width, height)) for height, width in SIZES]
    # the real image processor of the edited file, as the family calls it
    exact = family.count_exact(real, images, from_file.settings)
    for (height, width), counted in zip(SIZES, exact, strict=True):
        formula = family.count(height, width, settings, images_in_row=1)
        assert formula.tokens == counted.tokens, (height, width)


def test_an_unknown_key_is_refused_with_the_known_ones():
    with pytest.raises(ModelError, match=r"max_pixel: not a key .*known: .*max_pixels, .*min_pixels"):
        load_model(str(PROCESSORS / "qwen2-vl-small"), processor_options={"max_pixel": 1})
    with pytest.raises(ModelError, match="size.longest_edge: not an entry of its size; known: height, width"):
        load_model(str(PROCESSORS / "internvl3-1b-hf"), processor_options={"size.longest_edge": 1})


def test_a_value_no_processor_can_use_is_refused():
    with pytest.raises(ModelError, match="max_pixels"):
        load_model(str(PROCESSORS / "qwen2-vl-small"), processor_options={"max_pixels": -5})


def test_a_profile_is_named_in_the_refusal():
    with pytest.raises(ModelError, match=r"^qwen2-vl: --processor-option"):
        load_model("qwen2-vl", processor_options={"nope": 1})


def test_config_checks_the_values():
    config = build_config("d", {"model": "m", "processor_options": {"max_pixels": 50176}}, {})
    assert dict(config.processor_options) == {"max_pixels": 50176}
    nested = build_config("d", {"model": "m", "processor_options": {"size": {"longest_edge": 728}}}, {})
    assert dict(nested.processor_options) == {"size": {"longest_edge": 728}}
    for bad in ({"max_pixels": float("nan")}, {"a.b.c": 1}, {"": 1}, {"x": {"y": {"z": {"w": 1}}}}):
        with pytest.raises(ConfigError, match="processor-options"):
            build_config("d", {"model": "m", "processor_options": bad}, {})


def test_the_flag_counts_and_is_reported(tmp_path):
    Image.new("RGB", (1280, 960)).save(tmp_path / "a.png")
    row = {"messages": [{"role": "user", "content": "<image>hi"}, {"role": "assistant", "content": "ok"}]}
    row["images"] = ["a.png"]
    (tmp_path / "d.jsonl").write_text(json.dumps(row) + "\n")
    model = str(PROCESSORS / "qwen2-vl-small")
    args = ["scan", str(tmp_path / "d.jsonl"), "--model", model, "--format", "jsonl", "--all-rows"]
    plain = runner.invoke(app, args)
    optioned = runner.invoke(app, [*args, "--processor-option", "max_pixels=50176"])
    assert plain.exit_code == optioned.exit_code == 0, optioned.output
    tokens = [orjson.loads(run.stdout.splitlines()[0])["image_tokens"] for run in (plain, optioned)]
    # 1280x960 within 50176 pixels: smart_resize floors it to 252x168, (18 x 12 patches) / 4 = 54 tokens
    assert tokens[0][0] > tokens[1][0] == 54
    report = runner.invoke(app, [*args[:-3], "--format", "json", "--processor-option", "max_pixels=50176"])
    data = orjson.loads(report.stdout)
    assert data["settings"]["processor_options"] == {"max_pixels": 50176}
    assert data["model"]["image_settings"]["max_pixels"] == 50176
    (tmp_path / "vlmlint.toml").write_text(
        f'model = "{model}"\nprocessor-options = {{ max_pixels = 50176 }}\n'
    )
    from_file = runner.invoke(
        app, [*args[:2], "--config", str(tmp_path / "vlmlint.toml"), "--format", "json"]
    )
    assert orjson.loads(from_file.stdout)["settings"]["processor_options"] == {"max_pixels": 50176}
    refused = runner.invoke(app, [*args, "--processor-option", "max_pixel=1"])
    assert refused.exit_code == 2 and "known:" in refused.output
    malformed = runner.invoke(app, [*args, "--processor-option", "max_pixels"])
    assert malformed.exit_code == 2 and "KEY=VALUE" in malformed.output
