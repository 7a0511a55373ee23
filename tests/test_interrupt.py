"""SIGINT and SIGTERM during a scan: a partial report marked incomplete, exit 130 and 143, no leftovers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import DATASETS, PROCESSORS

ROWS = 200_000  # long enough that the scan is still running when the signal comes (~30 s on 2 cores)


@pytest.fixture(scope="module")
def big_dataset(tmp_path_factory):
    folder = tmp_path_factory.mktemp("big")
    images = sorted((DATASETS / "llava" / "images").iterdir())
    with open(folder / "rows.jsonl", "w", encoding="utf-8") as out:
        for i in range(ROWS):
            row = {
                "id": f"row-{i}",
                "image": str(images[i % len(images)]),
                "conversations": [
                    {"from": "human", "value": "<image>\nWhat is in this picture?"},
                    {"from": "gpt", "value": "A test image " + "x" * (i % 50)},
                ],
            }
            out.write(json.dumps(row) + "\n")
    return folder


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize(
    ("signum", "code", "jobs", "group"),
    [
        (signal.SIGTERM, 143, "2", False),  # `kill PID`, CI cancelling a job
        (signal.SIGINT, 130, "2", True),  # Ctrl-C: the whole process group, workers included
        (signal.SIGINT, 130, "1", True),
    ],
)
def test_signal_leaves_a_partial_report(big_dataset, tmp_path, signum, code, jobs, group):
    out, report = tmp_path / "out.json", tmp_path / "report.json"
    command = [sys.executable, "-m", "vlmlint.cli", "scan", str(big_dataset / "rows.jsonl"),
               "--model", str(PROCESSORS / "qwen2-vl"), "--allow-outside-root", "--verify", "0",
               "--format", "json", "-o", str(out), "--report", str(report), "--jobs", jobs]  # fmt: skip
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        text=True,
        # A shell's background job starts with SIGINT ignored, and Python keeps an ignored SIGINT
        # ignored (as it should): give the scan a Ctrl-C to receive whatever launched pytest.
        preexec_fn=_default_sigint,
    )
    time.sleep(6)  # model loaded, rows flowing
    assert process.poll() is None, "the scan ended before the signal: make the dataset bigger"
    if group:
        os.killpg(process.pid, signum)
    else:
        process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == code, stderr
    assert "partial report" in stderr
    for path in (out, report):
        data = json.loads(path.read_text())
        rows = data["incomplete"]["rows_scanned"]
        assert 0 < rows < ROWS and data["summary"]["samples"] == rows
        assert data["incomplete"]["reason"] == f"interrupted by {signal.Signals(signum).name}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "report.json"]  # no temp files
    # No worker process outlives the scan.
    try:
        os.killpg(process.pid, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    assert not alive
