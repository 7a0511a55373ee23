"""--verify under budgets (issue 23, target 1): rows by size stratum, a pixel budget, a time budget."""

from __future__ import annotations

import json
from dataclasses import replace

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from typer.testing import CliRunner

from tests.conftest import PROCESSORS
from vlmlint.cli import app
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.verify import STRATA, Verifier, stratum

MODEL = str(PROCESSORS / "qwen2-vl")
# One row per size: (width, height) of its image; None: a text-only row.
SIZES = [
    None,
    (64, 64),
    (200, 300),
    (640, 480),
    (900, 900),
    (1000, 1400),
    (2000, 1000),
    (6000, 1000),
    (4000, 3000),
]


def _dataset(tmp_path, sizes=SIZES, copies=2):
    rows = []
    for i, size in enumerate(sizes * copies):
        row = {
            "id": str(i),
            "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "ok"}],
        }
        if size is not None:
            name = f"{size[0]}x{size[1]}.png"
            if not (tmp_path / name).exists():
                Image.new("RGB", size, "red").save(tmp_path / name)  # flat PNG: small files
            row["image"] = name
            row["conversations"][0]["value"] = "<image>\nHi"
        rows.append(json.dumps(row))
    (tmp_path / "data.jsonl").write_text("\n".join(rows) + "\n")
    return tmp_path / "data.jsonl"


def _offered(path, verifier, scanner=None):
    scanner = scanner or Scanner(ScanConfig(dataset=str(path), model=MODEL, jobs=1))
    for outcome in scanner.scan():
        verifier.offer(outcome)
    return scanner


def _pixels(outcome):
    return sum(info.width * info.height for info in outcome.result.images)


class FakeClock:
    """Each reading advances `step` seconds: a row costs two readings."""

    def __init__(self, step: float):
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_strata_bounds():
    assert stratum(0) == 0 and STRATA[0][0] == "text"
    assert [STRATA[stratum(p)][0] for p in (1, 100_000, 100_001, 1_500_000, 6_000_000, 6_000_001)] == [
        "<=0.1MP",
        "<=0.1MP",
        "<=0.5MP",
        "<=1.5MP",
        "<=6MP",
        ">6MP",
    ]


def test_every_stratum_is_taken_in_turn_smallest_first_text_last(tmp_path):
    verifier = Verifier(7)
    _offered(_dataset(tmp_path), verifier)
    chosen = verifier.chosen
    strata = [stratum(_pixels(o)) for o in chosen]
    # 7 rows from 6 strata with rows: one from each image stratum, then the second smallest again
    assert strata == [1, 2, 3, 4, 5, 1, 2] and 0 not in strata
    text_too = Verifier(20)
    _offered(_dataset(tmp_path), text_too)
    assert [stratum(_pixels(o)) for o in text_too.chosen][-2:] == [0, 0]  # text-only rows only fill up


def test_the_pixel_budget_never_decodes_a_big_row_and_keeps_the_others(tmp_path, monkeypatch):
    decoded = []
    import vlmlint.engine as engine

    real = engine.decode_image
    monkeypatch.setattr(engine, "decode_image", lambda ref: decoded.append(ref.path) or real(ref))
    verifier = Verifier(32, row_pixels=1_500_000)
    scanner = _offered(_dataset(tmp_path), verifier)
    checked, disagreements = verifier.run(scanner)
    assert disagreements == [] and checked == 12  # 18 rows, those above 1.5 MP left out
    assert not any(name in p for p in decoded for name in ("2000x1000", "6000x1000", "4000x3000"))
    assert {p.rsplit("/", 1)[1] for p in decoded} == {
        f"{w}x{h}.png" for w, h in (s for s in SIZES if s) if w * h <= 1_500_000
    }
    coverage = verifier.coverage()
    assert verifier.limited and coverage["left_by_time_budget"] == 0
    assert coverage["strata"]["<=6MP"] == {"rows": 4, "checked": 0, "above_pixel_budget": 4}
    assert coverage["strata"][">6MP"] == {"rows": 2, "checked": 0, "above_pixel_budget": 2}
    assert coverage["strata"]["<=1.5MP"] == {"rows": 4, "checked": 4}
    assert coverage["strata"]["text"] == {"rows": 2, "checked": 2}


