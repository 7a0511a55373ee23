"""Settings: defaults < [tool.vlmlint] / vlmlint.toml < flags; selection by code or prefix."""

from __future__ import annotations

import json
import shutil

import orjson
import pytest
from PIL import Image
from typer.testing import CliRunner

from tests.conftest import PROCESSORS
from vlmlint.cli import app
from vlmlint.config import (
    THRESHOLD_DEFAULTS,
    THRESHOLD_RANGES,
    THRESHOLDS,
    ConfigError,
    ScanConfig,
    build_config,
    find_config_file,
    read_config_file,
)
from vlmlint.records import Severity

MODEL = str(PROCESSORS / "qwen2-vl-small")
runner = CliRunner()


def test_select_and_ignore_by_prefix():
    config = ScanConfig(dataset="d", model="m", select=("VLM3", "VLM401"), ignore=("VLM302",))
    assert config.rule_enabled("VLM301") and config.rule_enabled("VLM401")
    assert not config.rule_enabled("VLM302") and not config.rule_enabled("VLM103")


def test_flags_override_the_file_and_thresholds_merge():
    config = build_config(
        "d",
        {"model": "a", "max_length": 100, "thresholds": {"near-limit-share": 0.5}, "select": "VLM1, VLM4"},
        {"model": "b", "max_length": None, "fail_on": "warning"},
    )
    assert config.model == "b" and config.max_length == 100 and config.fail_on is Severity.WARNING
    assert config.thresholds["near_limit_share"] == 0.5 and config.select == ("VLM1", "VLM4")


@pytest.mark.parametrize(
    "file_settings,message",
    [
        ({"model": "a", "thresholds": {"nope": 1}}, "unknown threshold"),
        ({"model": "a", "fail_on": "fatal"}, "fail-on"),
        ({"model": "a", "truncation_side": "middle"}, "truncation-side"),
    ],
)
def test_bad_settings_are_refused(file_settings, message):
    with pytest.raises(ConfigError, match=message):
        build_config("d", file_settings, {})


def test_no_model_means_the_default_profile():
    assert build_config("d", {}, {}).model == "qwen2-vl"
    assert build_config("d", {"model": "a"}, {}).model == "a"


def test_pyproject_table_is_found_from_a_subfolder(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.vlmlint]\nmodel = "x"\nmax-length = 64\n')
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    path = find_config_file(sub)
    assert path == tmp_path / "pyproject.toml"
    assert read_config_file(path) == {"model": "x", "max_length": 64}


def test_unknown_keys_in_the_file_are_refused(tmp_path):
    (tmp_path / "vlmlint.toml").write_text('modle = "x"\n')
    with pytest.raises(ConfigError, match="unknown setting"):
        read_config_file(tmp_path / "vlmlint.toml")


def test_cli_reads_vlmlint_toml(tmp_path, monkeypatch):
    Image.new("RGB", (640, 480)).save(tmp_path / "a.jpg")
    row = {
        "id": "1",
        "image": "a.jpg",
        "conversations": [{"from": "human", "value": "<image>\nHi"}, {"from": "gpt", "value": "Yo"}],
    }
    (tmp_path / "data.jsonl").write_text(json.dumps(row) + "\n")
    shutil.copytree(MODEL, tmp_path / "proc")  # a found config's model folder lies inside its folder
    (tmp_path / "vlmlint.toml").write_text('model = "proc"\nmax-length = 10\n')
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["scan", "data.jsonl", "--format", "json"])
    assert result.exit_code == 1, result.output
    assert orjson.loads(result.stdout)["summary"]["by_code"].get("VLM401") == 1
    ignored = runner.invoke(app, ["scan", "data.jsonl", "--format", "json", "--ignore", "VLM4"])
    assert ignored.exit_code == 0 and "VLM401" not in orjson.loads(ignored.stdout)["summary"]["by_code"]
    shown = runner.invoke(app, ["config"])
    assert shown.exit_code == 0 and "max-length = 10" in shown.stdout and "near-limit-share" in shown.stdout


def test_bad_threshold_flag_exits_2(tmp_path):
    result = runner.invoke(app, ["scan", str(tmp_path), "--model", MODEL, "--threshold", "oops"])
    assert result.exit_code == 2


