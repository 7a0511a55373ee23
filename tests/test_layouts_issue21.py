"""Issue 21's layouts: each trainer's documented row shape detected and read into the same Sample a
hand-written sharegpt/openai row gives (the fixture datasets under fixtures/datasets/layouts21_* prove
the counts against the real processors: tests/test_fixtures.py)."""

from __future__ import annotations

import os

import pytest

from vlmlint.readers.layouts import ImageResolver, detect_layout, row_to_sample
from vlmlint.records import ImageSizing, Role

RESOLVE = ImageResolver("/data")


def parse(row, layout=None, from_first_row=False):
    return row_to_sample(
        row, layout=layout, resolve=RESOLVE, source="m.jsonl", index=0, line=1, from_first_row=from_first_row
    )


def shape(sample):
    """Each turn as (role, [text or "IMG"]), to compare with what the trainer builds."""
    return [(m.role.value, ["IMG" if p.is_image else p.text for p in m.parts]) for m in sample.messages]


TRL_ROW = {
    "images": ["a.jpg"],
    "prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What?"}]}],
    "completion": [{"role": "assistant", "content": [{"type": "text", "text": "A cat."}]}],
}


@pytest.mark.parametrize(
    "row,layout,turns",
    [
        (TRL_ROW, "prompt-completion", [("user", ["IMG", "What?"]), ("assistant", ["A cat."])]),
        (
            {"images": ["a.jpg"], "prompt": "<image>What?", "completion": "A cat."},
            "prompt-completion",
            [("user", ["IMG", "What?"]), ("assistant", ["A cat."])],
        ),
        (  # verl: a prompt of messages, the answer in reward_model
            {
                "prompt": [{"role": "user", "content": "<image>Find x."}],
                "images": ["a.jpg"],
                "ability": "math",
            },
            "prompt-completion",
            [("user", ["IMG", "Find x."])],
        ),
        (
            {"images": ["a.jpg", "b.jpg"], "texts": [{"user": "Q1", "assistant": "A1", "source": "s"}]},
            "cauldron",
            [("user", ["IMG", "IMG", "Q1"]), ("assistant", ["A1"])],
        ),
        (
            {
                "system": "S",
                "query": "<image>Q",
                "response": "R",
                "history": [["q0", "a0"]],
                "images": ["a.jpg"],
            },
            "query-response",
            [
                ("system", ["S"]),
                ("user", ["q0"]),
                ("assistant", ["a0"]),
                ("user", ["IMG", "Q"]),
                ("assistant", ["R"]),
            ],
        ),
        (
            {"images": ["a.jpg"], "problem": "<image>Find x.", "answer": "3"},
            "query-response",
            [("user", ["IMG", "Find x."]), ("assistant", ["3"])],
        ),
        (  # R1-V: one image, no placeholder: it goes first in the user turn
            {"image": "a.jpg", "problem": "Find x.", "solution": "<answer>3</answer>"},
            "query-response",
            [("user", ["IMG", "Find x."]), ("assistant", ["<answer>3</answer>"])],
        ),
        (
            {"conversation": [{"human": "<image>Q", "assistant": "A"}], "images": ["a.jpg"]},
            "pairs",
            [("user", ["IMG", "Q"]), ("assistant", ["A"])],
        ),
        (
            {"images": ["a.jpg"], "text": "[[human]]: <__dj__image>\nWhat?\n[[gpt]]: A cat. <|__dj__eoc|>"},
            "data-juicer",
            [("user", ["IMG", "\nWhat?"]), ("assistant", ["A cat."])],
        ),
        (
            {"images": ["a.jpg"], "text": "<__dj__image> A cat on a sofa. <|__dj__eoc|>"},
            "data-juicer",
            [("user", ["IMG"]), ("assistant", ["A cat on a sofa."])],
        ),
        (  # LLaMA-Factory v1: typed parts keyed "value"
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "value": "a.jpg"}, {"type": "text", "value": "Q"}],
                    },
                    {"role": "assistant", "content": [{"type": "text", "value": "A"}], "loss_weight": 1.0},
                ]
            },
            "openai",
            [("user", ["IMG", "Q"]), ("assistant", ["A"])],
        ),
    ],
)
def test_trainer_layouts_read_as_their_trainer_builds_the_conversation(row, layout, turns):
    sample = parse(row)
    assert detect_layout(row) == layout and sample.layout == layout
    assert not sample.problems, sample.problems
    assert shape(sample) == turns
    assert [ref.path for ref in sample.images] == [
        f"/data/{name}" for name in (["a.jpg", "b.jpg"] if layout == "cauldron" else ["a.jpg"])
    ]


def test_trainer_layouts_can_be_forced():
    assert parse(TRL_ROW, layout="prompt-completion").layout == "prompt-completion"
    sample = parse({"foo": 1}, layout="cauldron")
    assert [p.code for p in sample.problems] == ["VLM101"] and '"texts"' in sample.problems[0].message


