"""--columns / `columns` (issue 21): rows whose fields have other names, read through LLaMA-Factory's
columns and tags as readers/columns.py maps them. The point of each test: a row read through the map
counts exactly as the same row written in the standard layout (same Sample, same tokens), in JSONL,
parquet and a folder, from the flag or the config file; and a map naming no field says so."""

from __future__ import annotations

import json
import pickle

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image
from typer.testing import CliRunner

from tests.conftest import PROCESSORS
from vlmlint.cli import app
from vlmlint.config import ConfigError, build_config
from vlmlint.readers import LAYOUTS, DatasetError, ReadOptions, RowBatch, read_dataset
from vlmlint.readers.columns import ColumnMap, ColumnsError, check_columns
from vlmlint.readers.layouts import ImageResolver, row_to_sample

MODEL = str(PROCESSORS / "qwen2-vl-small")
runner = CliRunner()

ISSUE_MAP = "messages=conv,images=imgs,role=speaker,content=text,user=human,assistant=bot"


def mapped_row(i: int) -> dict:
    return {
        "uid": f"r{i}",
        "conv": [
            {"speaker": "human", "text": f"<image>What is in picture {i}?"},
            {"speaker": "bot", "text": "A red square." * (i + 1)},
        ],
        "imgs": ["a.jpg"],
    }


def standard_row(i: int) -> dict:
    return {
        "uid": f"r{i}",
        "messages": [
            {"role": "user", "content": f"<image>What is in picture {i}?"},
            {"role": "assistant", "content": "A red square." * (i + 1)},
        ],
        "images": ["a.jpg"],
    }


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


@pytest.fixture
def folder(tmp_path):
    Image.new("RGB", (640, 480), "red").save(tmp_path / "a.jpg")
    Image.new("RGB", (300, 200), "blue").save(tmp_path / "b.png")
    return tmp_path


def scan(*args):
    return runner.invoke(app, ["scan", *args])


def counts(result):
    """Each row's (seq_len, text_tokens, image_tokens, finding codes) from --format jsonl --all-rows."""
    assert result.exit_code in (0, 1), result.output
    rows = [orjson.loads(line) for line in result.stdout.splitlines()]
    return [(r["seq_len"], r["text_tokens"], r["image_tokens"], list(r["findings"])) for r in rows]


def all_rows(path, *extra):
    return scan(path, "--model", MODEL, "--format", "jsonl", "--all-rows", "--verify", "0", *extra)


def shape(sample):
    turns = [
        (m.role.value, ["IMG" if p.is_image else p.media or p.text for p in m.parts]) for m in sample.messages
    ]
    return turns, [ref.reference for ref in sample.images], [ref.reference for ref in sample.media]


# ---- the map itself ---------------------------------------------------------------------------


def test_keys_short_and_full_names_in_order():
    assert check_columns(ISSUE_MAP) == {
        "messages": "conv",
        "images": "imgs",
        "role_tag": "speaker",
        "content_tag": "text",
        "user_tag": "human",
        "assistant_tag": "bot",
    }
    assert check_columns({"role-tag": "r", "system_tag": "sys", "system": "s"}) == {
        "role_tag": "r",
        "system_tag": "sys",
        "system": "s",
    }
    assert ColumnMap.of("") is None and ColumnMap.of({}) is None
    assert ColumnMap.of("prompt=q,response=a").mode == "alpaca"
    assert ColumnMap.of("images=pics,system=sys").mode == "rename"
    assert ColumnMap.of("role=speaker").mode == "sharegpt"


