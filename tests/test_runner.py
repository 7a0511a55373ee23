"""--jobs: worker processes give the same outcomes, in the same order, as one process."""

from __future__ import annotations

import shutil

import orjson
import pytest
from typer.testing import CliRunner

from tests.conftest import DATASETS, PROCESSORS
from vlmlint.cli import app
from vlmlint.config import ConfigError, ScanConfig, build_config
from vlmlint.engine import Scanner
from vlmlint.report import row_record
from vlmlint.runner import is_stateful

MODEL = str(PROCESSORS / "qwen2-vl")


def _dataset(tmp_path, copies: int = 12):
    """The catalogue's rows (every rule's case, broken lines included) many times over, ids repeating."""
    folder = tmp_path / "data"
    shutil.copytree(DATASETS / "catalogue" / "images", folder / "images")
    lines = (DATASETS / "catalogue" / "chat.jsonl").read_text(encoding="utf-8").splitlines()
    with open(folder / "rows.jsonl", "w", encoding="utf-8") as out:
        for copy in range(copies):
            for line in lines:
                # Every third copy keeps its ids: duplicate ids across chunks (a rule that compares rows).
                out.write((line if copy % 3 == 0 else line.replace('"cat-', f'"c{copy}-')) + "\n")
    return folder / "rows.jsonl"


def _outcomes(path, jobs: int, batch_size: int = 16):
    config = build_config(str(path), {}, {"model": MODEL, "jobs": jobs})
    scanner = Scanner(ScanConfig(**{**config.__dict__, "batch_size": batch_size}))
    return [(row_record(o), [f.to_dict() for f in o.findings]) for o in scanner.scan()]


def test_two_workers_equal_one_process(tmp_path):
    path = _dataset(tmp_path)
    one, two = _outcomes(path, 1), _outcomes(path, 2)
    assert len(one) == len(two) > 4 * 16  # several chunks went through the pool
    assert one == two
    codes = {f["code"] for _, findings in one for f in findings}
    assert "VLM107" in codes and "VLM101" in codes and "VLM103" in codes


def test_small_inputs_stay_in_this_process(tmp_path, monkeypatch):
    import vlmlint.runner as runner

    monkeypatch.setattr(runner, "ProcessPoolExecutor", None)  # a pool would fail loudly
    assert _outcomes(DATASETS / "llava" / "data.jsonl", 2, batch_size=256)


def test_only_duplicate_ids_compare_rows():
    from vlmlint.rules import ALL_RULES

    assert [rule.code for rule in ALL_RULES if is_stateful(rule())] == ["VLM107"]


def test_cli_jobs_flag_and_config(tmp_path):
    path = _dataset(tmp_path, copies=30)
    runner = CliRunner()
    base = ["scan", str(path), "--model", MODEL, "--verify", "0", "-q", "--format", "jsonl", "--all-rows"]
    one = runner.invoke(app, [*base, "--jobs", "1"])
    two = runner.invoke(app, [*base, "-j", "2"])
    every = runner.invoke(app, base)  # default: every core
    assert one.exit_code == two.exit_code == every.exit_code == 1
    assert one.stdout == two.stdout == every.stdout
    assert len(one.stdout.splitlines()) == 30 * len(
        (DATASETS / "catalogue" / "chat.jsonl").read_text().splitlines()
    )
    report = orjson.loads(runner.invoke(app, [*base[:-3], "--format", "json", "-j", "2"]).stdout)
    assert report["summary"]["samples"] == len(one.stdout.splitlines())
    bad = runner.invoke(app, [*base, "--jobs", "-1"])
    assert bad.exit_code == 2


def test_jobs_in_config_file(tmp_path):
    assert build_config("x", {"jobs": 3}, {}).jobs == 3
    assert build_config("x", {"jobs": 0}, {}).jobs == 0  # the engine picks for the model and cores
    assert build_config("x", {"jobs": 3}, {"jobs": 1}).jobs == 1
    for bad in (-1, "2", True, 1.5):
        with pytest.raises(ConfigError):
            build_config("x", {"jobs": bad}, {})


def test_default_jobs_is_one_process_per_two_cores(monkeypatch):
    import os

    from vlmlint.runner import default_jobs

    for cores, expected in ((1, 1), (2, 1), (3, 1), (8, 4), (64, 32)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, n=cores: set(range(n)))
        assert default_jobs() == expected
        assert default_jobs(cheap_tokenizer=True) == cores


def _scanned(path, jobs: int, batch_size: int = 16, **settings):
    config = build_config(str(path), {}, {"model": MODEL, "jobs": jobs, **settings})
    return list(Scanner(ScanConfig(**{**config.__dict__, "batch_size": batch_size})).scan())


