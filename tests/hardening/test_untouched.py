"""vlmlint never writes into the dataset, and the reports it writes appear whole or not at all."""

from __future__ import annotations

import hashlib
import os
import stat

import pytest
from typer.testing import CliRunner

import vlmlint.fileio as output
import vlmlint.report.json_report as json_report
from tests.conftest import DATASETS
from tests.hardening.conftest import MODEL, run_cli
from vlmlint.cli import app


def snapshot(root) -> dict[str, tuple]:
    """Every entry below root (symlinks not followed): kind, size, sha256, mode and mtime."""
    found = {}
    for directory, subdirs, files in os.walk(root):
        for name in subdirs + files:
            path = os.path.join(directory, name)
            info = os.lstat(path)
            digest = None
            if stat.S_ISREG(info.st_mode):
                with open(path, "rb") as handle:
                    digest = hashlib.sha256(handle.read()).hexdigest()
            found[os.path.relpath(path, root)] = (
                stat.S_IFMT(info.st_mode),
                info.st_size,
                digest,
                info.st_mode,
                info.st_mtime_ns,
            )
    directory = os.lstat(root)
    found["."] = (stat.S_IFDIR, None, None, directory.st_mode, directory.st_mtime_ns)
    return found


DATASET_FOLDERS = sorted(str(path) for path in DATASETS.iterdir() if path.is_dir())
SOME = [str(DATASETS / name) for name in ("demo", "broken", "hf_disk", "imagefolder", "parquet", "sidecar")]
runner = CliRunner()


def test_scans_in_every_mode_leave_the_fixtures_untouched(tmp_path, record):
    before = snapshot(DATASETS)
    # The CLI as users run it (worker processes), then the other modes in this process (faster).
    run = run_cli(
        "scan", *DATASET_FOLDERS, "-m", MODEL, "-q", "--report", str(tmp_path / "report.json"), timeout=120
    )
    assert run.exit_code == 1, run.stderr[-2000:]  # the fixtures hold findings
    assert snapshot(DATASETS) == before, "the default scan changed fixtures/datasets"
    modes = {
        "--exact --format json": ["scan", *SOME, "--exact", "--format", "json"],
        "--format jsonl --all-rows": [
            "scan",
            *DATASET_FOLDERS,
            "--format",
            "jsonl",
            "--all-rows",
            "--verify",
            "0",
        ],
        "--format html -o FILE (thumbnails read the images)": [
            "scan",
            *DATASET_FOLDERS,
            "--format",
            "html",
            "-o",
            str(tmp_path / "out.html"),
            "--verify",
            "0",
        ],
        "vlmlint stats --format json": ["stats", str(DATASETS / "demo"), "--format", "json"],
        "vlmlint stats of a save_to_disk dataset": ["stats", str(DATASETS / "hf_disk"), "--format", "json"],
    }
    for mode, args in modes.items():
        jobs = ["--jobs", "1"] if args[0] == "scan" else []
        result = runner.invoke(app, [*args, "-m", MODEL, "-q", *jobs])
        assert result.exit_code in (0, 1), (mode, result.output[-2000:])
        assert snapshot(DATASETS) == before, f"{mode} changed fixtures/datasets"
    assert sorted(os.listdir(tmp_path)) == ["out.html", "report.json"]
    record(
        "untouched",
        "scans of every fixture dataset: default (text, --verify 32, worker processes, "
        "--report FILE); " + "; ".join(modes),
        "every file and folder of fixtures/datasets identical after each (path, size, sha256, mode, mtime); "
        "no file added (no cache, no .vlmlint-* temporary); reports only where asked",
    )


def test_a_failing_report_write_leaves_no_partial_file(tmp_path, monkeypatch, record):
    target = tmp_path / "report.json"
    target.write_text("the previous report\n")
    real_fdopen = os.fdopen

    class DiskFull:
        def __init__(self, stream):
            self.stream = stream

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.stream.close()

        def write(self, data):
            self.stream.write(data[: len(data) // 2])
            raise OSError(28, "No space left on device")

        def writelines(self, chunks):
            for chunk in chunks:
                self.write(chunk)

    monkeypatch.setattr(output.os, "fdopen", lambda *a, **k: DiskFull(real_fdopen(*a, **k)))
    with pytest.raises(OSError):
        json_report.write_report_file(str(target), {"findings": [1, 2, 3]})
    assert target.read_text() == "the previous report\n"
    assert sorted(os.listdir(tmp_path)) == ["report.json"]
    record(
        "untouched",
        "the disk fills up while the JSON report (or a baseline) is written",
        "the previous file stays as it was; the temporary file beside it is removed",
    )


@pytest.fixture()
def small_dataset(tmp_path):
    from PIL import Image

    folder = tmp_path / "data"
    folder.mkdir()
    Image.new("RGB", (320, 240)).save(folder / "a.jpg")
    row = '{"image": "a.jpg", "conversations": [{"from": "human", "value": "<image>Hi"}, {"from": "gpt", "value": "Yo"}]}'
    (folder / "data.jsonl").write_text(row + "\n")
    return folder / "data.jsonl"


def test_report_into_a_missing_folder_or_onto_a_folder(tmp_path, small_dataset, record):
    base = ["scan", str(small_dataset), "-m", MODEL, "-q", "--verify", "0", "--jobs", "1"]
    for case, flags in {
        "--report into a folder that does not exist": ["--report", str(tmp_path / "missing" / "r.json")],
        "--report naming an existing folder": ["--report", str(tmp_path / "data")],
        "-o into a folder that does not exist": ["-o", str(tmp_path / "missing" / "r.txt")],
    }.items():
        result = runner.invoke(app, base + flags)
        assert result.exit_code == 2, result.output
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, lines
        assert sorted(os.listdir(tmp_path)) == ["data"] and sorted(os.listdir(tmp_path / "data")) == [
            "a.jpg",
            "data.jsonl",
        ]
        record("untouched", case, f"exit 2: {lines[0].replace(str(tmp_path), '<tmp>')}; no file left")


def test_a_failing_renderer_leaves_no_output_file(tmp_path, small_dataset, monkeypatch, record):
    import vlmlint.report.formats as formats

    def broken(name, report):
        raise RuntimeError("renderer bug")

    monkeypatch.setattr(formats, "render", broken)
    out = tmp_path / "out.sarif"
    result = runner.invoke(
        app,
        [
            "scan",
            str(small_dataset),
            "-m",
            MODEL,
            "-q",
            "--verify",
            "0",
            "--jobs",
            "1",
            "-f",
            "sarif",
            "-o",
            str(out),
        ],
    )
    assert result.exit_code == 2
    assert sorted(os.listdir(tmp_path)) == ["data"]
    line = [line for line in result.stderr.splitlines() if line.strip()][-1]
    record(
        "untouched",
        "-o FILE when the report renderer fails",
        f"exit 2: {line}; neither FILE nor a temporary file left",
    )
