"""--resume: an interrupted scan continues from its checkpoint and ends with the report a full scan gives."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import DATASETS, PROCESSORS
from tests.test_interrupt import ROWS, big_dataset  # noqa: F401 (the 200,000-row fixture)

MODEL = str(PROCESSORS / "qwen2-vl")


def _command(dataset, out, *extra):
    return [sys.executable, "-m", "vlmlint.cli", "scan", str(dataset), "--model", MODEL,
            "--allow-outside-root", "--verify", "0", "--format", "json", "-o", str(out), *extra]  # fmt: skip


@pytest.mark.parametrize("jobs", ["2"])  # the parent skips rows and feeds the workers
def test_interrupted_then_resumed_equals_one_full_scan(big_dataset, tmp_path, jobs):  # noqa: F811
    rows = big_dataset / "rows.jsonl"
    checkpoint = tmp_path / "scan.ckpt"
    first = subprocess.Popen(
        _command(rows, tmp_path / "partial.json", "--resume", str(checkpoint), "--jobs", jobs),
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )

    def saved_rows() -> int:
        try:
            return json.loads(checkpoint.read_text())["position"]["rows"]
        except (OSError, ValueError):
            return 0

    deadline = time.monotonic() + 120
    while saved_rows() < 5_000 and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)  # signal once a checkpoint holds thousands of rows (saved every 5 s)
    assert first.poll() is None, "the scan ended before the signal: make the dataset bigger"
    first.send_signal(signal.SIGTERM)
    _, stderr = first.communicate(timeout=60)
    assert first.returncode == 143, stderr
    state = json.loads(checkpoint.read_text())
    done = state["position"]["rows"]
    # Partial: the first save (after 5 s) already holds about 60k rows on an idle 2-core machine.
    assert 0 < done < ROWS

    second = subprocess.run(
        _command(rows, tmp_path / "resumed.json", "--resume", str(checkpoint), "--jobs", jobs),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert second.returncode in (0, 1), second.stderr
    assert f"resumed from {checkpoint}: {done} row(s)" in second.stderr
    assert not checkpoint.exists() and not (tmp_path / "scan.ckpt.findings").exists()  # completed

    full = subprocess.run(
        _command(rows, tmp_path / "full.json", "--jobs", jobs), capture_output=True, timeout=600
    )
    assert full.returncode == second.returncode
    resumed = json.loads((tmp_path / "resumed.json").read_text())
    expected = json.loads((tmp_path / "full.json").read_text())
    assert resumed == expected


def test_a_checkpoint_of_another_scan_is_ignored(tmp_path):
    from typer.testing import CliRunner

    from vlmlint.cli import app

    checkpoint = tmp_path / "c.ckpt"
    checkpoint.write_text(json.dumps({"format": 1, "key": "another scan", "position": {}}))
    runner = CliRunner()
    base = ["scan", str(DATASETS / "catalogue"), "--model", MODEL, "-q", "--verify", "0", "-f", "json"]
    resumed = runner.invoke(app, [*base, "--resume", str(checkpoint)])
    plain = runner.invoke(app, base)
    assert resumed.exit_code == plain.exit_code == 1
    assert json.loads(resumed.stdout) == json.loads(plain.stdout)
    assert not checkpoint.exists()  # the scan completed: no checkpoint left


def test_a_broken_checkpoint_is_one_line_and_exit_2(tmp_path):
    from typer.testing import CliRunner

    from vlmlint.cli import app

    checkpoint = tmp_path / "c.ckpt"
    checkpoint.write_text("{not json")
    result = CliRunner().invoke(
        app, ["scan", str(DATASETS / "catalogue"), "--model", MODEL, "-q", "--resume", str(checkpoint)]
    )
    assert result.exit_code == 2 and "not a vlmlint checkpoint" in result.output
