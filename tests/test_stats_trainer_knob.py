"""`vlmlint stats` under a trainer that sizes images itself (issue 22: "its knob names are the trainer's when a
pipeline is set"): LLaMA-Factory's image_max_pixels, swift's max_pixels and Qwen's fine-tune script's
max_pixels are searched as that option, each grid value recounted through the trainer's own pre-resize
(Pipeline.count_image), and a recommended value really keeps its share in a fresh scan with the option set
as a user sets it (`--pipeline-option KEY=VALUE`)."""

from __future__ import annotations

from functools import cache

import pytest

from tests.conftest import DATASETS, PROCESSORS
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import load_model
from vlmlint.stats import StatsCollector, TrainerImageSearch, collect

DEMO = DATASETS / "demo" / "data.jsonl"
LIMIT = 400


@cache
def _model(name: str):
    return load_model(str(PROCESSORS / name))


def _scanner(pipeline: str, options: dict | None = None, model: str = "qwen2-vl") -> Scanner:
    config = ScanConfig(
        dataset=str(DEMO),
        model=str(PROCESSORS / model),
        max_length=LIMIT,
        pipeline=pipeline,
        pipeline_options=options or {},
    )
    return Scanner(config, model=_model(model), rules=())


CASES = {
    "llamafactory": ("image_max_pixels", {}),
    "swift": ("max_pixels", {"max_pixels": 602112}),
}


@pytest.mark.parametrize("pipeline", sorted(CASES))
def test_the_knob_is_the_trainers_option_and_its_recommendation_holds_in_a_fresh_scan(pipeline):
    name, options = CASES[pipeline]
    scanner = _scanner(pipeline, options)
    collector = StatsCollector(scanner, str(DEMO))
    for outcome in scanner.scan():
        collector.add(outcome)
    stats = collector.result()
    grid = [value for value, _ in collector.trainer.pipelines]
    knob = stats.knob
    assert knob is not None and knob.name == name and knob.step == 0, stats.knob_note
    assert "--pipeline-option" in knob.grid
    for recommendation in knob.recommendations:
        assert recommendation.value is not None
        fresh = _scanner(pipeline, {**options, name: recommendation.value})
        lengths = [o.result.seq_len for o in fresh.scan() if o.result.seq_len is not None]
        within = sum(1 for n in lengths if n <= LIMIT)
        assert within == recommendation.rows_kept >= recommendation.rows_required
        above = grid.index(recommendation.value) + 1
        if above < len(grid):  # the largest such value: the next one up keeps too few
            bigger = _scanner(pipeline, {**options, name: grid[above]})
            kept = sum(1 for o in bigger.scan() if o.result.seq_len is not None and o.result.seq_len <= LIMIT)
            assert kept < recommendation.rows_required


def test_the_length_at_the_current_value_is_the_scans_length():
    scanner = _scanner("llamafactory")
    search = TrainerImageSearch(
        scanner, "image_max_pixels", (50176, 589824, 1003520), 589824, "test grid", LIMIT
    )
    current = [value for value, _ in search.pipelines].index(589824)
    rows = [o.result for o in scanner.scan() if o.result.seq_len is not None]
    assert rows and all(search.length(row, current) == row.seq_len for row in rows)
    # and at another value, each length is what a fresh scan with that value gives
    other = _scanner("llamafactory", {"image_max_pixels": 50176})
    fresh = {o.result.sample.index: o.result.seq_len for o in other.scan()}
    assert all(search.length(row, 0) == fresh[row.sample.index] for row in rows)


def test_swift_without_max_pixels_keeps_the_processors_knob():
    scanner = _scanner("swift")
    stats = collect(scanner, scanner.scan(), str(DEMO))
    assert stats.knob is not None and stats.knob.name == "max_pixels" and stats.knob.step > 0
