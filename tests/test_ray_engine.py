"""`vlmlint scan --engine ray`: the Ray Data job gives the local scan's report and exit code.

One local Ray instance serves the module's tests (starting Ray costs seconds): 3 logical CPUs, two
checking actors and the read tasks, on however many cores the machine has.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys

import orjson
import pytest
from typer.testing import CliRunner

from tests.conftest import DATASETS, PROCESSORS
from tests.test_webdataset import _demo_rows, make_shards
from vlmlint.cli import app
from vlmlint.config import ScanConfig, build_config
from vlmlint.engine import Scanner
from vlmlint.ray_engine import _Relabel, dataset_parts
from vlmlint.report import row_record

MODEL = str(PROCESSORS / "qwen2-vl-small")
needs_ray = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None, reason="Ray is not installed (pip install 'vlmlint[ray]')"
)


@pytest.fixture(scope="module")
def ray_session():
    import logging

    import ray

    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """One folder with a JSONL (every rule's case, many times), parquet files and webdataset shards."""
    folder = tmp_path_factory.mktemp("ray-data")
    shutil.copytree(DATASETS / "catalogue" / "images", folder / "images")
    lines = (DATASETS / "catalogue" / "chat.jsonl").read_text(encoding="utf-8").splitlines()
    with open(folder / "rows.jsonl", "w", encoding="utf-8") as out:
        for copy in range(8):
            for line in lines:  # every other copy keeps its ids: duplicate ids across batches
                out.write((line if copy % 2 == 0 else line.replace('"cat-', f'"c{copy}-')) + "\n")

    import pyarrow as pa
    import pyarrow.parquet as pq

    demo = DATASETS / "demo"
    (folder / "parquet").mkdir()
    rows = []
    for number, row in enumerate(_demo_rows()):
        images = row["image"] if isinstance(row["image"], list) else [row["image"]]
        structs = [
            {"bytes": (demo / image).read_bytes(), "path": image}
            if (demo / image).is_file()
            else {"bytes": None, "path": image}  # a missing file: a path, resolved beside the parquet
            for image in images
        ]
        turns = [
            {"role": "user" if turn["from"] == "human" else "assistant", "content": turn["value"]}
            for turn in row["conversations"]
        ]
        rows.append({"id": row["id"] if number % 7 else "same-id", "images": structs, "messages": turns})
    for part in range(2):
        table = pa.Table.from_pylist(rows[part::2])
        pq.write_table(table, folder / "parquet" / f"train-{part:05d}.parquet", row_group_size=7)
    (folder / "shards").mkdir()
    shutil.copytree(demo / "images", folder / "shards" / "images")
    make_shards(folder / "shards", _demo_rows(), shards=4, gzip_shard=2)
    return folder


def _outcomes(scanner, dataset):
    return [(row_record(o), [f.to_dict() for f in o.findings]) for o in scanner.scan(dataset)]


@needs_ray
def test_ray_outcomes_equal_local(ray_session, data, monkeypatch):
    from vlmlint.ray_engine import RayScanner

    monkeypatch.chdir(data)  # sources relative to the working folder, as reports name them
    config = build_config(
        "rows.jsonl",
        {"per_source_ignores": {"shards/part-001.tar": ["VLM2"]}},
        {"model": MODEL, "jobs": 1},
        config_root=data,
    )
    config = ScanConfig(**{**config.__dict__, "batch_size": 24})  # many batches, both actors busy
    local = Scanner(config)
    with RayScanner(local) as distributed:
        for dataset in ("rows.jsonl", "parquet", "shards"):  # a file, parquet files, tar shards
            expected = _outcomes(local, dataset)
            got = _outcomes(distributed, dataset)
            assert len(got) == len(expected) > 30, dataset
            assert got == expected, dataset
            codes = {f["code"] for _, findings in got for f in findings}
            assert codes, dataset
            if dataset == "rows.jsonl":
                assert {"VLM107", "VLM101", "VLM103"} <= codes
        # --resume: the rows counted before are skipped, yet duplicate ids still see them.
        skipped = [
            (row_record(o), [f.to_dict() for f in o.findings]) for o in distributed.scan("rows.jsonl", 50)
        ]
        assert skipped == _outcomes(local, "rows.jsonl")[50:]
        assert any(f["code"] == "VLM107" for _, findings in skipped for f in findings)
    assert ray_session.is_initialized()  # the caller's Ray session is left running


@needs_ray
@pytest.mark.parametrize("dataset", ["rows.jsonl", "parquet", "shards/part-{000..003}.tar*"])
def test_cli_report_and_exit_code_equal_local(ray_session, data, monkeypatch, dataset):
    monkeypatch.chdir(data)
    runner = CliRunner()
    base = ["scan", dataset, "--model", MODEL, "-q", "--verify", "4", "--format", "json", "-j", "2"]
    local = runner.invoke(app, base)
    distributed = runner.invoke(app, [*base, "--engine", "ray"])
    assert local.exit_code == distributed.exit_code == 1, distributed.output
    a, b = orjson.loads(local.stdout), orjson.loads(distributed.stdout)
    assert a == b
    assert a["summary"]["samples"] > 30 and a["findings"]
    assert a["summary"]["verify"]["rows"] == 4


@needs_ray
def test_an_unreadable_file_fails_as_in_a_local_scan(ray_session, data, tmp_path):
    folder = tmp_path / "tables"
    folder.mkdir()
    good = data / "parquet" / "train-00000.parquet"
    shutil.copy(good, folder / "a.parquet")
    (folder / "b.parquet").write_bytes(good.read_bytes()[:3000])  # cut: no footer
    runner = CliRunner()
    base = ["scan", str(folder), "--model", MODEL, "-q", "--verify", "0", "-f", "json", "-j", "2"]
    local, distributed = runner.invoke(app, base), runner.invoke(app, [*base, "--engine", "ray"])
    assert local.exit_code == distributed.exit_code == 2
    line = next(text for text in local.stderr.splitlines() if text.startswith("vlmlint:"))
    assert "b.parquet: not a readable parquet file" in line
    assert [text for text in distributed.stderr.splitlines() if text.startswith("vlmlint:")] == [line]


@needs_ray
def test_a_ray_started_by_vlmlint_is_shut_down(tmp_path):
    """No --ray-address: vlmlint starts a local instance and nothing of it outlives the command."""
    import subprocess
    import tempfile
    import time

    ray_dir = tempfile.mkdtemp(prefix="vr", dir="/tmp")  # short: Ray's socket paths live below it
    try:
        environment = {**os.environ, "RAY_TMPDIR": ray_dir}
        environment.pop("RAY_ADDRESS", None)
        command = [sys.executable, "-m", "vlmlint.cli", "scan", str(DATASETS / "demo"), "--model", MODEL]
        command += ["--engine", "ray", "-j", "1", "-q", "--verify", "0", "-f", "json"]
        done = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=300)
        assert done.returncode == 1, done.stderr[-2000:]
        assert orjson.loads(done.stdout)["summary"]["samples"] == 40
        for _ in range(40):  # Ray's processes may take a moment to go
            listing = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
            if ray_dir not in listing:
                break
            time.sleep(0.5)
        assert ray_dir not in listing
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)


