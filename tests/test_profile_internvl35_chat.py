"""The internvl3.5-chat profile (OpenGVLab/InternVL3_5-8B, the non-hf checkpoint) with `--pipeline internvl`.

Its tokenizer is the internvl3.5 profile's without `<video>` (the tokens internvl_chat_finetune.py adds,
in its order), its template InternVL's 'internvl2_5' conversation. The rows of
tests/trainers/internvl_truth.json (recorded from preprocess_internvl2_5 and dynamic_preprocess by
tests/trainers/record_internvl.py) must count as the script counts them: image tokens, the fate and,
since the template renders the text the script tokenizes, the raw sequence length too.
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from tests.conftest import DATASETS
from tests.test_pipeline_internvl import TRUTH, _rows  # the same recorded rows, written as files
from vlmlint.cli import app
from vlmlint.models import load_model, profiles
from vlmlint.pipelines.internvl import SYSTEM_MESSAGE

runner = CliRunner()


@pytest.fixture(scope="module")
def chat():
    return load_model("internvl3.5-chat")


def test_profile_loads_with_the_scripts_tokens(chat):
    assert chat.family.name == "internvl" and chat.text_tokens_estimated is None
    tokenizer = chat.tokenizer
    provenance = json.loads(
        (Path(profiles.__file__).parent / "profile_data" / "internvl3.5-chat" / "provenance.json").read_text()
    )
    for token, token_id in provenance["checkpoint_token_ids"].items():
        assert tokenizer.convert_tokens_to_ids(token) == token_id, token
    assert len(tokenizer("<video>")["input_ids"]) == 3  # plain text in the chat checkpoint
    hf = load_model("internvl3.5").tokenizer
    text = "Image-1: <img><IMG_CONTEXT></img>\n你好，世界 <box>[[1, 2, 3, 4]]</box> The quick brown fox."
    assert tokenizer(text)["input_ids"] == hf(text)["input_ids"]


def test_template_is_the_internvl2_5_conversation(chat):
    from vlmlint.counting import TextEncoder
    from vlmlint.records import Message, Part, Role

    encoder = TextEncoder(chat, chat.chat_template, False)
    messages = (
        Message(Role.USER, (Part(is_image=True), Part(text="\nWhat?"))),
        Message(Role.ASSISTANT, (Part(text="A cat."),)),
    )
    assert encoder.render(messages) == (
        f"<|im_start|>system\n{SYSTEM_MESSAGE}<|im_end|>\n<|im_start|>user\n<IMG_CONTEXT>\nWhat?<|im_end|>\n"
        "<|im_start|>assistant\nA cat.<|im_end|>\n"
    )
    system = (Message(Role.SYSTEM, (Part(text="Be brief."),)), *messages)
    assert encoder.render(system).startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n")


def _scan(path: Path, *options: str) -> list[dict]:
    args = ["scan", str(path), "--model", "internvl3.5-chat", "--pipeline", "internvl", "--format", "jsonl"]
    for option in options:
        args += ["--pipeline-option", option]
    result = runner.invoke(app, [*args, "--all-rows", "--verify", "0"])
    assert result.exit_code in (0, 1), result.output
    return [orjson.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("limit", [16384, 2500, 900])
def test_rows_count_as_internvls_script(tmp_path, limit):
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in _rows(tmp_path)))
    outcomes = _scan(path, f"max_seq_length={limit}")
    assert len(outcomes) == len(TRUTH["rows"])
    for outcome, recorded in zip(outcomes, TRUTH["rows"], strict=True):
        assert outcome["image_tokens"] == recorded["image_tokens"]
        full = recorded["runs"][-1]  # 16384: nothing cut
        assert outcome["seq_len"] == full["length"], outcome["index"]  # the template is the script's text
        run = next(r for r in recorded["runs"] if r["max_seq_length"] == limit)
        assert outcome["trainer"]["length"] == run["length"], outcome["index"]
        if run["img_end"] < len(recorded["image_tokens"]):
            assert outcome["trainer"]["status"] == "dropped"
        elif run["length"] < full["length"]:
            assert outcome["trainer"]["status"] == "truncated"
        else:
            assert outcome["trainer"]["status"] == "kept"


def test_cli_scan_of_the_internvl_meta_fixture():
    outcomes = _scan(DATASETS / "layouts21_internvl_meta" / "meta.json")
    assert outcomes and all(o["trainer"]["status"] == "kept" for o in outcomes)
    assert all(o["seq_len"] == o["trainer"]["length"] for o in outcomes)
    assert not [code for o in outcomes for code in o["findings"] if code.startswith(("VLM1", "VLM3"))]
