"""`vlmlint stats`: the recommended settings really fit (rescanned), are tight, and the figures are exact."""

from __future__ import annotations

import json
import math
import random
import shutil
from fractions import Fraction
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from typer.testing import CliRunner

from tests.conftest import DATASETS, PROCESSORS
from vlmlint.aggregate import percentiles as summary_percentiles
from vlmlint.cli import app
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import CountError, qwen_vl
from vlmlint.models import idefics3 as idefics3_family
from vlmlint.stats import (
    KEEP_SHARES,
    PERCENTILES,
    Distribution,
    RowLength,
    add_intervals,
    collect,
    knob_for,
    knob_recommendations,
    largest_fitting,
    length_recommendations,
)

QWEN = PROCESSORS / "qwen2-vl-small"
IDEFICS3 = PROCESSORS / "idefics3-8b-llama3"
runner = CliRunner()

# -- the counting functions are monotone in the knob (what the binary search relies on) --------------

sides = st.integers(min_value=1, max_value=6000)


@settings(max_examples=1000, deadline=None)
@given(
    height=sides,
    width=sides,
    patch=st.sampled_from([14, 16]),
    merge=st.sampled_from([1, 2]),
    min_k=st.integers(1, 64),
    k1=st.integers(1, 40000),
    k2=st.integers(1, 40000),
)
def test_qwen_tokens_never_decrease_below_the_saturation(height, width, patch, merge, min_k, k1, k2):
    """Between the drop points stats cuts at (here: one, the image's rounded area) the count only grows."""
    if max(height, width) / min(height, width) > qwen_vl.MAX_ASPECT_RATIO:
        return
    factor = patch * merge
    saturation = qwen_vl.max_pixels_saturation(height, width, factor)
    low, high = sorted((k1 * factor * factor, k2 * factor * factor))
    if high >= saturation:
        return
    tokens = [
        qwen_vl.count(height, width, qwen_vl.QwenSettings(patch, merge, 2, min_k * factor * factor, m)).tokens
        for m in (low, high)
    ]
    assert tokens[0] <= tokens[1]


def test_qwen_tokens_can_drop_at_the_saturation():
    """Why stats cuts the search there: the one-row clamp of smart_resize gives 8 tokens below, 7 at it."""
    assert qwen_vl.max_pixels_saturation(15, 183, 28) == 5488
    assert qwen_vl.count(15, 183, qwen_vl.QwenSettings(14, 2, 2, 3136, 4704)).tokens == 8
    assert qwen_vl.count(15, 183, qwen_vl.QwenSettings(14, 2, 2, 3136, 5488)).tokens == 7


@settings(max_examples=300, deadline=None)
@given(
    height=sides,
    width=sides,
    tile=st.sampled_from([364, 384, 512]),
    k1=st.integers(1, 12),
    k2=st.integers(1, 12),
)
def test_idefics3_tiles_never_decrease_as_longest_edge_grows(height, width, tile, k1, k2):
    """Tokens, and rows and cols each (the row/col markers are text): the composed row only grows."""
    low, high = sorted((k1, k2))
    grid = []
    for k in (low, high):
        settings_k = idefics3_family.Idefics3Settings(
            image_seq_len=64, max_image_size=tile, longest_edge=k * tile
        )
        try:
            grid.append(idefics3_family.count(height, width, settings_k))
        except CountError:
            return
    assert grid[0].tokens <= grid[1].tokens
    assert grid[0].grid[0] <= grid[1].grid[0] and grid[0].grid[1] <= grid[1].grid[1]


def test_largest_fitting():
    assert largest_fitting(lambda k: k <= 17, 1, 100) == 17
    assert largest_fitting(lambda k: k <= 17, 1, 10) == 10
    assert largest_fitting(lambda k: k <= 0, 1, 10) is None
    assert largest_fitting(lambda k: True, 5, 5) == 5


# -- percentiles and recommendations against brute force ---------------------------------------------


def _brute_percentile(values: list[int], percent: Fraction) -> int:
    """The smallest value with at least percent% of the values at or below it (nearest rank)."""
    n = len(values)
    return min(v for v in values if sum(1 for x in values if x <= v) >= max(1, percent * n / 100))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 5000), min_size=1, max_size=300))
def test_percentiles_match_brute_force(values):
    distribution = Distribution.of(values)
    for label, percent in PERCENTILES:
        assert distribution.percentiles[label] == _brute_percentile(values, percent), label
    assert distribution.percentiles["min"] == min(values) and distribution.percentiles["max"] == max(values)
    assert sum(b.count for b in distribution.histogram) == len(values)
    # the same figures as the scan summary's where both have them
    from array import array

    scan = summary_percentiles(array("q", values))
    assert {k: distribution.percentiles[k] for k in scan} == scan


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 3000), min_size=1, max_size=400))
def test_max_length_recommendation_is_the_smallest_that_keeps_the_share(lengths):
    for (label, share), found in zip(KEEP_SHARES, length_recommendations(lengths), strict=True):
        need = math.ceil(share * len(lengths))
        brute = min(v for v in lengths if sum(1 for x in lengths if x <= v) >= need)
        assert found.value == brute, label
        assert found.rows_kept >= need and found.rows_required == need