def test_dataset_parts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    for name in ("b.jsonl", "a.parquet"):
        (tmp_path / "d" / name).write_text("")
    assert dataset_parts("d") == [os.path.join("d", "a.parquet"), os.path.join("d", "b.jsonl")]
    assert dataset_parts("d/b.jsonl") == ["d/b.jsonl"]
    assert dataset_parts("org/name") == ["org/name"]  # a hub id is read whole
    (tmp_path / "s").mkdir()
    for number in range(3):
        (tmp_path / "s" / f"x-{number}.tar").write_bytes(b"")
    assert dataset_parts("s/x-{0..3}.tar") == [f"s/x-{n}.tar" for n in range(4)]  # x-3: a missing shard row
    os.symlink(tmp_path / "s" / "x-0.tar", tmp_path / "d" / "c.tar")  # no effect: d has manifests
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_text("")
    os.symlink(outside, tmp_path / "d" / "z.jsonl")
    assert dataset_parts("d") == ["d"]  # a file linked from outside: read whole, the readers decide


def test_relabel_names_paths_as_the_driver_does(tmp_path):
    cwd = str(tmp_path / "work")
    inside = _Relabel(opened=f"{cwd}/data", given="data", cwd=cwd)
    assert inside(f"{cwd}/data") == "data" and inside(f"{cwd}/data/x.jsonl") == "data/x.jsonl"
    outside = _Relabel(opened=str(tmp_path / "other"), given="../other/", cwd=cwd)
    assert outside(str(tmp_path / "other" / "x.jsonl")) == "../other/x.jsonl"
    absolute = _Relabel(opened=f"{cwd}/data", given=f"{cwd}/data", cwd=cwd)
    assert absolute(f"{cwd}/data/x.jsonl") == "data/x.jsonl"


def test_without_ray_the_cli_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"image": "a.jpg", "text": "x"}) + "\n")
    result = CliRunner().invoke(app, ["scan", str(path), "--model", MODEL, "-q", "--engine", "ray"])
    assert result.exit_code == 2
    assert "pip install 'vlmlint[ray]'" in result.output
