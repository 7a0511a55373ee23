"""Row layouts: detection and parsing into samples with image parts in place."""

from __future__ import annotations

import pytest

from vlmlint.readers.layouts import ImageResolver, detect_layout, row_to_sample, split_placeholders
from vlmlint.records import Part, Role

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
        ([1, 2], "JSON array, not an object"),
        (None, "JSON null, not an object"),
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
    sample = parse({"foo": 1}, layout="llava")  # forced: VLM101 even when no layout fits
    assert [p.code for p in sample.problems] == ["VLM101"]


def test_row_fitting_no_layout_is_vlm102_naming_fields_and_layouts():
    sample = parse({"foo": 1, "img": "a.jpg"})
    assert [p.code for p in sample.problems] == ["VLM102"]
    message = sample.problems[0].message
    assert "['foo', 'img']" in message and all(name in message for name in ("llava", "sharegpt", "captions"))


def test_row_fitting_no_layout_after_the_first_row_is_vlm102():
    row = {"id": 2, "image": "a.jpg", "conversation": []}  # "conversation" misspelt
    sample = row_to_sample(
        row, layout="llava", resolve=RESOLVE, source="m.jsonl", index=1, line=2, from_first_row=True
    )
    assert [p.code for p in sample.problems] == ["VLM102"]
    assert "this file's rows are llava" in sample.problems[0].message
    # a row of another known layout in that file still names the field its file's layout lacks
    other = row_to_sample(
        {"image": "a.jpg", "text": "cap"},
        layout="llava",
        resolve=RESOLVE,
        source="m.jsonl",
        index=2,
        from_first_row=True,
    )
    assert [p.code for p in other.problems] == ["VLM101"]


@pytest.mark.parametrize(
    "row,note",
    [
        ({"messages": [{"role": "user", "content": "<image>"}], "images": "a.jpg"}, "a string"),
        ({"instruction": "<image>x", "output": "y", "images": "a.jpg"}, "a string"),
        ({"messages": [{"role": "user", "content": "<image>"}], "images": {"path": "a.jpg"}}, "an object"),
    ],
)
def test_images_not_a_list_is_read_as_one_image_with_a_vlm106_note(row, note):
    sample = parse(row)
    assert not sample.problems and len(sample.images) == 1 and sample.images[0].path == "/data/a.jpg"
    assert [p.code for p in sample.notes] == ["VLM106"] and note in sample.notes[0].message


def test_llava_image_string_and_image_lists_have_no_note():
    assert not parse({"image": "a.jpg", "conversations": [{"from": "human", "value": "<image>"}]}).notes
    assert not parse({"messages": [{"role": "user", "content": "<image>"}], "images": ["a.jpg"]}).notes


def test_image_path_with_nul_is_a_row_problem():
    sample = parse({"image": "a\0.jpg", "conversations": [{"from": "human", "value": "<image>"}]})
    assert [p.code for p in sample.problems] == ["VLM101"] and "NUL" in sample.problems[0].message


def test_paths_leaving_the_root_are_marked(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "out.jpg").write_bytes(b"x")
    (tmp_path / "data" / "in.jpg").write_bytes(b"x")
    (tmp_path / "data" / "link_out.jpg").symlink_to(tmp_path / "out.jpg")
    (tmp_path / "data" / "link_in.jpg").symlink_to(tmp_path / "data" / "in.jpg")
    resolve = ImageResolver(str(tmp_path / "data"))
    outside = {
        ref: resolve(ref).outside_root for ref in ("../out.jpg", str(tmp_path / "out.jpg"), "link_out.jpg")
    }
    inside = {ref: resolve(ref).outside_root for ref in ("in.jpg", "link_in.jpg", "x/../in.jpg")}
    assert all(outside.values()) and not any(inside.values())


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
