"""Command-line conventions ruff, black, pytest and pip share (issue 22, part 2)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from vlmlint.cli import app
from vlmlint.version import __version__

runner = CliRunner()
COMMANDS = ["scan", "stats", "rules", "rule", "config", "models", "version"]


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_flag(flag):
    result = runner.invoke(app, [flag])
    assert result.exit_code == 0 and result.output.strip() == f"vlmlint {__version__}"


@pytest.mark.parametrize("command", [[], *([c] for c in COMMANDS)])
def test_dash_h_is_help_on_every_command(command):
    short, long = runner.invoke(app, [*command, "-h"]), runner.invoke(app, [*command, "--help"])
    assert short.exit_code == long.exit_code == 0
    assert short.output == long.output and "Usage: vlmlint" in short.output


def test_help_shows_boolean_flags_as_flags_keeps_brackets_and_fits_80_columns():
    result = runner.invoke(app, ["scan", "--help"], terminal_width=80, env={"COLUMNS": "80"})
    assert result.exit_code == 0
    assert "-q, --quiet " in result.output and "<bool>" not in result.output
    assert "vlmlint[ray]" in result.output  # no markup ate the extra's brackets
    assert max(len(line) for line in result.output.splitlines()) <= 80
    assert "--pipeline-option" in result.output  # option names are not cut


def test_python_dash_m_vlmlint():
    done = subprocess.run([sys.executable, "-m", "vlmlint", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == f"vlmlint {__version__}"


def test_a_selector_that_matches_no_rule_is_an_error_and_names_are_accepted(tmp_path):
    from tests.conftest import DATASETS

    bad = runner.invoke(app, ["scan", str(DATASETS / "demo"), "--select", "VLM999", "-q"])
    assert bad.exit_code == 2 and "matches no rule" in bad.output
    named = runner.invoke(
        app, ["scan", str(DATASETS / "demo"), "--select", "unreadable-image", "-q", "-f", "json"]
    )
    import json

    assert set(json.loads(named.output)["summary"]["by_code"]) == {"VLM201"}


@pytest.mark.parametrize(
    ("model", "says"),
    [
        ("qwen2vl", "unknown profile; did you mean qwen2-vl"),
        ("./no/such/processor", "no such folder"),
        ("fixtures/datasets/demo/data.jsonl", "a file, not a processor folder"),
    ],
)
def test_a_mistyped_model_fails_at_once_without_the_hub(model, says, monkeypatch):
    """No hub request for a bare name or a local-looking path (the hub's retries took 35-50 s)."""
    import transformers.utils

    from tests.conftest import DATASETS, ROOT

    def no_hub(*args, **kwargs):
        raise AssertionError(f"the hub was asked for {args}")

    monkeypatch.setattr(transformers.utils, "cached_file", no_hub)
    monkeypatch.chdir(ROOT)
    result = runner.invoke(app, ["scan", str(DATASETS / "demo"), "--model", model, "-q"])
    assert result.exit_code == 2 and says in result.output, result.output


def test_packaging_metadata():
    """An SPDX license (no setuptools deprecation warning on install), its file, and classifiers."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    from tests.conftest import ROOT

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "Apache-2.0" and (ROOT / "LICENSE").is_file()
    assert any(c.startswith("Programming Language :: Python :: 3") for c in project["classifiers"])
    from vlmlint.report.ci import INFORMATION_URI

    assert project["urls"]["Homepage"] == INFORMATION_URI  # one address for the package and SARIF's driver


def test_stats_takes_the_scans_options_and_several_datasets():
    import json

    from tests.conftest import DATASETS

    args = ["stats", str(DATASETS / "demo"), str(DATASETS / "llava"), "-f", "json", "-q"]
    one = json.loads(runner.invoke(app, [*args[:2], "-f", "json", "-q"]).output)
    both = runner.invoke(
        app, [*args, "--pipeline", "llamafactory", "--pipeline-option", "cutoff_len=4096", "-j", "1"]
    )
    assert both.exit_code == 0, both.output
    report = json.loads(both.output)
    assert report["rows"] > one["rows"] and "demo" in report["dataset"] and "llava" in report["dataset"]


def test_an_unreachable_hub_is_called_a_network_failure(monkeypatch):
    import vlmlint.models as models
    from tests.conftest import DATASETS

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.setattr(models, "hub_network_problem", lambda endpoint: "gaierror: Name or service not known")
    result = runner.invoke(app, ["scan", str(DATASETS / "demo"), "--model", "some-org/some-vlm", "-q"])
    assert result.exit_code == 2 and "a network failure, not a missing model" in result.output
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)  # honoured: the cache only
    offline = runner.invoke(app, ["scan", str(DATASETS / "demo"), "--model", "some-org/some-vlm", "-q"])
    assert offline.exit_code == 2 and "HF_HUB_OFFLINE is set" in offline.output


def test_stats_names_the_trainers_knob_under_a_pipeline():
    """`image_max_pixels` under --pipeline llamafactory, the processor's `max_pixels` without (issue 22)."""
    import json

    from tests.conftest import DATASETS

    args = ["stats", str(DATASETS / "demo"), "-f", "json", "-q", "--max-length", "400"]
    plain = json.loads(runner.invoke(app, args).output)
    trainer = json.loads(runner.invoke(app, [*args, "--pipeline", "llamafactory"]).output)
    assert plain["knob"]["name"] == "max_pixels" and trainer["knob"]["name"] == "image_max_pixels"