def _disjoint(points: list[int], open_end: bool) -> list[tuple[int, int | None]]:
    """Sorted distinct points -> a row's disjoint [first, last] intervals, the last one maybe endless."""
    pairs: list[tuple[int, int | None]] = list(zip(points[0::2], points[1::2], strict=False))
    if len(points) % 2:
        pairs.append((points[-1], None))
    elif open_end:
        pairs[-1] = (pairs[-1][0], None)
    return pairs


intervals = st.lists(
    st.builds(
        _disjoint,
        st.lists(st.integers(1, 60), min_size=1, max_size=6, unique=True).map(sorted),
        st.booleans(),
    ),
    min_size=1,
    max_size=200,
)


@settings(max_examples=300, deadline=None)
@given(intervals)
def test_knob_recommendation_is_the_largest_value_that_keeps_the_share(rows):
    events: dict[int, int] = {}
    for row in rows:
        add_intervals(events, row)
    step = 784

    def kept(k: int) -> int:
        return sum(1 for row in rows if any(a <= k and (b is None or k <= b) for a, b in row))

    for (label, share), found in zip(KEEP_SHARES, knob_recommendations(events, len(rows), step), strict=True):
        need = math.ceil(share * len(rows))
        reachable = [k for k in range(1, 200) if kept(k) >= need]
        if not reachable:
            assert found.value is None, label
            continue
        assert found.value is not None and found.value % step == 0
        k = found.value // step
        assert kept(k) == found.rows_kept >= need, label
        if found.unbounded:
            assert all(kept(j) == found.rows_kept for j in range(k, 200))
        else:
            assert max(reachable) == k, label  # the largest, so one step more keeps fewer (tight)


# -- the recommended setting, rescanned ------------------------------------------------------------


