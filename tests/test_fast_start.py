"""Built-in Qwen-VL profiles loaded without transformers (vlmlint/models/light.py, vlmlint/template_env.py) give what transformers gives.

Each side is real: the light model against load_model's ordinary path (AutoTokenizer, AutoImageProcessor,
transformers' own chat template environment) on the same profile folder; whole scans of every fixture
dataset compared outcome by outcome; hypothesis-made conversations rendered by both template
environments and counted by both tokenizers; and a scan in a fresh process that imports no transformers.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import DATASETS, ROOT
from vlmlint import template_env
from vlmlint.config import ScanConfig
from vlmlint.engine import Scanner, _foreign_placeholders, _special_tokens, _token_id
from vlmlint.models import LightModel, light, load_model

pytestmark = pytest.mark.skipif(
    template_env.installed_transformers() not in template_env.LIGHT_TRANSFORMERS,
    reason="light path covers another release",
)
PROFILES = ("qwen2-vl", "qwen2.5-vl", "qwen3-vl")
_models: dict[tuple[str, bool], object] = {}


def model(name: str, is_light: bool):
    key = (name, is_light)
    if key not in _models:
        _models[key] = load_model(name, light=is_light)
    return _models[key]


@pytest.mark.parametrize("name", PROFILES)
def test_light_model_is_the_transformers_model(name):
    fast, real = model(name, True), model(name, False)
    assert isinstance(fast, LightModel) and not isinstance(real, LightModel)
    assert fast.describe() == real.describe()
    for attr in ("settings", "video_settings", "video_refusal", "chat_template", "max_position_embeddings",
                 "processor_class", "image_processor_type", "profile", "checkpoint", "text_tokens_estimated"):  # fmt: skip
        assert getattr(fast, attr) == getattr(real, attr), attr
    assert fast.family.placeholder == real.family.placeholder
    a, b = fast.tokenizer, real.tokenizer
    assert a.special_tokens_map == b.special_tokens_map
    assert a.all_special_tokens == b.all_special_tokens
    assert a.image_token == getattr(b, "image_token", None)
    assert (a.bos_token, a.unk_token, a.unk_token_id, a.model_max_length) == (
        b.bos_token, b.unk_token, b.unk_token_id, b.model_max_length,
    )  # fmt: skip
    fields = ("content", "special", "normalized", "lstrip", "rstrip", "single_word")
    assert {i: tuple(getattr(t, f) for f in fields) for i, t in a.added_tokens_decoder.items()} == {
        i: tuple(getattr(t, f) for f in fields) for i, t in b.added_tokens_decoder.items()
    }
    assert _special_tokens(a) == _special_tokens(b)
    assert _foreign_placeholders(fast.family, a) == _foreign_placeholders(real.family, b)
    assert _token_id(a, fast.family.placeholder) == _token_id(b, real.family.placeholder)
    assert "transformers" not in type(a).__module__


@pytest.mark.parametrize("name", PROFILES)
def test_lazy_parts_are_the_real_ones(name):
    """--exact and the self-check get the image processor load_model gives; other tokenizer calls the real one."""
    fast = load_model(name, light=True)
    real = model(name, False)
    assert fast.describe()["image_processor"] == type(real.image_processor).__name__
    assert type(fast.image_processor) is type(real.image_processor)
    assert fast.image_processor.to_dict() == real.image_processor.to_dict()
    assert fast.describe() == real.describe()
    text = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Hi 你好<|im_end|>"
    assert (
        fast.tokenizer(text, return_offsets_mapping=True)["offset_mapping"]
        == real.tokenizer(text, return_offsets_mapping=True)["offset_mapping"]
    )


def _datasets():
    return sorted(p.name for p in DATASETS.iterdir() if p.is_dir() and not p.name.startswith("_"))


def _outcomes(config: ScanConfig, chosen):
    try:
        return [outcome for outcome in Scanner(config, model=chosen).scan()]
    except Exception as exc:  # noqa: BLE001 (a dataset the default settings refuse: both sides must)
        return f"{type(exc).__name__}: {exc}"


@pytest.mark.parametrize("name", PROFILES)
def test_scans_of_every_fixture_dataset_are_identical(name):
    """Every fixture dataset scanned with the light model and with the transformers model: the same
    outcomes, row by row (counts, lengths, findings), in the same order."""
    compared = rows = counted = 0
    for dataset in _datasets():
        config = ScanConfig(dataset=str(DATASETS / dataset), model=name, jobs=1)
        fast, real = _outcomes(config, model(name, True)), _outcomes(config, model(name, False))
        assert fast == real, dataset
        compared += 1
        rows += len(fast) if isinstance(fast, list) else 0
        counted += sum(getattr(o.result, "seq_len", None) is not None for o in fast if isinstance(fast, list))
    assert compared >= 25 and rows >= 250 and counted >= 200, (compared, rows, counted)


@pytest.mark.parametrize("name", PROFILES)
def test_rows_over_the_limit_are_identical(name):
    """A small max_length: every counted row overflows, so image spans come from the tokenizer's offsets
    (the light tokenizer hands that call to the real one)."""
    for dataset in ("demo", "llava", "media"):
        config = ScanConfig(dataset=str(DATASETS / dataset), model=name, jobs=1, max_length=64)
        fast, real = _outcomes(config, load_model(name, light=True)), _outcomes(config, model(name, False))
        assert isinstance(fast, list) and fast == real, dataset
        if dataset != "media":  # (its rows' images are few; its videos have no spans)
            assert any(getattr(o.result, "image_spans", None) for o in fast), dataset


_piece = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12) | st.sampled_from(
    ["<image>", "<|image_pad|>", "\n", " ", "<|im_end|>", "e\u0301", "你好"]
)
_text = st.lists(_piece, max_size=5).map("".join)
_part = st.one_of(st.builds(lambda t: {"type": "text", "text": t}, _text), st.just({"type": "image"}))
_message = st.builds(
    lambda role, parts, reasoning: {
        "role": role,
        "content": parts,
        **({"reasoning_content": reasoning} if reasoning else {}),
    },
    st.sampled_from(["system", "user", "assistant"]),
    st.lists(_part, min_size=1, max_size=4),
    st.none() | _text,
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_message, min_size=1, max_size=4), st.booleans(), st.sampled_from(PROFILES))
def test_hypothesis_conversations_render_and_count_the_same(messages, generation_prompt, name):
    """transformers' own environment and data preparation against template_env.py's copy, on the profile's
    template; then the light counter against the transformers tokenizer's input_ids."""
    from transformers.utils import chat_template_utils as utils

    template = model(name, False).chat_template
    kwargs = model(name, False).tokenizer.special_tokens_map

    def render(compile_, prepare, prepare_kwargs):
        try:
            return compile_(template).render(
                messages=prepare(messages), tools=None, documents=None,
                add_generation_prompt=generation_prompt, **prepare_kwargs(kwargs),
            )  # fmt: skip
        except Exception as exc:  # noqa: BLE001 (a template's raise_exception: the same on both sides)
            return f"{type(exc).__name__}: {exc}"

    theirs = render(
        utils._cached_compile_jinja_template,
        lambda chat: utils._alias_reasoning_fields(utils._plain_template_data(chat)),
        utils._plain_template_data,
    )
    ours = render(
        template_env.compile_jinja_template,
        lambda chat: template_env.alias_reasoning_fields(template_env.plain_template_data(chat)),
        template_env.plain_template_data,
    )
    assert ours == theirs
    texts = [theirs, *(p["text"] for m in messages for p in m["content"] if "text" in p)]
    counter = model(name, True).tokenizer.length_counter()
    real = model(name, False).tokenizer
    assert counter(texts) == [len(ids) for ids in real(texts, add_special_tokens=False)["input_ids"]]


