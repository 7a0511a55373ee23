"""bench/bench_scale.py's plumbing on tiny sizes (not a timed test): data, one real scan, the six targets."""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import bench_scale  # noqa: E402


@pytest.fixture
def small_pool(monkeypatch):
    """Pool sizes kept small so that generating the files takes milliseconds."""
    rng = random.Random(3)
    monkeypatch.setattr(bench_scale, "_size", lambda _: (rng.randint(16, 300), rng.randint(16, 300)))


def test_data_is_built_once_and_own_files_are_links(tmp_path, small_pool):
    pool = bench_scale.build_pool(tmp_path, 6)
    assert len(pool) == 6 and all((tmp_path / name).exists() for name, _, _ in pool)
    assert bench_scale.build_pool(tmp_path, 6) == pool  # cached: read back, not drawn again
    shared = bench_scale.build_jsonl(tmp_path, 40, pool)
    own = bench_scale.build_jsonl(tmp_path, 40, pool, own_files=True)
    rows = [json.loads(line) for line in own.read_text().splitlines()]
    names = [
        name for row in rows for name in (row["image"] if isinstance(row["image"], list) else [row["image"]])
    ]
    assert len(rows) == 40 and len(set(names)) == len(names)  # every row its own files
    pool_inodes = {os.stat(tmp_path / name).st_ino for name, _, _ in pool}
    assert {os.stat(tmp_path / name).st_ino for name in names} <= pool_inodes  # hard links onto the pool
    assert len(shared.read_text().splitlines()) == 40


def test_one_real_scan_is_timed_and_measured(tmp_path, small_pool):
    pool = bench_scale.build_pool(tmp_path, 4)
    manifest = bench_scale.build_jsonl(tmp_path, 20, pool)
    run = bench_scale.run_scan(manifest, "qwen2-vl", tmp_path / "r.json", ["--verify", "2"])
    assert run["rows"] == 20 and run["wall"] > 0 and run["rss"] > 0 and run["pss"] > 0
    assert run["summary"]["verify"]["rows"] >= 1


def test_every_target_is_printed_with_its_verdict(tmp_path, small_pool, monkeypatch, capsys):
    calls = []

    def scan(dataset, model, out, extra):
        calls.append((Path(dataset).name, extra))
        verify = {"rows": 0 if extra == ["--verify", "0"] else 3, "disagreements": 0}
        return {
            "wall": 2.0,
            "rss": 300 * 2**20,
            "pss": 200 * 2**20,
            "rows": 30,
            "summary": {"verify": verify},
        }

    monkeypatch.setattr(bench_scale, "run_scan", scan)
    monkeypatch.setattr(bench_scale, "naive_rows", lambda *args: (0.5, []))
    monkeypatch.setattr(bench_scale, "drop_caches", lambda: "not root")
    argv = ["--rows", "30", "--big-rows", "60", "--small-rows", "5", "--pool", "4", "--data", str(tmp_path)]
    assert bench_scale.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    targets = [line for line in lines if line.endswith(("PASS", "FAIL", "SKIPPED"))]
    assert [line[:2] for line in targets] == [f"{n} " for n in range(1, 7)]
    assert targets[5].endswith("skipped: not root  SKIPPED")
    assert "wall +0.0%" in targets[0] and targets[0].endswith("PASS")  # same wall and memory both sides
    assert targets[2].endswith("FAIL")  # 15 rows/s
    own = [name for name, _ in calls if "-own-" in name]
    assert len(own) == 1 and ("llava-30-4.jsonl", ["--verify", "0"]) in calls


def test_quick_mode_sizes():
    args = bench_scale._arguments(["--quick"])
    assert (args.rows, args.big_rows, args.pool, args.naive_rows) == (10_000, 20_000, 300, 50)