def test_workers_send_headlines_that_reload_to_the_whole_row(tmp_path):
    """Rows without findings come back from a worker with a headline Sample; reload gives the row."""
    path = _dataset(tmp_path)
    one, two = _scanned(path, 1), _scanned(path, 2)
    assert len(one) == len(two)
    headlines = [o for o in two if o.reload is not None]
    assert headlines, "some clean rows came back from the worker"
    for a, b in zip(one, two, strict=True):
        assert b.complete().result == a.result  # samples included: messages, images, problems
        assert b.result.sample.location == a.result.sample.location
        assert b.result.sample.fingerprint == a.result.sample.fingerprint
        assert b.result.sample.id == a.result.sample.id and b.result.sample.layout == a.result.sample.layout
        if b.findings:  # flagged rows (reports, thumbnails) are always whole
            assert b.reload is None and b.result.sample == a.result.sample
    for outcome in headlines:
        assert not outcome.result.sample.messages and outcome.complete().result.sample.messages


def test_verify_and_resume_skip_are_the_same_with_workers(tmp_path):
    from vlmlint.verify import Verifier

    path = _dataset(tmp_path, copies=20)
    picked = []
    for jobs in (1, 2):
        verifier = Verifier(7)
        scanner = Scanner(
            ScanConfig(
                **{**build_config(str(path), {}, {"model": MODEL, "jobs": jobs}).__dict__, "batch_size": 16}
            )
        )
        for outcome in scanner.scan():
            verifier.offer(outcome)
        assert all(o.result.sample.messages or o.result.sample.problems for o in verifier.chosen)
        picked.append([(o.result, o.findings) for o in verifier.chosen])
        checked, disagreements = verifier.run(scanner)
        assert checked == 7 and not disagreements
    assert picked[0] == picked[1]
    # --resume: skipping into the middle of a batch of lines scans the same rows after it
    whole = [row_record(o) for o in _scanned(path, 2)]
    for skip in (1, 16, 37):
        config = build_config(str(path), {}, {"model": MODEL, "jobs": 2})
        scanner = Scanner(ScanConfig(**{**config.__dict__, "batch_size": 16}))
        assert [row_record(o) for o in scanner.scan(skip=skip)] == whole[skip:]


def _embedded_rows(tmp_path, rows: int = 80):
    """Rows with a finding (two <image>, one image) that each embed one data: URI PNG."""
    import base64
    import io
    import json

    from PIL import Image

    picture = io.BytesIO()
    Image.new("RGB", (64, 64), "blue").save(picture, format="PNG")
    uri = "data:image/png;base64," + base64.b64encode(picture.getvalue()).decode("ascii")
    path = tmp_path / "embedded.jsonl"
    row = {"messages": [{"role": "user", "content": "<image><image>hi"}], "images": [uri]}
    path.write_text("".join(json.dumps({**row, "id": str(i)}) + "\n" for i in range(rows)), encoding="utf-8")
    return path, len(picture.getvalue())


def test_flagged_rows_keep_embedded_bytes_up_to_the_budget_whatever_the_jobs(tmp_path, monkeypatch):
    import vlmlint.engine as engine

    path, size = _embedded_rows(tmp_path)
    monkeypatch.setattr(engine, "KEEP_EMBEDDED_BYTES", 10 * size)  # the first 10 flagged rows keep theirs
    kept = {}
    for jobs in (1, 2):
        outcomes = list(_scanned(path, jobs))
        assert len(outcomes) == 80 and all(o.findings for o in outcomes)
        images = [o.result.sample.images[0] for o in outcomes]
        kept[jobs] = [ref.data is not None for ref in images]
        assert all(ref.dropped == (ref.data is None) for ref in images)
    assert kept[1] == kept[2] == [True] * 10 + [False] * 70


def test_verify_skips_rows_whose_embedded_bytes_were_dropped(tmp_path, monkeypatch):
    import base64
    import io
    import json

    from PIL import Image

    import vlmlint.engine as engine
    from vlmlint.verify import Verifier

    monkeypatch.setattr(engine, "KEEP_EMBEDDED_BYTES", 0)
    picture = io.BytesIO()
    Image.new("RGB", (32, 32), "blue").save(picture, format="PNG")  # tiny: VLM204, a counted row
    uri = "data:image/png;base64," + base64.b64encode(picture.getvalue()).decode("ascii")
    row = {"messages": [{"role": "user", "content": "<image>hi"}, {"role": "assistant", "content": "ok"}]}
    path = tmp_path / "tiny.jsonl"
    path.write_text("".join(json.dumps({**row, "images": [uri]}) + "\n" for _ in range(4)), encoding="utf-8")
    config = build_config(str(path), {}, {"model": MODEL, "jobs": 1})
    scanner = Scanner(config)
    verifier = Verifier(8)
    for outcome in scanner.scan():
        assert outcome.findings and outcome.result.seq_len is not None
        assert outcome.result.sample.images[0].dropped
        verifier.offer(outcome)
    assert verifier.run(scanner)[1] == []  # no false disagreement from the missing bytes
