"""Row rules beyond the case files: state across scans, and scans that survive every bad row."""

from __future__ import annotations

import json
from functools import cache

from PIL import Image

from tests.conftest import PROCESSORS
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.models import load_model

MODEL = PROCESSORS / "qwen2-vl-small"
GOOD = {
    "image": "a.jpg",
    "conversations": [{"from": "human", "value": "<image>\nHi"}, {"from": "gpt", "value": "Yo"}],
}


@cache
def _model():
    return load_model(str(MODEL))


def _dataset(tmp_path, lines):
    Image.new("RGB", (64, 48)).save(tmp_path / "a.jpg")
    path = tmp_path / "data.jsonl"
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return str(path)


def test_duplicate_ids_are_forgotten_between_scans(tmp_path):
    dataset = _dataset(tmp_path, [{**GOOD, "id": "1"}, {**GOOD, "id": "1"}, {**GOOD, "id": "2"}])
    scanner = Scanner(ScanConfig(dataset=dataset, model=str(MODEL)), model=_model())
    for _ in range(2):  # a second scan with the same scanner does not see the first scan's ids
        codes = [f.code for outcome in scanner.scan() for f in outcome.findings]
        assert codes == ["VLM107"]
    samples = [outcome.result.sample for outcome in scanner.scan()]
    for _ in range(2):
        codes = [f.code for outcome in scanner.scan_samples(samples) for f in outcome.findings]
        assert codes == ["VLM107"]


def test_every_bad_row_is_reported_and_the_scan_reaches_the_end(tmp_path):
    lines = [
        {**GOOD, "id": "first"},
        "{broken",
        "[1, 2]",
        "null",
        '"a string"',
        {"foo": 1},
        {**GOOD, "image": "a\u0000.jpg"},
        {**GOOD, "image": [["a.jpg"]]},
        {**GOOD, "image": "../../outside.jpg"},
        {**GOOD, "image": "https://example.com/a.jpg"},
        {**GOOD, "image": "missing.jpg"},
        {**GOOD, "image": "."},
        {**GOOD, "conversations": [{"from": ["human"], "value": "x"}]},
        "[" * 5000 + "]" * 5000,
        {**GOOD, "id": "last"},
    ]
    scanner = Scanner(
        ScanConfig(dataset=_dataset(tmp_path, lines), model=str(MODEL)), model=load_model(str(MODEL))
    )
    outcomes = list(scanner.scan())
    assert len(outcomes) == len(lines)
    assert outcomes[-1].result.sample.id == "last" and outcomes[-1].result.seq_len is not None
    assert all(outcome.findings for outcome in outcomes[1:-1])


def test_id_table_equals_a_dict():
    """The compact id table of VLM107 behaves as dict.setdefault, through several growths."""
    import random

    from vlmlint.rules.rows import _IdTable

    rng = random.Random(5)
    table, reference = _IdTable(capacity=4), {}
    for position in range(20_000):
        key = f"id-{rng.randrange(8_000)}" if position % 7 else rng.choice(["", "é", "\ud800x", "7"])
        assert table.setdefault(key, position) == reference.setdefault(key, position)
    assert len(table) == len(reference)
