"""Wrong types in every field of every layout: a finding on the row, never an exception.

Rows are parsed as the readers parse them (`row_to_sample`, the layout detected from the row) and
then scanned against the fixture Qwen2-VL processor, each under a time limit.
"""

from __future__ import annotations

import copy
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from tests.hardening.conftest import FUZZ, MODEL, time_limit
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner
from vlmlint.readers.layouts import ImageResolver, row_to_sample
from vlmlint.rules import RULES_BY_CODE

TEMPLATES = {
    "llava": {
        "id": "1",
        "image": "a.jpg",
        "conversations": [
            {"from": "human", "value": "<image>\nWhat is it?"},
            {"from": "gpt", "value": "A cat."},
        ],
    },
    "sharegpt": {
        "messages": [
            {"role": "user", "content": "<image>What is it?"},
            {"role": "assistant", "content": "A cat."},
        ],
        "images": ["a.jpg"],
    },
    "openai": {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "image", "image": "a.jpg"}, {"type": "text", "text": "What?"}],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
        ]
    },
    "sharegpt-media": {
        "messages": [
            {"role": "user", "content": "<video><audio>What is it?"},
            {"role": "assistant", "content": "A cat."},
        ],
        "videos": ["v.mp4", ["a.jpg", "a.jpg"]],
        "audios": ["a.wav"],
    },
    "alpaca": {"instruction": "<image>What is it?", "input": "", "output": "A cat.", "images": ["a.jpg"]},
    "captions": {"image": "a.jpg", "text": "a cat"},
    "pretokenized": {"input_ids": [1, 2, 3], "labels": [-100, 2, 3], "image_grid_thw": [[1, 2, 2]]},
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("rows")
    Image.new("RGB", (64, 48), "red").save(path / "a.jpg")
    return path


@pytest.fixture(scope="module")
def scanner(folder):
    return Scanner(ScanConfig(dataset=str(folder / "data.jsonl"), model=MODEL, jobs=1))


def scan_row(row, folder, scanner):
    """(layout, sorted finding codes, findings) of one row, parsed and scanned like a manifest's."""
    with time_limit(20, "scanning one row"):
        sample = row_to_sample(
            row, layout=None, resolve=ImageResolver(str(folder)), source="data.jsonl", index=0, line=1
        )
        outcomes = list(scanner.scan_samples([sample]))
    assert len(outcomes) == 1
    findings = outcomes[0].findings
    assert all(finding.code in RULES_BY_CODE for finding in findings)
    return sample.layout, sorted({finding.code for finding in findings}), findings


