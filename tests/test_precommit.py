"""The pre-commit hooks of .pre-commit-hooks.yaml, run by the real pre-commit tool, and multi-file scans.

`language: python` would make pre-commit pip-install vlmlint from the network, so the test turns each
hook into a `repo: local` hook with the same id, entry, files, types, args, pass_filenames and
require_serial, but run from this checkout's virtual environment (language unsupported, or system on
older pre-commit). What is proven is that the hook definitions themselves work with pre-commit.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import yaml
from PIL import Image
from typer.testing import CliRunner

from tests.conftest import PROCESSORS, ROOT
from vlmlint.cli import app

MODEL = str(PROCESSORS / "qwen2-vl")
BIN = Path(sys.executable).parent  # this checkout's venv: `vlmlint` there is this code
runner = CliRunner()


def row(row_id: str, image: str, text: str = "<image>\nWhat is this?") -> dict:
    return {
        "id": row_id,
        "image": image,
        "conversations": [{"from": "human", "value": text}, {"from": "gpt", "value": "A red square."}],
    }


def write_manifest(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def hook_definitions() -> list[dict]:
    return yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))


def test_hook_definitions_are_what_the_docs_say():
    hooks = {hook["id"]: hook for hook in hook_definitions()}
    assert set(hooks) == {"vlmlint", "vlmlint-parquet", "vlmlint-dataset"}
    for hook in hooks.values():
        assert hook["entry"] == "vlmlint scan"
        assert hook["language"] == "python"
        assert hook["pass_filenames"] is (hook["id"] != "vlmlint-dataset") and hook["require_serial"] is True
        assert {"--quiet", "--verify=0"} <= set(hook["args"])
    docs = (ROOT / "docs" / "pre-commit.md").read_text(encoding="utf-8")
    assert all(f"`{hook_id}`" in docs for hook_id in hooks)


# -- several datasets in one call ------------------------------------------------------------------


@pytest.fixture()
def manifests(tmp_path):
    Image.new("RGB", (320, 240), "red").save(tmp_path / "a.jpg")
    good = write_manifest(tmp_path / "good.jsonl", [row("g1", "a.jpg"), row("g2", "a.jpg")])
    bad = write_manifest(tmp_path / "bad.jsonl", [row("b1", "a.jpg", "<image><image> two?")])
    missing = write_manifest(tmp_path / "missing.jsonl", [row("m1", "gone.jpg")])
    return good, bad, missing


def test_several_datasets_make_one_report_and_load_the_model_once(manifests, monkeypatch):
    import vlmlint.engine

    loads = []
    real_load = vlmlint.engine.load_model
    monkeypatch.setattr(vlmlint.engine, "load_model", lambda *a, **k: loads.append(a) or real_load(*a, **k))
    good, bad, missing = manifests
    result = runner.invoke(
        app, ["scan", str(good), str(bad), str(missing), "--model", MODEL, "--verify", "0", "-f", "json"]
    )
    assert result.exit_code == 1, result.output
    assert len(loads) == 1
    report = orjson.loads(result.stdout)
    assert report["summary"]["samples"] == 4
    assert report["summary"]["by_code"] == {"VLM301": 1, "VLM103": 1}
    assert {Path(f["source"]).name for f in report["findings"]} == {"bad.jsonl", "missing.jsonl"}
    assert report["settings"]["datasets"] == [str(good), str(bad), str(missing)]
    assert report["settings"]["unreadable"] == []


def test_clean_datasets_together_exit_0(manifests):
    good = manifests[0]
    result = runner.invoke(app, ["scan", str(good), str(good), "--model", MODEL, "--verify", "0"])
    assert result.exit_code == 0, result.output
    assert "no findings" in result.stdout


def test_an_unreadable_dataset_among_several_is_reported_and_the_rest_scanned(manifests, tmp_path):
    good, bad, _ = manifests
    nowhere = tmp_path / "nowhere.jsonl"
    result = runner.invoke(
        app, ["scan", str(good), str(nowhere), str(bad), "--model", MODEL, "--verify", "0", "-f", "json"]
    )
    assert result.exit_code == 2  # an unreadable file is an error, above findings
    report = orjson.loads(result.stdout)  # the report on stdout still covers the readable ones
    assert report["summary"]["samples"] == 3
    assert report["summary"]["by_code"] == {"VLM301": 1}
    assert report["settings"]["unreadable"] == [str(nowhere)]
    assert "skipped" in result.stderr and "1 of 3 datasets could not be read" in result.stderr


# -- the real pre-commit tool ----------------------------------------------------------------------


def _language() -> str:
    """`unsupported` since pre-commit 4.4 (it replaced `system`), `system` before."""
    try:
        from pre_commit.all_languages import languages
    except ImportError:  # pre-commit before 3.2
        return "system"
    return "unsupported" if "unsupported" in languages else "system"


def _git(repo: Path, *args: str, env: dict, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=check, timeout=300
    )


@pytest.fixture()
def repo(tmp_path):
    pytest.importorskip("pre_commit", reason="pre-commit is not installed (pip install -e '.[test]')")
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    if not (BIN / "vlmlint").exists():
        pytest.skip(f"no vlmlint script in {BIN} (pip install -e .)")
    folder = tmp_path / "repo"
    (folder / "data").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        PRE_COMMIT_HOME=str(tmp_path / "pre-commit-home"),  # pre-commit's own cache stays in tmp_path
        HOME=str(tmp_path / "home"),  # no user git config, hooks or templates
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        COLUMNS="200",
    )
    (tmp_path / "home").mkdir()
    _git(folder, "init", "-q", "-b", "main", env=env)
    for key, value in (("user.name", "vlmlint test"), ("user.email", "test@example.invalid")):
        _git(folder, "config", key, value, env=env)
    _git(folder, "config", "commit.gpgsign", "false", env=env)
    hooks = [
        {
            **hook,
            "language": _language(),
            "args": [*hook.get("args", []), f"--model={MODEL}"]  # the tiny fixture processor
            + (["data"] if hook["id"] == "vlmlint-dataset" else []),  # its dataset, as the docs say
        }
        for hook in hook_definitions()
    ]
    config = {"repos": [{"repo": "local", "hooks": hooks}]}
    (folder / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    Image.new("RGB", (320, 240), "red").save(folder / "data" / "a.jpg")
    _git(folder, "add", ".pre-commit-config.yaml", "data/a.jpg", env=env)
    _git(folder, "commit", "-q", "-m", "images", env=env)
    install = subprocess.run(
        [str(BIN / "pre-commit"), "install"], cwd=folder, env=env, capture_output=True, text=True
    )
    assert install.returncode == 0, install.stdout + install.stderr
    return folder, env


def test_pre_commit_hook_passes_a_good_manifest_and_blocks_a_bad_one(repo):
    folder, env = repo
    write_manifest(folder / "data" / "good.jsonl", [row("g1", "a.jpg"), row("g2", "a.jpg")])
    _git(folder, "add", "data/good.jsonl", env=env)
    good = _git(folder, "commit", "-m", "good manifest", env=env, check=False)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "vlmlint (VLM dataset manifests)" in good.stdout + good.stderr
    assert "Passed" in good.stdout + good.stderr

    # Two new manifests in one commit: a placeholder mismatch and a missing image, one vlmlint call.
    write_manifest(folder / "data" / "bad.jsonl", [row("b1", "a.jpg", "<image> and <image>?")])
    write_manifest(folder / "data" / "gone.jsonl", [row("m1", "gone.jpg")])
    _git(folder, "add", "data/bad.jsonl", "data/gone.jsonl", env=env)
    bad = _git(folder, "commit", "-m", "bad manifests", env=env, check=False)
    output = bad.stdout + bad.stderr
    assert bad.returncode != 0, output
    assert "Failed" in output and "exit code: 1" in output
    assert "VLM301" in output and "VLM103" in output
    assert "data/bad.jsonl" in output and "data/gone.jsonl" in output
    per_file = output.split("vlmlint (whole dataset)")[0]  # the dataset hook prints its own report
    assert per_file.count("rows scanned:") == 1  # require_serial: one process, one report
    log = _git(folder, "log", "--format=%s", env=env).stdout.split("\n")
    assert log[0] == "good manifest"  # the bad commit was refused


def test_pre_commit_hook_skips_files_it_does_not_match(repo):
    folder, env = repo
    (folder / "README.md").write_text("# data\n")
    _git(folder, "add", "README.md", env=env)
    result = _git(folder, "commit", "-m", "readme", env=env, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no files to check" in result.stdout + result.stderr


def test_the_dataset_hook_blocks_a_commit_that_deletes_an_image_a_manifest_names(repo):
    """No manifest changes, so the per-file hooks get nothing; vlmlint-dataset scans data/ anyway."""
    folder, env = repo
    write_manifest(folder / "data" / "good.jsonl", [row("g1", "a.jpg")])
    _git(folder, "add", "data/good.jsonl", env=env)
    added = _git(folder, "commit", "-m", "manifest", env=env, check=False)
    assert added.returncode == 0, added.stdout + added.stderr
    _git(folder, "rm", "-q", "data/a.jpg", env=env)
    deleted = _git(folder, "commit", "-m", "drop the image", env=env, check=False)
    output = deleted.stdout + deleted.stderr
    assert deleted.returncode != 0 and "VLM103" in output, output
    assert "vlmlint (whole dataset)" in output
