"""Config files and flags: a pull request's own config cannot relax safety; every value is checked.

Each case scans a tiny valid dataset in tmp/dataset with the config file beside it (found by search, as
in CI where the working folder is the pull request's checkout) or named with --config.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from PIL import Image

from tests.hardening.conftest import MODEL, run_guarded, shape
from vlmlint.config import MAX_CONFIG_BYTES, MAX_JOBS

SCAN = ("--format", "json", "--verify", "0", "-q", "--jobs", "1")


def llava(image: str) -> dict:
    return {
        "id": "r0",
        "image": image,
        "conversations": [{"from": "human", "value": "<image>\nWhat?"}, {"from": "gpt", "value": "A cat."}],
    }


@pytest.fixture()
def tree(tmp_path):
    """tmp/dataset (the repository: data.jsonl, images/a.jpg) and tmp/outside/secret.jpg."""
    dataset, outside = tmp_path / "dataset", tmp_path / "outside"
    (dataset / "images").mkdir(parents=True)
    outside.mkdir()
    Image.new("RGB", (64, 64), "red").save(dataset / "images" / "a.jpg")
    Image.new("RGB", (64, 64), "blue").save(outside / "secret.jpg")
    (dataset / "data.jsonl").write_text(json.dumps(llava("images/a.jpg")) + "\n")
    return dataset, outside


def pyproject(folder: Path, body: str) -> Path:
    path = folder / "pyproject.toml"
    path.write_text("[tool.vlmlint]\n" + body + "\n")
    return path


def scan(dataset: Path, *flags: str, model: bool = True):
    return run_guarded("scan", "data.jsonl", *(("-m", MODEL) if model else ()), *SCAN, *flags, cwd=dataset)


def refused(run, tmp_path, *words: str) -> str:
    assert run.exit_code == 2, run.stderr
    line = run.error_line(tmp_path)
    assert len([text for text in run.stderr.splitlines() if text.strip()]) == 1, run.stderr
    for word in words:
        assert word in line, line
    return shape(line, tmp_path)


# ---- 1. the safety switches of a found config ----


def custom_processor(folder: Path, marker: Path) -> Path:
    """The fixture processor with an auto_map to its own image_processing_custom.py, which leaves a marker."""
    shutil.copytree(MODEL, folder)
    settings = json.loads((folder / "preprocessor_config.json").read_text())
    settings["auto_map"] = {"AutoImageProcessor": "image_processing_custom.CustomImageProcessor"}
    (folder / "preprocessor_config.json").write_text(json.dumps(settings))
    (folder / "image_processing_custom.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "from transformers import Qwen2VLImageProcessor\n"
        "class CustomImageProcessor(Qwen2VLImageProcessor):\n    pass\n"
    )
    return folder


def test_pull_request_config_cannot_run_its_processor_code(tree, tmp_path, record):
    dataset, outside = tree
    marker = tmp_path / "marker"
    custom_processor(dataset / "proc", marker)
    (dataset / "data.jsonl").write_text(json.dumps(llava("../outside/secret.jpg")) + "\n")
    pyproject(
        dataset,
        'model = "proc"\ntrust-remote-code = true\nallow-outside-root = true\nallow-remote = true\n',
    )
    run = scan(dataset, model=False)
    line = refused(run, tmp_path, "trust-remote-code", "--trust-remote-code", "--config")
    assert not marker.exists() and run.touched(outside) == [] and run.peak_mb < 1024
    assert not any(path.endswith("image_processing_custom.py") for path in run.opened)
    record("config", "found pyproject.toml: model = a folder with auto_map, trust-remote-code, allow-*", line)

    pyproject(dataset, 'model = "proc"\n')  # the folder alone: a local model in the repository is fine
    run = scan(dataset, model=False)
    line = refused(run, tmp_path, "needs remote code", "--trust-remote-code")
    assert not marker.exists() and run.touched(outside) == []
    assert not any(path.endswith("image_processing_custom.py") for path in run.opened)
    record(
        "config",
        "found config: model = a repository folder whose auto_map names its own code, no trust flag",
        line.replace(str(dataset / "proc"), "<proc>") + " (the custom module is never imported)",
    )


@pytest.mark.parametrize("key", ["allow-outside-root", "allow-remote"])
def test_found_config_cannot_open_the_gates(tree, tmp_path, key, record):
    dataset, outside = tree
    (dataset / "data.jsonl").write_text(json.dumps(llava("../outside/secret.jpg")) + "\n")
    pyproject(dataset, f"{key} = true")
    run = scan(dataset)
    line = refused(run, tmp_path, key, f"--{key}")
    assert run.touched(outside) == [] and run.peak_mb < 1024
    record("config", f"found config: {key} = true", line)
    if key == "allow-outside-root":  # the same setting from a flag or a named file is the user's choice
        flagged = scan(dataset, f"--{key}")
        assert flagged.exit_code == 0 and "VLM104" not in flagged.codes()
        named = scan(dataset, "--config", str(dataset / "pyproject.toml"))
        assert named.exit_code == 0 and "VLM104" not in named.codes()
        record(
            "config",
            f"{key} = true in a file named with --config, or --{key}",
            "exit 0: taken (the user named it)",
        )


def test_found_config_image_root_must_stay_in_the_repository(tree, tmp_path, record):
    dataset, outside = tree
    (dataset / "data.jsonl").write_text(json.dumps(llava("secret.jpg")) + "\n")
    pyproject(dataset, f'image-root = "{outside}"')
    run = scan(dataset)
    line = refused(run, tmp_path, "image-root", "--image-root")
    assert run.touched(outside) == [] and run.peak_mb < 1024
    record("config", "found config: image-root = a folder outside the repository", line)

    pyproject(dataset, 'image-root = "../outside"')  # relative, same folder
    line = refused(scan(dataset), tmp_path, "image-root")
    record("config", 'found config: image-root = "../outside"', line)

    (dataset / "link").symlink_to(outside)  # inside by name, outside once resolved
    pyproject(dataset, 'image-root = "link"')
    run = scan(dataset)
    refused(run, tmp_path, "image-root")
    assert run.touched(outside) == []
    record(
        "config",
        "found config: image-root = a link in the repository to a folder outside",
        "exit 2: refused as above",
    )

    (dataset / "data.jsonl").write_text(json.dumps(llava("a.jpg")) + "\n")
    pyproject(dataset, 'image-root = "images"')
    run = scan(dataset)
    assert run.exit_code == 0, run.stderr
    record("config", "found config: image-root = a folder inside the repository", "exit 0: taken")


def test_found_config_model_folder_outside_the_repository(tree, tmp_path, record):
    dataset, _ = tree
    pyproject(dataset, f'model = "{MODEL}"')
    line = refused(scan(dataset, model=False), tmp_path, "model folder", "--model")
    line = line.replace(MODEL, "<processor>").replace(os.path.dirname(MODEL), "<processors>")
    record("config", "found config: model = a processor folder outside the repository", line)


def test_found_config_jobs_above_the_cores(tree, tmp_path, record):
    dataset, _ = tree
    cores = os.cpu_count() or 1
    if cores >= MAX_JOBS:
        pytest.skip("this machine has as many cores as jobs may ask for")
    pyproject(dataset, f"jobs = {MAX_JOBS}")
    run = run_guarded(
        "scan", "data.jsonl", "-m", MODEL, "--format", "json", "--verify", "0", "-q", cwd=dataset
    )
    refused(run, tmp_path, f"jobs = {MAX_JOBS}", f"{cores} cores", "--jobs")
    assert run.peak_mb < 1024
    record(
        "config",
        f"found config: jobs = {MAX_JOBS} (more than the cores)",
        "exit 2: jobs is not taken from a config file found in the scanned folder (more than this machine's "
        "cores); pass --jobs or --config pyproject.toml",
    )
    pyproject(dataset, "jobs = 1")
    assert scan(dataset).exit_code == 0
    too_many = scan(dataset, "--jobs", str(MAX_JOBS + 1))  # a flag too has a range
    record("config", f"--jobs {MAX_JOBS + 1}", refused(too_many, tmp_path, "jobs", str(MAX_JOBS)))


def test_found_config_cannot_raise_work_bounds(tree, tmp_path, record):
    dataset, _ = tree
    for name in ("bomb-pixels", "max-text-chars"):
        pyproject(dataset, f"[tool.vlmlint.thresholds]\n{name} = 1000000000")
        line = refused(scan(dataset), tmp_path, f"thresholds.{name}", "--threshold")
        record("config", f"found config: thresholds.{name} raised above the default", line)
    pyproject(dataset, "[tool.vlmlint.thresholds]\nmax-text-chars = 1000")  # lowering a bound is fine
    assert scan(dataset).exit_code == 0
    record("config", "found config: thresholds.max-text-chars lowered", "exit 0: taken")


def test_config_command_gives_the_same_refusals_and_origins(tree, tmp_path, record):
    dataset, outside = tree
    pyproject(dataset, "trust-remote-code = true")
    run = run_guarded("config", cwd=dataset)
    line = refused(run, tmp_path, "trust-remote-code")
    record("config", "vlmlint config with a found config that sets trust-remote-code", line)
    shown = run_guarded("config", "--trust-remote-code", cwd=dataset)
    assert shown.exit_code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert "trust-remote-code = true  # flag" in lines and "found by search" in lines[0]
    pyproject(dataset, 'max-length = "4096"')
    bad = run_guarded("config", cwd=dataset)
    record(
        "config",
        'vlmlint config with a found config: max-length = "4096"',
        refused(bad, tmp_path, "max-length"),
    )
    pyproject(dataset, "max-length = 4096\n[tool.vlmlint.thresholds]\nnear-limit-share = 0.5")
    named = run_guarded(
        "config", "--config", str(dataset / "pyproject.toml"), "--threshold", "tiny_image_side=10"
    )
    assert named.exit_code == 0, named.stderr
    lines = named.stdout.splitlines()
    assert "named with --config" in lines[0] and "max-length = 4096  # file" in lines
    assert any(text.startswith("near-limit-share = 0.5  # file") for text in lines)
    assert any(text.startswith("tiny-image-side = 10  # flag") for text in lines)
    record(
        "config", "vlmlint config --config FILE --threshold", "exit 0: each value with default, file or flag"
    )


# ---- 2. every key's type and range ----

BAD_VALUES = [
    ("thresholds = [1, 2]", "thresholds must be a table"),
    ('thresholds = "near-limit-share=0.5"', "thresholds must be a table"),
    ("image-root = 5", "image-root must be a string"),
    ('max-length = "4096"', "max-length must be a whole number"),
    ("max-length = 0", "max-length must be a whole number"),
    ("max-length = -5", "max-length must be a whole number"),
    ("max-length = 1.5", "max-length must be a whole number"),
    ("max-length = 100000000000", "max-length must be a whole number"),
    ("model = 5", "model must be a string"),
    ('model = ["a"]', "model must be a string"),
    ("model = { a = 1 }", "model must be a string"),
    ('model = ""', "model must be a non-empty string"),
    ('use-chat-template = "false"', "use-chat-template must be true or false"),
    ("streaming = 1", "streaming must be true or false"),
    ('exact = "yes"', "exact must be true or false"),
    ('trust-remote-code = "false"', "trust-remote-code must be true or false"),
    ('layout = "nope"', "layout must be one of"),
    ("truncation-side = 3", "truncation-side must be one of"),
    ('pipeline = "unsloth"', "unknown --pipeline 'unsloth'"),
    ('fail-on = "fatal"', "fail-on must be one of"),
    ('split = ""', "split must be a non-empty string"),
    ("dataset-name = 7", "dataset-name must be a string"),
    ("jobs = -1", "jobs must be a whole number"),
    ("jobs = 100000", "jobs must be a whole number"),
    ('jobs = "2"', "jobs must be a whole number"),
    ('select = ["VML4"]', "matches no rule"),
    ('ignore = [""]', "matches no rule"),
    ('ignore = ["VLM999"]', "matches no rule"),
    ("select = 5", "select must be a list"),
    ('per-source-ignores = ["VLM1"]', "per-source-ignores must be a table"),
    ('per-source-ignores = { "old/*" = ["nope"] }', "matches no rule"),
    ("pipeline-options = { cutoff_len = [1] }", "pipeline-options 'cutoff_len' must be"),
    ("pipeline-options = { cutoff_len = nan }", "pipeline-options 'cutoff_len' must be"),
    ('pipeline-options = "cutoff_len=2"', "pipeline-options must be a table"),
    ("[tool.vlmlint.thresholds]\nnear-limit-share = inf", "must be a finite number"),
    ("[tool.vlmlint.thresholds]\nnear-limit-share = nan", "must be a finite number"),
    ("[tool.vlmlint.thresholds]\nmax-text-chars = nan", "must be a finite number"),
    ("[tool.vlmlint.thresholds]\nnear-limit-share = 0", "must be above 0"),
    ("[tool.vlmlint.thresholds]\nnear-limit-share = 1.5", "must be above 0"),
    ("[tool.vlmlint.thresholds]\ntiny-image-side = 0", "must be from 1"),
    ("[tool.vlmlint.thresholds]\npre-expanded-run = 2.5", "must be a whole number"),
    ('[tool.vlmlint.thresholds]\nbomb-pixels = "big"', "must be a finite number"),
    ("[tool.vlmlint.thresholds]\nnope = 1", "unknown threshold"),
    ('modle = "x"', "unknown setting"),
    ("max-length = 10\nmax_length = 20", "max-length is given twice"),
]


@pytest.mark.parametrize("body,message", BAD_VALUES, ids=[body for body, _ in BAD_VALUES])
def test_every_value_is_checked(tree, tmp_path, body, message, record):
    dataset, _ = tree
    pyproject(dataset, body)
    run = scan(dataset)
    line = refused(run, tmp_path, message)
    assert run.peak_mb < 1024
    record("config", f"[tool.vlmlint] {body.replace(chr(10), ' ')}", line)


def test_tables_that_are_not_tables(tree, tmp_path, record):
    dataset, _ = tree
    (dataset / "pyproject.toml").write_text("[tool]\nvlmlint = 3\n")
    line = refused(scan(dataset), tmp_path, "[tool.vlmlint] must be a table")
    record("config", "found pyproject.toml: tool.vlmlint = 3", line)
    (dataset / "pyproject.toml").write_text("tool = 1\n")
    run = scan(dataset)  # not a vlmlint config: not found, the scan goes on with the defaults
    assert run.exit_code == 0, run.stderr
    record("config", "found pyproject.toml: tool = 1", "exit 0: not a [tool.vlmlint] file, so not a config")
    named = scan(dataset, "--config", str(dataset / "pyproject.toml"))
    record(
        "config", "--config pyproject.toml with tool = 1", refused(named, tmp_path, "[tool] must be a table")
    )


def test_files_that_are_not_toml(tree, tmp_path, record):
    dataset, outside = tree
    config = dataset / "vlmlint.toml"
    cases = {
        "invalid TOML": (b"max-length = = 3\n", "not valid TOML"),
        "not UTF-8": (b'model = "\xff\xfe"\n', "not UTF-8"),
        "arrays nested 200,000 deep": (b"a = " + b"[" * 200_000 + b"]" * 200_000 + b"\n", "too deeply"),
        f"{MAX_CONFIG_BYTES + 1:,} bytes": (b"#" * (MAX_CONFIG_BYTES + 1), "bytes a config file may have"),
    }
    for case, (content, message) in cases.items():
        config.write_bytes(content)
        run = scan(dataset)
        line = refused(run, tmp_path, message)
        assert run.peak_mb < 1024
        record("config", f"found vlmlint.toml: {case}", line if len(line) < 300 else line[:297] + "...")
    config.unlink()
    config.symlink_to("/dev/zero")
    run = scan(dataset)  # not a regular file: not a config, never opened
    assert run.exit_code == 0 and "/dev/zero" not in run.opened, run.stderr
    record("config", "found vlmlint.toml: a link to /dev/zero", "exit 0: not a regular file, never opened")
    config.unlink()
    (outside / "vlmlint.toml").write_text("allow-outside-root = true\n")
    config.symlink_to(outside / "vlmlint.toml")
    run = scan(dataset)
    refused(run, tmp_path, "out of its folder")
    assert run.touched(outside) == []
    record(
        "config", "found vlmlint.toml: a link to a file outside the repository", "exit 2: refused, not read"
    )
    config.unlink()
    os.mkfifo(tmp_path / "fifo")
    named = scan(dataset, "--config", str(tmp_path / "fifo"))
    record("config", "--config naming a FIFO", refused(named, tmp_path, "not a regular file"))
    named = scan(dataset, "--config", str(dataset / "images"))
    record("config", "--config naming a folder", refused(named, tmp_path, "Is a directory"))
    named = scan(dataset, "--config", str(tmp_path / "missing.toml"))
    record("config", "--config naming a missing file", refused(named, tmp_path, "missing.toml"))


# ---- the same checks for the flags ----

BAD_FLAGS = [
    (("--threshold", "near_limit_share=nan"), "must be a finite number"),
    (("--threshold", "near_limit_share=inf"), "must be a finite number"),
    (("--threshold", "max_text_chars=nan"), "must be a finite number"),
    (("--threshold", "near_limit_share=2"), "must be above 0"),
    (("--threshold", "tiny_image_side=-1"), "must be from 1"),
    (("--threshold", "nope=1"), "unknown threshold"),
    (("--threshold", "near_limit_share"), "takes NAME=NUMBER"),
    (("--pipeline-option", "cutoff_len=nan"), "must be a string, a whole or finite number"),
    (("--pipeline-option", "cutoff_len=inf"), "must be a string, a whole or finite number"),
    (("--select", "VML4"), "matches no rule"),
    (("--ignore", "VLM999"), "matches no rule"),
    (("--truncation-side", "middle"), "truncation-side must be one of"),
    (("--layout", "nope"), "layout must be one of"),
]


@pytest.mark.parametrize("flags,message", BAD_FLAGS, ids=[" ".join(flags) for flags, _ in BAD_FLAGS])
def test_flags_are_checked_alike(tree, tmp_path, flags, message, record):
    dataset, _ = tree
    run = scan(dataset, *flags)
    record("config", " ".join(flags), refused(run, tmp_path, message))


def test_stats_refuses_alike_and_a_switch_left_off_is_fine(tree, tmp_path, record):
    dataset, outside = tree
    pyproject(dataset, "allow-outside-root = true")
    run = run_guarded("stats", "data.jsonl", "-m", MODEL, "-q", cwd=dataset)
    line = refused(run, tmp_path, "allow-outside-root", "--allow-outside-root")
    assert run.touched(outside) == []
    record("config", "vlmlint stats with a found config: allow-outside-root = true", line)
    pyproject(
        dataset, "trust-remote-code = false\nallow-remote = false\nallow-outside-root = false\njobs = 1"
    )
    run = scan(dataset)
    assert run.exit_code == 0, run.stderr
    record(
        "config",
        "found config: the safety switches set to false, jobs = 1",
        "exit 0: taken (nothing relaxed)",
    )
