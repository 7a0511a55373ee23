"""--pipeline: the preset registry, options, and the hf default (the raw processor: no trainer fate)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tests.conftest import DATASETS, PROCESSORS
from vlmlint.cli import app
from vlmlint.config import build_config
from vlmlint.engine import Scanner
from vlmlint.pipelines import PIPELINES, Pipeline, PipelineError, load_pipeline

MODEL = str(PROCESSORS / "qwen2-vl")


def test_registry_names_every_preset():
    assert list(PIPELINES) == [
        "hf",
        "axolotl",
        "internvl",
        "llamafactory",
        "qwen-vl-finetune",
        "swift",
        "trl",
    ]
    assert type(load_pipeline("hf")) is Pipeline


def test_unknown_preset_and_option_are_refused():
    with pytest.raises(PipelineError, match="unknown --pipeline"):
        load_pipeline("unsloth")
    with pytest.raises(PipelineError, match="unknown option"):
        load_pipeline("hf", {"cutoff_len": 10})


def test_hf_predicts_nothing_and_keeps_sizes():
    scanner = Scanner(build_config(str(DATASETS / "llava"), {}, {"model": MODEL, "jobs": 1}))
    assert scanner.pipeline.resize(480, 640) == (480, 640)
    assert all(outcome.result.trainer is None for outcome in scanner.scan())


def test_cli_refuses_a_bad_pipeline_with_one_line():
    runner = CliRunner()
    base = ["scan", str(DATASETS / "llava"), "--model", MODEL, "-q", "--verify", "0"]
    result = runner.invoke(app, [*base, "--pipeline", "unsloth"])
    assert result.exit_code == 2 and "unknown --pipeline 'unsloth'" in result.output
    result = runner.invoke(app, [*base, "--pipeline-option", "nonsense"])
    assert result.exit_code == 2 and "KEY=VALUE" in result.output