@pytest.mark.parametrize(
    "value,message",
    [
        ("speaker=role", "unknown columns key 'speaker'; known: prompt, query, response, history, messages"),
        ("messages", "KEY=VALUE"),
        ("messages=", "must name a field"),
        ("role=a,role_tag=b", "given twice"),
        ("messages=conv,prompt=q", "mixes conversation keys"),
        (3, "must be a table"),
        ({"messages": 3}, "must name a field"),
    ],
)
def test_bad_maps_are_refused(value, message):
    with pytest.raises(ColumnsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_columns(value)
    with pytest.raises(ConfigError):
        build_config("d", {"columns": value}, {})


def test_unknown_key_lists_every_known_one():
    with pytest.raises(ColumnsError) as error:
        check_columns("speaker=role")
    for key in ("messages", "images", "videos", "role (role_tag)", "assistant (assistant_tag)", "system_tag"):
        assert key in str(error.value)


def test_the_map_pickles_and_travels_in_row_batches(folder):
    path = write_jsonl(folder / "m.jsonl", [mapped_row(i) for i in range(5)])
    options = ReadOptions(columns=ColumnMap.of(ISSUE_MAP))
    whole = [shape(s) for s in read_dataset(path, options)]
    units = list(read_dataset(path, ReadOptions(columns=options.columns, batch_rows=2)))
    assert any(isinstance(unit, RowBatch) for unit in units)  # batched: the map went with the rows
    batched = [
        shape(s)
        for unit in units
        for s in (pickle.loads(pickle.dumps(unit)).samples() if isinstance(unit, RowBatch) else [unit])
    ]
    assert batched == whole and len(whole) == 5


# ---- a mapped row reads as its standard twin --------------------------------------------------

RESOLVE = ImageResolver("/data")


def parse(row, columns=None):
    return row_to_sample(
        row, layout=None, resolve=RESOLVE, source="m.jsonl", index=0, convert=columns, from_first_row=True
    )


TWINS = [
    (  # ShareGPT with other names (the issue's example)
        ISSUE_MAP,
        mapped_row(0),
        standard_row(0),
    ),
    (  # a system turn under its own tag
        "messages=dialog,role=who,content=says,user=q,assistant=a,system_tag=rules",
        {
            "dialog": [
                {"who": "rules", "says": "Be brief."},
                {"who": "q", "says": "<image>Hi"},
                {"who": "a", "says": "Yo"},
            ]
        },
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "<image>Hi"},
                {"role": "assistant", "content": "Yo"},
            ]
        },
    ),
    (  # messages named only: the row's own role/content tags
        "messages=chat,images=pics",
        {
            "chat": [{"role": "user", "content": "<image>Hi"}, {"role": "assistant", "content": "Yo"}],
            "pics": ["a.jpg"],
        },
        {
            "messages": [{"role": "user", "content": "<image>Hi"}, {"role": "assistant", "content": "Yo"}],
            "images": ["a.jpg"],
        },
    ),
    (  # messages named only: LLaMA-Factory's from/value with human/gpt
        "messages=chat",
        {
            "chat": [{"from": "human", "value": "<image>Hi"}, {"from": "gpt", "value": "Yo"}],
            "images": ["a.jpg"],
        },
        {
            "conversations": [{"from": "human", "value": "<image>Hi"}, {"from": "gpt", "value": "Yo"}],
            "images": ["a.jpg"],
        },
    ),
    (  # typed content parts (OpenAI) pass through the tags unchanged
        "messages=turns,role=r,content=c,user=u,assistant=m",
        {
            "turns": [
                {"r": "u", "c": [{"type": "image", "image": "a.jpg"}, {"type": "text", "text": "Hi"}]},
                {"r": "m", "c": "Yo"},
            ]
        },
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image", "image": "a.jpg"}, {"type": "text", "text": "Hi"}],
                },
                {"role": "assistant", "content": "Yo"},
            ]
        },
    ),
    (  # alpaca-style with other names: prompt and query joined by a newline, history pairs
        "prompt=question,query=context,response=reply,history=before,images=pics,system=sys",
        {
            "sys": "S",
            "before": [["<image>Earlier?", "Yes."]],
            "question": "Now?",
            "context": "ctx",
            "reply": "No.",
            "pics": ["a.jpg"],
        },
        {
            "messages": [
                {"role": "system", "content": "S"},
                {"role": "user", "content": "<image>Earlier?"},
                {"role": "assistant", "content": "Yes."},
                {"role": "user", "content": "Now?\nctx"},
                {"role": "assistant", "content": "No."},
            ],
            "images": ["a.jpg"],
        },
    ),
    (  # alpaca map: unnamed columns are the alpaca layout's own
        "response=answer",
        {"instruction": "<image>Describe.", "input": "", "answer": "A cat.", "images": ["a.jpg"]},
        {"instruction": "<image>Describe.", "input": "", "output": "A cat.", "images": ["a.jpg"]},
    ),
    (  # rename map: media columns only; the row keeps its layout (TRL prompt-completion here)
        "images=pictures,videos=clips",
        {"prompt": "<image><video>What?", "completion": "A cat.", "pictures": ["a.jpg"], "clips": ["v.mp4"]},
        {"prompt": "<image><video>What?", "completion": "A cat.", "images": ["a.jpg"], "videos": ["v.mp4"]},
    ),
]


