"""--verify: a fixed-seed sample of rows is recounted with the real image processor."""

from __future__ import annotations

from dataclasses import replace

import orjson
from typer.testing import CliRunner

from tests.conftest import DATASETS, PROCESSORS
from vlmlint.cli import app
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.verify import Verifier

MODEL = str(PROCESSORS / "qwen2-vl")


def _verify(scanner: Scanner, size: int):
    verifier = Verifier(size)
    for outcome in scanner.scan():
        verifier.offer(outcome)
    return verifier.run(scanner)


def test_verify_agrees_on_every_fixture_row():
    scanner = Scanner(ScanConfig(dataset=str(DATASETS / "llava"), model=MODEL))
    checked, disagreements = _verify(scanner, 1000)
    assert checked > 40 and disagreements == []


def test_a_wrong_formula_is_caught():
    scanner = Scanner(ScanConfig(dataset=str(DATASETS / "llava"), model=MODEL))
    right = scanner._count
    scanner._count = lambda h, w, n: replace(right(h, w, n), tokens=right(h, w, n).tokens + 1)
    checked, disagreements = _verify(scanner, 8)
    assert checked == 8 and len(disagreements) == 8
    assert {finding.code for _, finding in disagreements} == {"VLM901"}


def test_the_sample_is_the_same_every_run():
    def chosen():
        verifier = Verifier(5)
        for outcome in Scanner(ScanConfig(dataset=str(DATASETS / "llava"), model=MODEL)).scan():
            verifier.offer(outcome)
        return [o.result.sample.index for o in verifier.chosen]

    assert chosen() == chosen()


def test_cli_reports_the_verification():
    result = CliRunner().invoke(app, ["scan", str(DATASETS / "llava"), "--model", MODEL, "--format", "json"])
    assert result.exit_code == 0
    assert orjson.loads(result.stdout)["summary"]["verify"] == {"rows": 32, "disagreements": 0}