def paths(value, prefix=()):
    """Every field path of a template: keys, list positions, and the row itself."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths(item, (*prefix, key))
    elif isinstance(value, list):
        for position, item in enumerate(value):
            yield from paths(item, (*prefix, position))


def replaced(template, path, value):
    if not path:
        return value
    row = copy.deepcopy(template)
    container = row
    for key in path[:-1]:
        container = container[key]
    container[path[-1]] = value
    return row


def nested(levels: int):
    value: list = []
    for _ in range(levels):
        value = [value]
    return value


HOSTILE = st.sampled_from(
    [
        None,
        0,
        -1,
        2**63 - 1,
        math.nan,
        math.inf,
        True,
        "",
        " ",
        "\x00",
        "<image>" * 64,
        "x" * 100_000,
        "../../../../etc/passwd",
        "/dev/zero",
        "http://127.0.0.1:9/x.jpg",
        "data:image/png;base64,!!!",
        "file:///etc/passwd",
        [],
        [None],
        [[["a.jpg"]]],
        {},
        {"bytes": b"", "path": None},
        {"bytes": b"\x89PNG garbage", "path": 7},
        {"url": {"url": 5}},
        b"\xff\xd8\xff",
        nested(1000),
    ]
)
JSON_LIKE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12) | st.binary(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)


@pytest.mark.parametrize("layout", list(TEMPLATES))
def test_wrong_type_in_any_field_is_a_finding(layout, folder, scanner, record):
    template = TEMPLATES[layout]
    fields = list(paths(template))

    @FUZZ
    @given(path=st.sampled_from(fields), value=HOSTILE | JSON_LIKE)
    def check(path, value):
        scan_row(replaced(template, path, value), folder, scanner)

    check()
    record(
        "rows",
        f"{layout}: any field (of {len(fields)}) replaced by a random or hostile value (hypothesis, 120 rows)",
        "a finding on the row (VLM101 or VLM102 when it no longer fits a layout) or a parsed row; no "
        "exception, no hang",
    )


# One row per case: (layout, what is wrong, the field path, the value).
CASES = [
    ("llava", "conversations is a string", ("conversations",), "<image>\nhello"),
    ("llava", "conversations is a number", ("conversations",), 42),
    ("llava", "conversations is null", ("conversations",), None),
    ("llava", "a turn is a string", ("conversations", 0), "hello"),
    ("llava", "a turn's value is a number", ("conversations", 0, "value"), 3.5),
    ("llava", "unknown role", ("conversations", 0, "from"), "narrator"),
    ("llava", "role is a list", ("conversations", 0, "from"), ["human"]),
    ("llava", "image is a dict without bytes or path", ("image",), {"uri": "a.jpg"}),
    ("llava", "image is a number", ("image",), 7),
    ("llava", "image is null (the placeholder stays)", ("image",), None),
    ("llava", "image is a nested list", ("image",), [["a.jpg"]]),
    ("llava", "image is an empty string", ("image",), ""),
    ("sharegpt", "messages is a string", ("messages",), "hi"),
    ("sharegpt", "images is one object, not a list", ("images",), {"path": "a.jpg"}),
    ("sharegpt", "images is a number", ("images",), 3),
    ("sharegpt", "images holds null", ("images",), [None]),
    ("sharegpt", "role is unknown", ("messages", 1, "role"), "tool"),
    ("sharegpt", "content is a number", ("messages", 0, "content"), 12),
    ("openai", "a content part is a number", ("messages", 0, "content", 1), 5),
    (
        "openai",
        "a content part has an unknown type",
        ("messages", 0, "content", 1),
        {"type": "hologram", "hologram": "a.glb"},
    ),
    (
        "openai",
        "an input_audio part whose data is not base64",
        ("messages", 0, "content", 1),
        {"type": "input_audio", "input_audio": {"data": "%%%", "format": "wav"}},
    ),
    (
        "openai",
        "a video part whose frame list is empty",
        ("messages", 0, "content", 1),
        {"type": "video", "video": []},
    ),
    ("sharegpt-media", "videos is a number", ("videos",), 3),
    ("sharegpt-media", "a video is an empty frame list", ("videos", 0), []),
    ("sharegpt-media", "an audio is a list", ("audios", 0), ["a.wav", "b.wav"]),
    ("sharegpt-media", "a frame of a frame-list video is a number", ("videos", 1, 0), 7),
    (
        "openai",
        "an image_url whose url is a number",
        ("messages", 0, "content", 0),
        {"type": "image_url", "image_url": {"url": 5}},
    ),
    ("openai", "content is an object", ("messages", 0, "content"), {"type": "text", "text": "hi"}),
    ("alpaca", "instruction is a list", ("instruction",), ["<image>", "hi"]),
    ("alpaca", "output is null", ("output",), None),
    ("alpaca", "images is a nested list", ("images",), [["a.jpg"]]),
    ("captions", "text is a number", ("text",), 1.5),
    ("captions", "image is a list of objects", ("image",), [{"path": "a.jpg"}, {"bytes": None}]),
    ("pretokenized", "input_ids is a string", ("input_ids",), "1 2 3"),
    ("pretokenized", "input_ids holds floats", ("input_ids",), [1.0, 2.5]),
    ("pretokenized", "input_ids is empty", ("input_ids",), []),
    ("pretokenized", "image_grid_thw is ragged", ("image_grid_thw",), [[1, 2], [1, 2, 2]]),
    ("pretokenized", "labels is a dict", ("labels",), {"a": 1}),
]


@pytest.mark.parametrize("layout,case,path,value", CASES, ids=[f"{c[0]}: {c[1]}" for c in CASES])
def test_wrong_type_case(layout, case, path, value, folder, scanner, record):
    detected, codes, findings = scan_row(replaced(TEMPLATES[layout], path, value), folder, scanner)
    assert findings, f"{layout}: {case}: no finding"
    first = findings[0]
    record("rows", f"{layout}: {case}", f"{', '.join(codes)}: {first.message[:150]}")


def test_id_nested_1000_levels(folder, scanner, record):
    row = replaced(TEMPLATES["llava"], ("id",), nested(1000))
    with time_limit(20, "parsing one row"):
        sample = row_to_sample(row, layout=None, resolve=ImageResolver(str(folder)), source="d", index=0)
    _, codes, _ = scan_row(row, folder, scanner)
    assert codes == [] and sample.id == "[[[[...]]]]"
    record("rows", "llava: id nested 1,000 levels deep", f"a valid row; its id is shown bounded: {sample.id}")