def test_the_time_budget_stops_and_says_how_many(tmp_path):
    verifier = Verifier(32, seconds=2.5, clock=FakeClock(0.5))
    scanner = _offered(_dataset(tmp_path), verifier)
    checked, _ = verifier.run(scanner)
    # readings: start 0.5; each row is read before (budget) and around its check (2 readings): 1.5 s a row
    assert 1 <= checked < 18
    assert verifier.left_by_time == 18 - checked and verifier.limited
    assert sum(g["checked"] for g in verifier.coverage()["strata"].values()) == checked


def test_the_first_row_is_checked_even_with_no_time(tmp_path):
    verifier = Verifier(32, seconds=0.0, clock=FakeClock(10.0))
    scanner = _offered(_dataset(tmp_path), verifier)
    checked, _ = verifier.run(scanner)
    assert checked == 1 and verifier.left_by_time == 17
    assert verifier.coverage()["strata"]["<=0.1MP"]["checked"] == 1  # the smallest image row first


def test_a_row_predicted_to_overrun_is_left_and_a_smaller_one_still_fits(tmp_path):
    """The rate measured on the first rows predicts each next row's cost from its pixels."""
    verifier = Verifier(32, seconds=100.0)
    scanner = _offered(_dataset(tmp_path, sizes=[(64, 64), (1000, 1400), (64, 64)], copies=1), verifier)
    times = iter([0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0])  # start; per row: budget, before, after
    verifier.clock = lambda: next(times)
    # the first row (4,096 px) took 1 s: 1,400,000 px would take ~340 s, over the 99 s left; 64x64 fits
    checked, _ = verifier.run(scanner)
    assert checked == 2 and verifier.left_by_time == 1
    assert verifier.coverage()["strata"]["<=1.5MP"] == {"rows": 1, "checked": 0}


def test_a_disagreement_is_still_found_under_the_budgets(tmp_path):
    verifier = Verifier(32, seconds=60.0, row_pixels=1_500_000)
    scanner = Scanner(ScanConfig(dataset=str(_dataset(tmp_path)), model=MODEL, jobs=1))
    right = scanner._count
    scanner._count = lambda h, w, n: replace(right(h, w, n), tokens=right(h, w, n).tokens + 1)
    _offered(None, verifier, scanner)
    checked, disagreements = verifier.run(scanner)
    assert checked == 12 and len(disagreements) == 10  # every image row checked; text rows agree
    assert {finding.code for _, finding in disagreements} == {"VLM901"}
    places = [o.result.sample.index for o, _ in disagreements]
    assert places == sorted(places)  # dataset order, as before the budgets


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from([0, 1, 50_000, 200_000, 1_000_000, 3_000_000, 9_000_000]), max_size=300),
    st.integers(1, 40),
)
def test_the_choice_covers_every_stratum_it_can(pixel_rows, size):
    """Pure reservoir logic on stand-in outcomes: at most N, every image stratum with rows is taken
    before any stratum gets a second row, rows above the pixel budget never."""
    from vlmlint.records import ImageInfo, RowOutcome, RowResult, Sample

    verifier = Verifier(size, row_pixels=1_500_000)
    for i, pixels in enumerate(pixel_rows):
        images = (ImageInfo(reference="x", width=pixels, height=1),) if pixels else ()
        sample = Sample(source="s", index=i, messages=())
        verifier.offer(RowOutcome(RowResult(sample=sample, images=images, seq_len=10), ()))
    chosen = verifier.chosen
    eligible = [p for p in pixel_rows if p <= 1_500_000]
    assert len(chosen) == min(size, len(eligible))
    assert all(_pixels(o) <= 1_500_000 for o in chosen)
    image_strata = {stratum(p) for p in eligible if p}
    firsts = [stratum(_pixels(o)) for o in chosen][: len(image_strata)]
    if len(chosen) >= len(image_strata):
        assert set(firsts) == image_strata


