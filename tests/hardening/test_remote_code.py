"""A processor folder that names custom code (auto_map) is refused unless --trust-remote-code."""

from __future__ import annotations

import json
import shutil

import pytest
from PIL import Image
from typer.testing import CliRunner

from tests.hardening.conftest import MODEL
from vlmlint.cli import app

runner = CliRunner()
CUSTOM = {
    "AutoProcessor": "processing_custom.CustomProcessor",
    "AutoImageProcessor": "image_processing_custom.CustomImageProcessor",
}


@pytest.fixture()
def dataset(tmp_path):
    Image.new("RGB", (320, 240)).save(tmp_path / "a.jpg")
    row = {
        "image": "a.jpg",
        "conversations": [{"from": "human", "value": "<image>\nHi"}, {"from": "gpt", "value": "Yo"}],
    }
    (tmp_path / "data.jsonl").write_text(json.dumps(row) + "\n")
    return tmp_path / "data.jsonl"


def processor(tmp_path, file: str, auto_map: dict):
    """The fixture Qwen2-VL processor with an auto_map added to one of its files (no code file beside it)."""
    folder = tmp_path / f"processor-{file.split('.')[0]}"
    shutil.copytree(MODEL, folder)
    settings = json.loads((folder / file).read_text())
    settings["auto_map"] = auto_map
    (folder / file).write_text(json.dumps(settings))
    return folder


def scan(dataset, folder, *flags):
    result = runner.invoke(
        app, ["scan", str(dataset), "-m", str(folder), "-q", "--verify", "0", "--jobs", "1", *flags]
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


@pytest.mark.parametrize(
    "file,auto_map",
    [
        ("preprocessor_config.json", CUSTOM),
        ("tokenizer_config.json", {"AutoTokenizer": ["tokenization_custom.CustomTokenizer", None]}),
        ("config.json", CUSTOM),
    ],
)
def test_remote_code_is_refused_without_the_flag(tmp_path, dataset, file, auto_map, record):
    folder = processor(tmp_path, file, auto_map)
    refused = scan(dataset, folder)
    assert refused.exit_code == 2
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "needs remote code" in lines[0] and "--trust-remote-code" in lines[0]
    trusted = scan(dataset, folder, "--trust-remote-code")
    assert "needs remote code" not in trusted.output
    after = (
        f"exit {trusted.exit_code}: the custom code file is absent, so loading fails with one line"
        if trusted.exit_code == 2
        else f"exit {trusted.exit_code}: loads (transformers resolves the processor without the custom class)"
    )
    if trusted.exit_code == 2:
        assert len([line for line in trusted.stderr.splitlines() if line.strip()]) == 1
    record(
        "processor",
        f"auto_map naming {', '.join(auto_map)} in {file}",
        f"exit 2: {lines[0].replace(str(folder), '<processor>')}; with --trust-remote-code: {after}",
    )


def test_custom_model_code_alone_is_not_refused(tmp_path, dataset, record):
    folder = processor(tmp_path, "config.json", {"AutoModel": "modeling_custom.CustomModel"})
    result = scan(dataset, folder)
    assert result.exit_code == 0, result.output
    record(
        "processor",
        "auto_map naming only AutoModel in config.json",
        "exit 0: vlmlint never loads a model, so no code runs",
    )