def test_a_scan_with_a_built_in_profile_imports_no_transformers(tmp_path):
    """The pre-commit case: `vlmlint scan m.jsonl --verify 0` in a fresh process, default profile."""
    (tmp_path / "images").mkdir()
    image = next((DATASETS / "demo" / "images").glob("*.jpg"))
    (tmp_path / "images" / image.name).write_bytes(image.read_bytes())
    rows = [
        {"image": f"images/{image.name}", "conversations": [
            {"from": "human", "value": f"<image>\nRow {i}?"}, {"from": "gpt", "value": "An answer."}]}
        for i in range(100)
    ]  # fmt: skip
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    code = (
        "import sys\n"
        "sys.argv = ['vlmlint', 'scan', 'm.jsonl', '--verify', '0', '--format', 'json']\n"
        "from vlmlint.cli import main\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    code = exc.code\n"
        "print('TRANSFORMERS' if 'transformers' in sys.modules else 'NO-TRANSFORMERS', code, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert "NO-TRANSFORMERS 0" in done.stderr, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["model"]["tokenizer"] == "Qwen2Tokenizer"


def test_the_ranks_cache_is_tiktokens_own_reading(tmp_path, monkeypatch):
    """qwen_ranks: load_tiktoken_bpe's dict, kept as a marshal file; a damaged file is read again."""
    from tiktoken.load import load_tiktoken_bpe

    from vlmlint.models.profiles import qwen_bpe_file

    monkeypatch.setenv("VLMLINT_CACHE", str(tmp_path))
    expected = load_tiktoken_bpe(str(qwen_bpe_file()[0]))
    assert light.qwen_ranks() == expected  # built
    assert light._ranks_file().is_file()
    assert light.qwen_ranks() == expected  # read back
    light._ranks_file().write_bytes(b"\x00damaged")
    assert light.qwen_ranks() == expected
    assert light.qwen_ranks() == expected


def test_video_config_class_index_is_the_full_parse():
    """video_config parses a transformers file only when one of its classes is asked for: the classes it
    gives are those a parse of every file gives (the first top-level definition of each name)."""
    import ast

    from vlmlint.models import video_config

    full: dict[str, ast.ClassDef] = {}
    for path in video_config._class_paths():
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError):
            continue
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                full.setdefault(node.name, node)
    lazy = video_config._Classes(video_config._class_paths())
    assert len(full) > 30
    assert sorted(lazy) == sorted(full)
    assert all(ast.dump(lazy[name]) == ast.dump(node) for name, node in full.items())
    assert "NoSuchVideoProcessor" not in lazy and "Qwen2VLVideoProcessor" in lazy