def test_cli_budget_option_and_summary(tmp_path):
    path = _dataset(tmp_path)
    args = ["scan", str(path), "--model", MODEL, "-q", "-f", "json", "--verify-budget", "60"]
    verify = orjson.loads(CliRunner().invoke(app, args).stdout)["summary"]["verify"]
    assert verify["rows"] == 12 and verify["disagreements"] == 0 and verify["left_by_time_budget"] == 0
    load = verify["budget"].pop("processor_load_seconds")  # counted in the budget (the rows get the rest)
    assert verify["budget"] == {"seconds": 60.0, "row_pixels": 1_500_000} and 0 <= load < 60
    assert verify["strata"][">6MP"]["above_pixel_budget"] == 2
    text = CliRunner().invoke(app, ["scan", str(path), "--model", MODEL, "-q", "--verify-budget", "60"])
    assert "verify: 12 rows rechecked" in text.stdout and "rows checked by size:" in text.stdout
    assert "rows above 1.5 MP are not decoded" in text.stdout


def test_no_budget_field_when_nothing_was_left_out(tmp_path):
    path = _dataset(tmp_path, sizes=[(64, 64), (640, 480)])
    args = ["scan", str(path), "--model", MODEL, "-q", "-f", "json", "--verify-budget", "60"]
    verify = orjson.loads(CliRunner().invoke(app, args).stdout)["summary"]["verify"]
    assert verify == {"rows": 4, "disagreements": 0}  # the report as before the budgets


# -- the recheck in a forked process (small datasets: Verifier.fork) ------------------------------------


def _rechecked(path, fork: bool, scanner=None):
    scanner = scanner or Scanner(ScanConfig(dataset=str(path), model=MODEL, jobs=1))
    verifier = Verifier(32, seconds=600.0, row_pixels=1_500_000)
    assert verifier.fork(scanner) is fork or not fork
    _offered(path, verifier, scanner)
    checked, disagreements = verifier.run(scanner)
    return verifier, checked, disagreements


def test_the_forked_recheck_gives_what_the_recheck_here_gives(tmp_path):
    path = _dataset(tmp_path)
    here, checked_here, found_here = _rechecked(path, fork=False)
    there, checked_there, found_there = _rechecked(path, fork=True)
    assert checked_there == checked_here == 12 and found_there == found_here == []
    assert there.coverage()["strata"] == here.coverage()["strata"]
    assert there.load_seconds >= 0 and there._process is None  # the child is gone once it answered


def test_a_wrong_formula_is_caught_through_the_forked_recheck(tmp_path):
    path = _dataset(tmp_path)
    scanner = Scanner(ScanConfig(dataset=str(path), model=MODEL, jobs=1))
    right = scanner._count
    scanner._count = lambda h, w, n: replace(right(h, w, n), tokens=right(h, w, n).tokens + 1)
    _, checked, disagreements = _rechecked(path, fork=True, scanner=scanner)
    assert checked == 12 and len(disagreements) == 10  # every checked row with an image
    assert {finding.code for _, finding in disagreements} == {"VLM901"}
    places = [(o.result.sample.source, o.result.sample.index) for o, _ in disagreements]
    assert places == sorted(places)  # the parent's own rows, in dataset order


def test_a_failing_recheck_process_falls_back_to_this_one(tmp_path, monkeypatch):
    import vlmlint.verify as verify

    path = _dataset(tmp_path)
    monkeypatch.setattr(verify, "_recheck_child", lambda connection, parents, scanner: verify.os._exit(3))
    _, checked, disagreements = _rechecked(path, fork=True)
    assert checked == 12 and disagreements == []


def test_an_unused_recheck_process_is_ended(tmp_path):
    path = _dataset(tmp_path)
    scanner = Scanner(ScanConfig(dataset=str(path), model=MODEL, jobs=1))
    verifier = Verifier(32)
    assert verifier.fork(scanner)
    child = verifier._process._child
    verifier.close()  # the scan was interrupted before its recheck
    assert not child.is_alive() and verifier._process is None
    assert child.exitcode == 0  # it saw the end of its pipe and left: it was not killed


def test_small_local_files_fork_the_recheck_folders_and_large_files_do_not(tmp_path, monkeypatch):
    import vlmlint.verify as verify

    path = _dataset(tmp_path)
    assert verify.small_datasets([str(path)]) and not verify.small_datasets([str(tmp_path)])
    monkeypatch.setattr(verify, "FORK_DATASET_BYTES", path.stat().st_size - 1)
    assert not verify.small_datasets([str(path)])
