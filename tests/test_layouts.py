"""Row layouts: detection and parsing into samples with image parts in place."""

from __future__ import annotations

import pytest

from vlmlint.readers.layouts import ImageResolver, detect_layout, row_to_sample, split_placeholders
from vlmlint.sample import Part, Role

RESOLVE = ImageResolver("/data")


def parse(row, layout=None):
    return row_to_sample(row, layout=layout, resolve=RESOLVE, source="m.jsonl", index=0, line=1)


@pytest.mark.parametrize(
    "row,layout",
    [
        ({"id": 1, "image": "a.jpg", "conversations": [{"from": "human", "value": "<image>"}]}, "llava"),
        ({"conversations": [{"from": "human", "value": "hi"}]}, "llava"),
        ({"messages": [{"role": "user", "content": "<image>"}], "images": ["a.jpg"]}, "sharegpt"),
        ({"conversations": [{"from": "human", "value": "<image>"}], "images": ["a.jpg"]}, "sharegpt"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]}, "openai"),
        ({"instruction": "<image>x", "input": "", "output": "y", "images": ["a.jpg"]}, "alpaca"),
        ({"image": "a.jpg", "text": "a cat"}, "captions"),
        ({"file_name": "a.jpg", "caption": "a cat"}, "captions"),
        ({"foo": 1}, None),
    ],
)
def test_detect_layout(row, layout):
    assert detect_layout(row) == layout


def test_split_placeholders_keeps_order_and_drops_empty_text():
    assert split_placeholders("<image>\nWhat?") == (Part(is_image=True), Part(text="\nWhat?"))
    assert split_placeholders("a<image>b<image>") == (
        Part(text="a"),
        Part(is_image=True),
        Part(text="b"),
        Part(is_image=True),
    )
    assert split_placeholders("") == ()


def test_llava_row_single_image_string():
    sample = parse(
        {
            "id": 7,
            "image": "img/a.jpg",
            "conversations": [
                {"from": "human", "value": "<image>\nDescribe."},
                {"from": "gpt", "value": "A cat."},
            ],
        }
    )
    assert sample.layout == "llava" and sample.id == "7" and not sample.problems
    assert [m.role for m in sample.messages] == [Role.USER, Role.ASSISTANT]
    assert sample.messages[0].parts[0].is_image
    assert sample.images[0].path == "/data/img/a.jpg"


def test_openai_inline_images_and_image_url():
    sample = parse(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "image": "a.jpg"},
                        {"type": "image_url", "image_url": {"url": "https://x.org/b.png"}},
                        {"type": "text", "text": "compare <image>"},
                    ],
                }
            ]
        }
    )
    assert sample.layout == "openai"
    assert [ref.kind for ref in sample.images] == ["file", "url"]
    # a literal <image> inside a typed text part stays text
    assert sum(p.is_image for p in sample.messages[0].parts) == 2


def test_alpaca_joins_instruction_and_input():
    sample = parse({"instruction": "<image>Q", "input": "more", "output": "A", "images": ["a.jpg"]})
    assert sample.messages[0].parts == (Part(is_image=True), Part(text="Q\nmore"))
    assert sample.messages[1].parts == (Part(text="A"),)


def test_captions_put_the_image_in_a_user_turn():
    sample = parse({"image": "a.jpg", "text": "a cat"})
    assert sample.messages[0].parts == (Part(is_image=True),)
    assert sample.messages[1].role is Role.ASSISTANT


@pytest.mark.parametrize(
    "row,fragment",
    [
        ([1, 2], "not an object"),
        ({"foo": 1}, "no known layout"),
        ({"image": "a.jpg", "conversations": "<image> hi"}, "non-empty list"),
        ({"conversations": [{"from": "alien", "value": "x"}]}, "unknown role"),
        ({"conversations": [{"from": "human", "value": 3}]}, "must be a string"),
        ({"image": 5, "conversations": [{"from": "human", "value": "x"}]}, "string or a list"),
        ({"image": [""], "conversations": [{"from": "human", "value": "x"}]}, "non-empty string"),
    ],
)
def test_bad_rows_become_vlm101(row, fragment):
    sample = parse(row)
    assert [p.code for p in sample.problems] == ["VLM101"]
    assert fragment in sample.problems[0].message


def test_forced_layout_reports_rows_that_do_not_fit():
    sample = parse({"image": "a.jpg", "text": "cap"}, layout="llava")
    assert sample.problems and 'missing "conversations"' in sample.problems[0].message


def test_hf_image_struct_with_bytes():
    sample = parse(
        {"messages": [{"role": "user", "content": "<image>"}], "images": [{"bytes": b"xyz", "path": "p.png"}]}
    )
    assert sample.images[0].kind == "bytes" and sample.images[0].data == b"xyz"


def test_absolute_and_data_uri_images():
    import base64

    uri = "data:image/png;base64," + base64.b64encode(b"abc").decode()
    sample = parse(
        {"messages": [{"role": "user", "content": "<image><image>"}], "images": ["/abs/a.jpg", uri]}
    )
    assert sample.images[0].path == "/abs/a.jpg"
    assert sample.images[1].data == b"abc"