@pytest.mark.parametrize("spec,mapped,standard", TWINS)
def test_a_mapped_row_reads_as_its_standard_twin(spec, mapped, standard):
    sample = parse(mapped, ColumnMap.of(spec))
    assert not sample.problems, sample.problems
    assert shape(sample) == shape(parse(standard))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    names=st.lists(
        st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8), min_size=6, max_size=6, unique=True
    ),
    turns=st.lists(
        st.tuples(st.integers(0, 2), st.text(max_size=20), st.text(max_size=20)), min_size=1, max_size=4
    ),
    images=st.integers(0, 3),
)
def test_any_names_read_as_the_standard_row(names, turns, images):
    conv, imgs, role, content, user, bot = names
    texts = [("<image>" * (n if k == 0 else 0)) + q for k, (n, q, _) in enumerate(turns)]
    mapped = {
        conv: [
            turn
            for text, (_, _, answer) in zip(texts, turns, strict=True)
            for turn in ({role: user, content: text}, {role: bot, content: answer})
        ],
        imgs: [f"i{k}.jpg" for k in range(images)],
    }
    standard = {
        "messages": [
            turn
            for text, (_, _, answer) in zip(texts, turns, strict=True)
            for turn in ({"role": "user", "content": text}, {"role": "assistant", "content": answer})
        ],
        "images": [f"i{k}.jpg" for k in range(images)],
    }
    spec = {
        "messages": conv,
        "images": imgs,
        "role": role,
        "content": content,
        "user": user,
        "assistant": bot,
    }
    got, want = parse(mapped, ColumnMap.of(spec)), parse(standard)
    assert shape(got) == shape(want)
    assert [p.code for p in got.problems] == [p.code for p in want.problems]


# ---- unknown names ------------------------------------------------------------------------------


def test_a_row_without_the_mapped_fields_is_a_finding_listing_its_fields():
    columns = ColumnMap.of(ISSUE_MAP)
    odd = parse({"id": "x", "dialog": [], "pictures": []}, columns)
    assert [p.code for p in odd.problems] == ["VLM102"]
    assert (
        "['dialog', 'id', 'pictures']" in odd.problems[0].message
        and "--columns messages=conv" in odd.problems[0].message
    )
    lacking = parse({"id": "y", "imgs": ["a.jpg"], "dialog": []}, columns)
    assert [p.code for p in lacking.problems] == ["VLM101"]
    assert (
        'no "conv" field' in lacking.problems[0].message
        and "['dialog', 'id', 'imgs']" in lacking.problems[0].message
    )
    no_text = parse({"conv": [{"speaker": "human", "words": "hi"}]}, columns)
    assert [p.code for p in no_text.problems] == ["VLM101"]
    assert "turn 0 has no \"text\"; its fields: ['speaker', 'words']" in no_text.problems[0].message
    wrong_role = parse({"conv": [{"speaker": "user", "text": "hi"}]}, columns)
    assert [p.code for p in wrong_role.problems] == ["VLM101"] and "speaker 'user'" in wrong_role.problems[
        0
    ].message


def test_a_first_row_without_any_mapped_field_stops_the_scan(folder):
    path = write_jsonl(folder / "data.jsonl", [standard_row(0), mapped_row(1)])
    with pytest.raises(
        DatasetError, match=r"names no field of the first row; its fields: \['images', 'messages', 'uid'\]"
    ):
        list(read_dataset(path, ReadOptions(columns=ColumnMap.of(ISSUE_MAP))))
    result = scan(path, "--model", MODEL, "--columns", ISSUE_MAP)
    assert result.exit_code == 2
    assert "names no field of the first row; its fields: ['images', 'messages', 'uid']" in result.stderr


def test_later_rows_of_a_mixed_file_are_vlm102(folder):
    path = write_jsonl(folder / "data.jsonl", [mapped_row(0), standard_row(1), mapped_row(2)])
    got = counts(all_rows(path, "--columns", ISSUE_MAP))
    assert [codes for *_, codes in got] == [[], ["VLM102"], []]


# ---- the command line and the config file, JSONL, parquet and a folder --------------------------


def test_jsonl_through_the_flag_counts_as_the_standard_file(folder):
    mapped = write_jsonl(folder / "mapped.jsonl", [mapped_row(i) for i in range(3)])
    standard = write_jsonl(folder / "standard.jsonl", [standard_row(i) for i in range(3)])
    want = counts(all_rows(standard))
    assert want and all(codes == [] and tokens for _, _, tokens, codes in want)
    assert counts(all_rows(mapped, "--columns", ISSUE_MAP)) == want


def test_alpaca_file_with_other_names(folder):
    rows = [{"q": f"<image>Describe {i}.", "a": "Red." * i, "pics": ["b.png"]} for i in range(1, 3)]
    standard = [{"instruction": r["q"], "output": r["a"], "images": r["pics"]} for r in rows]
    got = counts(
        all_rows(write_jsonl(folder / "m.jsonl", rows), "--columns", "prompt=q,response=a,images=pics")
    )
    assert got == counts(all_rows(write_jsonl(folder / "s.jsonl", standard)))