def test_per_source_ignores_match_relative_absolute_and_basename_globs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    legacy = tmp_path / "data" / "legacy"
    legacy.mkdir(parents=True)
    config = build_config(
        "d",
        {
            "per_source_ignores": {
                "./data/legacy/*.jsonl": ["vlm2", "VLM103"],
                str(tmp_path / "abs.json"): "VLM4",
            }
        },
        {},
        config_root=tmp_path,
    )
    assert config.per_source_ignores["data/legacy/*.jsonl"] == ("VLM2", "VLM103")
    assert config.source_ignores("data/legacy/old.jsonl") == ("VLM2", "VLM103")
    assert config.source_ignores(str(legacy / "old.jsonl")) == ("VLM2", "VLM103")  # an absolute source
    assert config.source_ignores("data/new.jsonl") == ()
    assert config.source_ignores("abs.json") == ("VLM4",)
    (tmp_path / "saved").mkdir()
    split = build_config("d", {"per_source_ignores": {"saved": ["VLM1"]}}, {}, config_root=tmp_path)
    assert split.source_ignores("saved[train]") == ("VLM1",)  # a save_to_disk folder and its split
    by_name = build_config("d", {"per_source_ignores": {"*.json": ["VLM1"]}}, {}, config_root=tmp_path)
    assert by_name.source_ignores("x/y/z.json") == ("VLM1",)  # no slash: the file name alone matches
    with pytest.raises(ConfigError, match="per-source-ignores"):
        build_config("d", {"per_source_ignores": ["VLM1"]}, {})
    with pytest.raises(ConfigError, match="per-source-ignores"):
        build_config("d", {"per_source_ignores": {"*.json": [1]}}, {})


def test_cli_per_source_ignores_drop_findings_of_matching_files(tmp_path, monkeypatch):
    Image.new("RGB", (640, 480)).save(tmp_path / "a.jpg")
    bad = {
        "id": "1",
        "image": "missing.jpg",
        "conversations": [{"from": "human", "value": "<image>\nHi"}, {"from": "gpt", "value": "Yo"}],
    }
    legacy = tmp_path / "data" / "legacy"
    legacy.mkdir(parents=True)
    (legacy / "old.jsonl").write_text(json.dumps(bad) + "\n")
    (tmp_path / "data" / "new.jsonl").write_text(json.dumps({**bad, "id": "2"}) + "\n")
    shutil.copytree(MODEL, tmp_path / "proc")
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.vlmlint]\nmodel = "{tmp_path / "proc"}"\nper-source-ignores = {{ "data/legacy/*.jsonl" = ["VLM1"] }}\n'
    )
    sub = tmp_path / "data"
    for cwd, target in ((tmp_path, "data"), (sub, ".")):  # globs start at the config file's folder
        monkeypatch.chdir(cwd)
        result = runner.invoke(app, ["scan", target, "--format", "json", "--verify", "0", "-q"])
        assert result.exit_code == 1, result.output
        findings = orjson.loads(result.stdout)["findings"]
        assert [(f["code"], f["id"]) for f in findings] == [("VLM103", "2")]


def test_config_command_shows_effective_values_and_their_origin(tmp_path, monkeypatch):
    (tmp_path / "vlmlint.toml").write_text(
        'max-length = 10\nselect = ["VLM1"]\nper-source-ignores = { "old/*" = ["VLM2"] }\n'
        "[thresholds]\nnear-limit-share = 0.5\n"
    )
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(
        app, ["config", "--max-length", "20", "--fail-on", "warning", "--threshold", "tiny_image_side=10"]
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "max-length = 20  # flag" in lines  # the flag wins over the file's 10
    assert 'select = ["VLM1"]  # file' in lines
    assert 'fail-on = "warning"  # flag' in lines
    assert 'model = "qwen2-vl"  # default' in lines
    assert 'per-source-ignores = {"old/*" = ["VLM2"]}  # file' in lines
    assert "jobs = 0  # default" in lines  # scan's own default (every core), not ScanConfig's 1
    assert "# layout =  # unset (default)" in lines
    assert any(line.startswith("near-limit-share = 0.5  # file:") for line in lines)
    assert any(line.startswith("tiny-image-side = 10  # flag:") for line in lines)
    assert any(line.startswith("bomb-pixels = 89478485  # default:") for line in lines)
    # valid TOML, which read back as a config file gives the same settings
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    printed = tomllib.loads(result.stdout)["tool"]["vlmlint"]
    assert printed["max-length"] == 20 and printed["thresholds"]["tiny-image-side"] == 10
    (tmp_path / "pyproject.toml").write_text(result.stdout)
    (tmp_path / "vlmlint.toml").unlink()
    again = runner.invoke(app, ["config"])
    assert again.exit_code == 0, again.output
    assert "max-length = 20  # file" in again.stdout.splitlines()
    bad = runner.invoke(app, ["config", "--threshold", "nope=1"])
    assert bad.exit_code == 2 and "unknown threshold" in bad.stderr


def test_every_threshold_has_a_range_its_default_is_in():
    assert set(THRESHOLD_RANGES) == set(THRESHOLDS)
    assert build_config("d", {"thresholds": dict(THRESHOLD_DEFAULTS)}, {}).thresholds == THRESHOLD_DEFAULTS