def _dataset(folder: Path, rows: int, seed: int = 7) -> Path:
    """Rows with 1-2 images of varied sizes and texts of varied lengths (a fixed seed)."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for position in range(24):
        width, height = rng.randint(60, 1400), rng.randint(60, 1400)
        names.append(f"{position}.png")
        Image.new("RGB", (width, height), (rng.randint(0, 255), 80, 120)).save(folder / names[-1])
    lines = []
    for index in range(rows):
        images = rng.sample(names, rng.choice([1, 1, 2]))
        words = " ".join(
            rng.choice(["cat", "dog", "photo", "describe", "colour"]) for _ in range(rng.randint(3, 60))
        )
        lines.append(
            json.dumps(
                {
                    "id": str(index),
                    "image": images,
                    "conversations": [
                        {"from": "human", "value": "<image>" * len(images) + "\n" + words},
                        {"from": "gpt", "value": "It is " + words[: rng.randint(5, 80)]},
                    ],
                }
            )
        )
    (folder / "data.jsonl").write_text("\n".join(lines) + "\n")
    return folder / "data.jsonl"


def _processor(tmp_path: Path, source: Path, name: str, **changes) -> Path:
    folder = tmp_path / name
    shutil.copytree(source, folder)
    path = folder / "preprocessor_config.json"
    config = json.loads(path.read_text())
    if "max_pixels" in changes:
        config.pop("size", None)
    config.update(changes)
    path.write_text(json.dumps(config))
    return folder


def _stats(manifest: Path, model: Path, limit: int | None):
    scanner = Scanner(ScanConfig(dataset=str(manifest), model=str(model), max_length=limit), rules=())
    return scanner, collect(scanner, scanner.scan(), str(manifest))


def _within(manifest: Path, model: Path, limit: int) -> tuple[int, int]:
    """(rows within limit, rows counted) of a fresh scan."""
    scanner = Scanner(ScanConfig(dataset=str(manifest), model=str(model), max_length=limit), rules=())
    lengths = [o.result.seq_len for o in scanner.scan() if o.result.seq_len is not None]
    return sum(1 for n in lengths if n <= limit), len(lengths)


@pytest.fixture(scope="module")
def qwen_case(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("qwen")
    manifest = _dataset(tmp_path / "data", rows=400)
    model = _processor(tmp_path, QWEN, "base", max_pixels=1003520)  # large images: many rows over the limit
    limit = 700
    scanner, stats = _stats(manifest, model, limit)
    return tmp_path, manifest, stats, limit


def test_recommended_max_pixels_keeps_each_share_and_is_tight(qwen_case):
    tmp_path, manifest, stats, limit = qwen_case
    knob = stats.knob
    assert knob is not None and knob.name == "max_pixels" and knob.step == 784
    assert knob.unfittable == 0 and knob.rows_fittable == stats.rows_counted == 400
    assert not any(r.unbounded for r in knob.recommendations)
    assert stats.rows_within_limit < 400  # the dataset needs the knob
    values = [r.value for r in knob.recommendations]
    assert all(v is not None and v % 784 == 0 for v in values)
    assert values[0] < values[2], "the dataset should make the 100% and 99% settings differ"
    for position, found in enumerate(knob.recommendations):
        kept, counted = _within(
            manifest, _processor(tmp_path, QWEN, f"rec{position}", max_pixels=found.value), limit
        )
        assert counted == 400
        assert kept == found.rows_kept >= found.rows_required, found
        if found.keep == "100%":
            assert kept == 400
        bigger = _processor(tmp_path, QWEN, f"bigger{position}", max_pixels=found.value + knob.step)
        assert _within(manifest, bigger, limit)[0] < found.rows_required, (
            found
        )  # one grid step more is too much


def test_max_length_recommendation_matches_a_rescan(qwen_case):
    tmp_path, manifest, stats, limit = qwen_case
    for found in stats.max_length:
        kept, counted = _within(manifest, tmp_path / "base", found.value)
        assert kept == found.rows_kept >= found.rows_required
        assert _within(manifest, tmp_path / "base", found.value - 1)[0] < found.rows_required


def test_row_length_at_the_current_setting_is_the_scanned_length(tmp_path):
    for source, limit in ((QWEN, 400), (IDEFICS3, 2000)):
        scanner, _ = _stats(DATASETS / "demo", source, limit)
        knob = knob_for(scanner.family.name, scanner.model.settings)
        length_at = RowLength(scanner, knob)
        checked = 0
        for outcome in scanner.scan():
            row = outcome.result
            if row.seq_len is not None and row.images:
                assert length_at(row, knob.current) == row.seq_len, row.sample.location
                checked += 1
        assert checked > 20


def test_rows_that_cannot_fit_are_counted_apart(tmp_path):
    manifest = _dataset(tmp_path / "data", rows=40, seed=3)
    long_row = {
        "id": "long",
        "image": ["0.png"],
        "conversations": [
            {"from": "human", "value": "<image>\n" + "describe " * 400},
            {"from": "gpt", "value": "ok"},
        ],
    }
    with manifest.open("a") as handle:
        handle.write(json.dumps(long_row) + "\n")
    _, stats = _stats(manifest, _processor(tmp_path, QWEN, "p", max_pixels=1003520), 300)
    assert stats.knob.unfittable >= 1 and any(loc.endswith(":41") for loc in stats.knob.unfittable_rows)
    assert stats.knob.rows_fittable + stats.knob.unfittable == stats.rows_counted


def test_recommended_idefics3_longest_edge_fits(tmp_path):
    manifest = _dataset(tmp_path / "data", rows=60, seed=5)
    limit = 1500
    _, stats = _stats(manifest, IDEFICS3, limit)
    knob = stats.knob
    assert knob.name == "size.longest_edge" and knob.step == 364
    top = knob.recommendations[0]
    assert top.value is not None and top.value < knob.current and knob.unfittable == 0
    edited = _processor(tmp_path, IDEFICS3, "fit", size={"longest_edge": top.value})
    assert _within(manifest, edited, limit) == (60, 60)
    bigger = _processor(tmp_path, IDEFICS3, "bigger", size={"longest_edge": top.value + knob.step})
    assert _within(manifest, bigger, limit)[0] < 60


def test_fixed_families_say_why_there_is_no_knob():
    _, stats = _stats(DATASETS / "demo", PROCESSORS / "llava-1.5-7b", None)
    assert stats.knob is None and "no image-size knob" in stats.knob_note
    _, stats = _stats(DATASETS / "demo", PROCESSORS / "llava-onevision-qwen2-7b-ov", None)
    assert "grid pinpoints" in stats.knob_note


# -- the command -----------------------------------------------------------------------------------


def test_cli_text_shows_histograms_and_the_fit_table():
    result = runner.invoke(
        app, ["stats", str(DATASETS / "demo"), "--model", str(QWEN), "--max-length", "300", "-q"]
    )
    assert result.exit_code == 0, result.output
    for expected in (
        "Sequence length per row",
        "Image tokens per image",
        "█",
        "p99.9",
        "max_pixels (to fit 300)",
    ):
        assert expected in result.stdout


def test_cli_json_parses():
    result = runner.invoke(
        app,
        ["stats", str(DATASETS / "demo"), "--model", str(QWEN), "--max-length", "300", "--format", "json"],
    )
    assert result.exit_code == 0, result.output
    report = orjson.loads(result.stdout)
    assert report["limit"] == 300 and report["limit_source"] == "--max-length"
    assert set(report["seq_len"]["percentiles"]) == {label for label, _ in PERCENTILES}
    assert [r["keep"] for r in report["knob"]["recommendations"]] == ["100%", "99.9%", "99%"]
    assert sum(b["count"] for b in report["seq_len"]["histogram"]) == report["rows_counted"]


def test_cli_missing_dataset_exits_2(tmp_path):
    result = runner.invoke(app, ["stats", str(tmp_path / "nope.jsonl"), "--model", str(QWEN)])
    assert result.exit_code == 2