def _parquet(path, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def test_parquet_with_other_column_names(folder):
    mapped = _parquet(folder / "mapped.parquet", [mapped_row(i) for i in range(3)])
    standard = write_jsonl(folder / "standard.jsonl", [standard_row(i) for i in range(3)])
    want = counts(all_rows(standard))
    assert counts(all_rows(mapped, "--columns", ISSUE_MAP)) == want
    assert counts(all_rows(mapped, "--columns", ISSUE_MAP, "--jobs", "2")) == want  # rows go to a worker


def test_a_folder_of_files_each_read_through_the_map(folder):
    data = folder / "data"
    data.mkdir()
    Image.new("RGB", (640, 480), "red").save(data / "a.jpg")
    write_jsonl(data / "part-0.jsonl", [mapped_row(0), mapped_row(1)])
    _parquet(data / "part-1.parquet", [mapped_row(2)])
    standard = write_jsonl(data.parent / "standard.jsonl", [standard_row(i) for i in range(3)])
    (folder / "a.jpg").unlink(missing_ok=True)
    Image.new("RGB", (640, 480), "red").save(folder / "a.jpg")
    assert counts(all_rows(str(data), "--columns", ISSUE_MAP)) == counts(all_rows(standard))


def test_config_file_columns_and_the_flag_replacing_them(folder, monkeypatch):
    write_jsonl(folder / "mapped.jsonl", [mapped_row(0)])
    standard = counts(all_rows(write_jsonl(folder / "standard.jsonl", [standard_row(0)])))
    (folder / "vlmlint.toml").write_text(
        'columns = { messages = "conv", images = "imgs", role = "speaker", content = "text", '
        'user = "human", assistant = "bot" }\n'
    )
    monkeypatch.chdir(folder)
    assert counts(all_rows("mapped.jsonl")) == standard
    shown = runner.invoke(app, ["config"])
    assert shown.exit_code == 0, shown.output
    assert (
        'columns = {"messages" = "conv", "images" = "imgs", "role_tag" = "speaker", "content_tag" = "text", '
        '"user_tag" = "human", "assistant_tag" = "bot"}  # file'
    ) in shown.stdout.splitlines()
    flag = runner.invoke(app, ["config", "--columns", "messages=dialog"])
    assert 'columns = {"messages" = "dialog"}  # flag' in flag.stdout.splitlines()
    # the flag's map replaces the file's: this one names no field of the row
    wrong = scan("mapped.jsonl", "--model", MODEL, "--columns", "messages=dialog")
    assert wrong.exit_code == 2 and "its fields: ['conv', 'imgs', 'uid']" in wrong.stderr


def test_unknown_key_in_the_config_file_exits_2(folder, monkeypatch):
    write_jsonl(folder / "mapped.jsonl", [mapped_row(0)])
    (folder / "vlmlint.toml").write_text('columns = { speaker = "role" }\n')
    monkeypatch.chdir(folder)
    result = scan("mapped.jsonl", "--model", MODEL)
    assert result.exit_code == 2 and "unknown columns key 'speaker'; known: prompt" in result.stderr


@pytest.mark.parametrize(
    "extra,message",
    [
        (("--layout", "llava"), "converts rows to the sharegpt layout"),
        (("--dataset", "x"), "--columns and --dataset"),
    ],
)
def test_settings_the_map_cannot_meet_exit_2(folder, extra, message):
    result = scan(
        write_jsonl(folder / "m.jsonl", [mapped_row(0)]), "--model", MODEL, "--columns", ISSUE_MAP, *extra
    )
    assert result.exit_code == 2 and message in result.stderr


def test_the_python_api_reads_through_the_map(folder, monkeypatch):
    import vlmlint

    monkeypatch.chdir(folder)
    mapped = vlmlint.check_rows([mapped_row(0)], {"model": MODEL, "columns": ISSUE_MAP})
    standard = vlmlint.check_rows([standard_row(0)], {"model": MODEL})
    assert [(o.result.seq_len, o.result.image_tokens, o.findings) for o in mapped] == [
        (o.result.seq_len, o.result.image_tokens, o.findings) for o in standard
    ]


def test_every_layout_is_named_where_layouts_are_listed():
    import vlmlint.api
    from vlmlint.settings import SETTINGS_BY_NAME

    help_text = SETTINGS_BY_NAME["layout"].help
    for name in LAYOUTS:
        assert name in help_text and name in vlmlint.api.__doc__
