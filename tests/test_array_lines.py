"""JSON array manifests: every row knows the line its element starts on, found while streaming."""

from __future__ import annotations

import io
import json
import random

import pytest

from vlmlint.readers import iter_samples
from vlmlint.readers.array_lines import ArrayElementLines

ROW = {"id": "r", "image": "a.jpg", "conversations": [{"from": "human", "value": "<image>\nHi"}]}


def reference_lines(text: str) -> list[int]:
    """Element start lines from the stdlib decoder's own positions."""
    decoder, position, lines = json.JSONDecoder(), text.index("[") + 1, []
    while True:
        while text[position] in " \t\r\n,":
            position += 1
        if text[position] == "]":
            return lines
        lines.append(text.count("\n", 0, position) + 1)
        _, position = decoder.raw_decode(text, position)


class Dribble:
    """A file that hands out a few bytes per read, so that chunks cut strings, escapes and rows."""

    def __init__(self, data: bytes, rng: random.Random, most: int) -> None:
        self.stream, self.rng, self.most = io.BytesIO(data), rng, most

    def read(self, size: int = -1) -> bytes:
        return self.stream.read(self.rng.randint(1, self.most))


def random_value(rng: random.Random, depth: int = 0):
    roll = rng.random()
    if depth > 3 or roll < 0.3:
        return rng.choice([1, -2.5e3, True, None, 'a"b\\', "x\\\\", "[{,}]", "line\nbreak", "ünï", '\\"', ""])
    if roll < 0.6:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(["a", "b[", "c\\", "{d}"]) + str(i): random_value(rng, depth + 1) for i in range(3)}


def scan_lines(data: bytes, rng: random.Random, most: int) -> list[int]:
    lines = ArrayElementLines(Dribble(data, rng, most))
    while lines.read(65536):
        pass
    return list(lines.lines)


@pytest.mark.parametrize("most", [1, 7, 300, 65536])
def test_element_lines_match_the_decoder_whatever_the_chunking(most):
    rng = random.Random(most)
    for _ in range(150):
        rows = [random_value(rng) for _ in range(rng.randint(0, 12))]
        text = "\n" * rng.randint(0, 2) + json.dumps(
            rows, indent=rng.choice([None, 1, 4]), ensure_ascii=False
        )
        assert scan_lines(text.encode(), rng, most) == reference_lines(text), text


def test_rows_of_a_json_array_carry_their_start_line(tmp_path):
    path = tmp_path / "data.json"
    rows = [{**ROW, "id": str(i)} for i in range(3)]
    path.write_text(
        "[\n" + json.dumps(rows[0], indent=2) + ",\n" + ", ".join(json.dumps(r) for r in rows[1:]) + "\n]\n"
    )
    samples = list(iter_samples(str(path)))
    assert [(s.id, s.line) for s in samples] == [("0", 2), ("1", 12), ("2", 12)]


def test_a_compact_one_line_array_is_all_line_1_and_a_bom_changes_nothing(tmp_path):
    path = tmp_path / "data.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps([ROW, ROW]).encode())
    assert [s.line for s in iter_samples(str(path))] == [1, 1]


def test_a_broken_array_reports_the_line_of_the_item_where_it_breaks(tmp_path):
    path = tmp_path / "data.json"
    path.write_text("[\n" + json.dumps(ROW) + ",\n" + json.dumps(ROW) + ',\n{"id": "x", "image": \n]\n')
    samples = list(iter_samples(str(path)))
    assert [s.line for s in samples] == [2, 3, 4]
    assert samples[-1].problems[0].code == "VLM101"


def test_an_integer_beyond_64_bits_is_valid_json_not_a_broken_array(tmp_path):
    """yajl's C backend says "integer overflow" (even for -2**63): the rows are read again by ijson's
    Python backend, each once, with their lines (found by tests/hardening's hypothesis)."""
    path = tmp_path / "data.json"
    rows = [{**ROW, "id": "0"}, {**ROW, "id": "1", "n": -(2**63)}, {**ROW, "id": "2", "n": 2**70}]
    path.write_text("[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]\n")
    samples = list(iter_samples(str(path)))
    assert [(s.id, s.line) for s in samples] == [("0", 2), ("1", 3), ("2", 4)]
    assert not any(p.code == "VLM101" for s in samples for p in s.problems)


def test_the_wrapper_streams_what_ijson_asks_for_and_no_more():
    import ijson

    class Counting(io.BytesIO):
        requested = 0

        def read(self, size=-1):
            Counting.requested += 1
            return super().read(size)

    data = json.dumps([ROW] * 5000).encode()
    items = ijson.items(ArrayElementLines(Counting(data)), "item")
    next(items)
    assert Counting.requested <= 2  # the first buffer (plus ijson's empty probe), not the whole file