def test_anthropic_image_blocks():
    row = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "YWJj"},
                    },
                    {"type": "image", "source": {"type": "url", "url": "https://x.org/a.png"}},
                    {"type": "image", "source": {"type": "path", "path": "a.jpg"}},
                    {"type": "text", "text": "Compare."},
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "Same."}]},
        ]
    }
    sample = parse(row)
    assert not sample.problems
    assert [ref.kind for ref in sample.images] == ["bytes", "url", "file"]
    assert sample.images[0].data == b"abc" and sample.images[2].path == "/data/a.jpg"
    bad = parse(
        {"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file_id"}}]}]}
    )
    assert [p.code for p in bad.problems] == ["VLM101"] and "file_id" in bad.problems[0].message


def test_qwen_vl_utils_per_image_settings_ride_on_the_image_ref():
    row = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image", "image": "file:///data/a.jpg", "max_pixels": 3136, "min_pixels": 784},
                    {"type": "image", "image": "b.jpg", "resized_height": 280, "resized_width": 420},
                    {"type": "image", "image": "c.jpg"},
                    {"type": "text", "text": "Q"},
                ],
            }
        ]
    }
    sample = parse(row)
    assert [ref.sizing for ref in sample.images] == [
        ImageSizing(min_pixels=784, max_pixels=3136),
        ImageSizing(resized_height=280, resized_width=420),
        None,
    ]
    bad = parse(
        {"messages": [{"role": "user", "content": [{"type": "image", "image": "a.jpg", "max_pixels": "x"}]}]}
    )
    assert [p.code for p in bad.problems] == ["VLM101"] and "max_pixels" in bad.problems[0].message


def test_a_row_of_a_mixed_file_that_fits_no_layout_is_vlm102_not_an_empty_alpaca_row():
    sample = parse({"question": "What?", "img": "a.jpg"}, layout="alpaca", from_first_row=True)
    assert [p.code for p in sample.problems] == ["VLM102"]
    assert (
        "['img', 'question']" in sample.problems[0].message
        and "this file's rows are alpaca" in sample.problems[0].message
    )
    # forced with --layout: the row is read as asked
    assert not parse({"instruction": "Q", "output": "A"}, layout="alpaca").problems
    # an alpaca row without its output is still an alpaca row
    assert parse({"instruction": "Q"}, layout="alpaca", from_first_row=True).layout == "alpaca"


def test_a_sharegpt_row_in_a_llava_file_keeps_its_images():
    """A `conversations` + `images` row (LLaMA-Factory's ShareGPT) after LLaVA rows: its images are read,
    not dropped for the file's layout (they were: no image, no finding)."""
    turns = [{"from": "human", "value": "What is this?"}, {"from": "gpt", "value": "A cat."}]
    sample = parse({"conversations": turns, "images": ["a.jpg"]}, layout="llava", from_first_row=True)
    assert len(sample.images) == 1 and not sample.problems


def test_a_misspelt_conversation_is_still_vlm102():
    sample = parse({"id": 2, "image": "a.jpg", "conversation": []})
    assert [p.code for p in sample.problems] == ["VLM102"]


def test_cauldron_pair_without_assistant_is_vlm101():
    sample = parse({"images": ["a.jpg"], "texts": [{"user": "Q"}]})
    assert [p.code for p in sample.problems] == ["VLM101"] and "assistant" in sample.problems[0].message


def test_roles_are_user_and_assistant():
    sample = parse(TRL_ROW)
    assert [m.role for m in sample.messages] == [Role.USER, Role.ASSISTANT]


def _scan_codes(target):
    from vlmlint.readers import iter_samples

    return [[p.code for p in sample.problems] for sample in iter_samples(str(target))]


def test_a_file_holding_one_json_object_is_one_finding_not_one_per_line(tmp_path):
    import json

    config = tmp_path / "preprocessor_config.json"
    config.write_text(
        json.dumps({"image_processor_type": "X", "size": {"height": 1}, "a": [1, 2, 3]}, indent=2)
    )
    assert _scan_codes(config) == [["VLM102"]]


def test_a_dataset_info_json_is_followed_for_its_local_sft_entries():
    from tests.conftest import DATASETS

    samples = _scan_codes(DATASETS / "media" / "dataset_info.json")
    assert samples and all(
        not codes for codes in samples
    )  # the media demos' rows, read as --dataset reads them


def test_an_internvl_meta_file_is_followed_and_its_annotations_not_read_twice():
    from tests.conftest import DATASETS
    from vlmlint.readers import iter_samples

    folder = DATASETS / "layouts21_internvl_meta"
    by_file = [(s.source, s.index, s.problems) for s in iter_samples(str(folder / "meta.json"))]
    assert [(os.path.basename(src), i, p) for src, i, p in by_file] == [
        ("train.jsonl", 0, ()),
        ("train.jsonl", 1, ()),
    ]
    assert len(list(iter_samples(str(folder)))) == 2  # the folder: meta.json's rows, train.jsonl not again
