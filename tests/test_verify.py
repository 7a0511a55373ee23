"""--verify: a fixed-seed sample of rows is recounted with the real image processor."""

from __future__ import annotations

from dataclasses import replace

import orjson
import pytest
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
    """32 rows when the time allows; the two rows above the pixel budget (1.5 MP) are said, never decoded."""
    args = ["scan", str(DATASETS / "llava"), "--model", MODEL, "--format", "json"]
    result = CliRunner().invoke(app, [*args, "--verify-budget", "600"])
    assert result.exit_code == 0
    verify = orjson.loads(result.stdout)["summary"]["verify"]
    assert (verify["rows"], verify["disagreements"], verify["left_by_time_budget"]) == (32, 0, 0)
    assert verify["strata"]["<=6MP"] == {"rows": 2, "checked": 0, "above_pixel_budget": 2}
    default = orjson.loads(CliRunner().invoke(app, args).stdout)["summary"]["verify"]  # the time budget
    assert 1 <= default["rows"] <= 32 and default["rows"] + default["left_by_time_budget"] == 32


def test_rechecked_video_rows_are_said_not_to_prove_their_videos():
    """The recheck reruns a row's images and text through the real classes; its videos are counted by the
    same formula both times, so the summary says how many rechecked rows hold videos (issue 20)."""
    dataset = DATASETS / "media" / "mllm_video_demo.json"
    args = ["scan", str(dataset), "--model", "qwen2.5-vl", "--verify-budget", "600"]
    report = orjson.loads(CliRunner().invoke(app, [*args, "--format", "json"]).stdout)
    verify = report["summary"]["verify"]
    assert report["summary"]["videos_counted"]["videos"] == 3
    assert (verify["rows"], verify["video_rows_formula_only"]) == (3, 3)
    text = CliRunner().invoke(app, args).stdout
    assert "3 of them hold videos, whose tokens were not rechecked" in " ".join(text.split())
    images_only = orjson.loads(
        CliRunner()
        .invoke(app, ["scan", str(DATASETS / "llava"), "--model", MODEL, "--format", "json"])
        .stdout
    )
    assert "video_rows_formula_only" not in images_only["summary"]["verify"]


VERIFY_MODELS = [
    "qwen2-vl",
    "llava-v1.6-mistral-7b",
    "idefics3-8b-llama3",
    "gemma-3-4b-it-panscan",
    "pixtral-12b",
]


@pytest.mark.parametrize("model", VERIFY_MODELS)
@pytest.mark.parametrize("dataset", sorted(p.name for p in DATASETS.iterdir() if not p.name.startswith("_")))
def test_verify_32_finds_no_disagreement_on_any_fixture(dataset, model):
    scanner = Scanner(ScanConfig(dataset=str(DATASETS / dataset), model=str(PROCESSORS / model)))
    checked, disagreements = _verify(scanner, 32)
    assert [finding.message for _, finding in disagreements] == []


def test_an_image_above_the_pixel_limit_is_not_a_disagreement(tmp_path):
    """The header path counts it, the exact path never decodes it: VLM202 reports it, not VLM901."""
    from PIL import Image

    Image.new("RGB", (640, 480)).save(tmp_path / "a.jpg")
    row = {"id": "1", "image": "a.jpg", "conversations": [{"from": "human", "value": "<image>\nHi"}]}
    (tmp_path / "data.jsonl").write_bytes(orjson.dumps(row) + b"\n")
    config = ScanConfig(dataset=str(tmp_path / "data.jsonl"), model=MODEL)
    config = replace(config, thresholds={**config.thresholds, "bomb_pixels": 100_000})
    scanner = Scanner(config)
    checked, disagreements = _verify(scanner, 4)
    assert checked == 1 and disagreements == []


def _one_folder_per_family() -> dict[str, str]:
    """The first fixture processor folder (by name) that each registry family loads."""
    from vlmlint.models import ModelError, load_model
    from vlmlint.models.registry import FAMILIES

    names = {family.name for family in FAMILIES}
    folders: dict[str, str] = {}
    for folder in sorted(p for p in PROCESSORS.iterdir() if p.is_dir()):
        try:
            family = load_model(str(folder)).family.name
        except ModelError:
            continue
        if family in names:
            folders.setdefault(family, folder.name)
    return folders


FAMILY_FOLDERS = _one_folder_per_family()


def verify_on_demo(folder: str) -> dict:
    """`vlmlint scan demo --verify 8 --format json`'s verify summary for one fixture folder."""
    args = ["scan", str(DATASETS / "demo"), "--model", str(PROCESSORS / folder), "--verify", "8"]
    result = CliRunner().invoke(app, [*args, "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    return orjson.loads(result.stdout)["summary"]["verify"]


def test_every_family_has_a_fixture_folder():
    from vlmlint.models.registry import FAMILIES

    missing = {f.name for f in FAMILIES} - set(FAMILY_FOLDERS) - {"vision-encoder"}
    assert not missing, f"families without a fixture folder for --verify: {sorted(missing)}"


@pytest.mark.parametrize("family", sorted(FAMILY_FOLDERS))
def test_verify_works_for_every_family(family):
    """Every family rechecks with its real image processor and agrees; where that processor needs torchvision
    and it is missing, the summary says so (`not_run`) instead of disagreeing (tests/reference reruns these)."""
    from vlmlint.models import load_model

    model = load_model(str(PROCESSORS / FAMILY_FOLDERS[family]))
    verify = verify_on_demo(FAMILY_FOLDERS[family])
    if model.exact_unavailable:
        assert verify == {"rows": 0, "disagreements": 0, "not_run": model.exact_unavailable}
        assert "torchvision" in verify["not_run"]
    else:
        assert verify["disagreements"] == 0 and verify["rows"] > 0, verify


def test_exact_refuses_at_once_where_it_cannot_run():
    from vlmlint.models import load_model

    torchvision_only = [
        f for f, folder in FAMILY_FOLDERS.items() if load_model(str(PROCESSORS / folder)).exact_unavailable
    ]
    if not torchvision_only:
        pytest.skip("torchvision is installed: every family's exact path runs")
    folder = PROCESSORS / FAMILY_FOLDERS[torchvision_only[0]]
    result = CliRunner().invoke(app, ["scan", str(DATASETS / "demo"), "--model", str(folder), "--exact"])
    assert result.exit_code == 2 and "--exact cannot run" in result.output and "torchvision" in result.output
