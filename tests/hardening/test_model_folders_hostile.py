"""Hostile model folders: absurd settings, huge or deep files, links out of the folder, runaway templates.

In CI `--model` may point into the pull request (a discovered config's `model = "proc"`), so a model
folder is as untrusted as the data. Each case must end with the model refused in one line (exit 2,
naming the file or key and the bound) or, for a template that runs away on one row only, a VLM101
finding on that row, with no traceback, nothing read outside, and bounded time and memory.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import PROCESSORS
from tests.hardening.conftest import run_guarded, shape, time_limit
from vlmlint.models import CountError, ModelError, load_model
from vlmlint.models.files import MAX_CONFIG_BYTES, MAX_TOKENIZER_BYTES, MAX_TOKENIZER_ENTRIES
from vlmlint.templates import MAX_RENDER_ITERATIONS, MAX_RENDER_SECONDS

QWEN = PROCESSORS / "qwen2-vl-small"
ROWS = [
    {"messages": [{"role": "user", "content": "first row"}, {"role": "assistant", "content": "fine"}]},
    {"messages": [{"role": "user", "content": "EVIL " * 40}, {"role": "assistant", "content": "answer"}]},
    {"messages": [{"role": "user", "content": "third row"}, {"role": "assistant", "content": "fine"}]},
]


def folders(tmp_path: Path, source: Path = QWEN) -> tuple[Path, Path, Path]:
    """tmp/dataset (3 text rows), tmp/outside and tmp/proc, a copy of a fixture processor folder."""
    dataset, outside, proc = tmp_path / "dataset", tmp_path / "outside", tmp_path / "proc"
    dataset.mkdir()
    outside.mkdir()
    shutil.copytree(source, proc)
    (dataset / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    return dataset, outside, proc


def scan(tmp_path: Path, proc: Path, dataset: Path, timeout: float = 90):
    run = run_guarded(
        "scan", str(dataset), "--model", str(proc), "--format", "json", "--jobs", "1", timeout=timeout
    )
    assert run.peak_mb < 1024, run.peak_mb
    return run


def refusal(run, tmp_path: Path) -> str:
    assert run.exit_code == 2, run.stderr[-2000:]
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, run.stderr  # one line, not a traceback or a cascade
    return shape(run.error_line(tmp_path), tmp_path)


# ---- 1. absurd settings: every family, every key it reads, every kind of wrong value -------------

FAMILY_FOLDERS = {
    "qwen-vl": "qwen2-vl-small",
    "llava": "llava-1.5-7b",
    "llava-next": "llava-v1.6-mistral-7b",
    "llava-onevision": "llava-onevision-qwen2-7b-ov",
    "idefics3": "smolvlm-256m-instruct",
    "paligemma": "paligemma-3b-pt-224",
    "gemma3": "gemma-3-4b-it",
    "internvl": "internvl3-1b-hf",
    "pixtral": "pixtral-12b",
    "mllama": "llama-3.2-11b-vision-instruct",
    "vision-encoder": "vit-base-patch16-224",
}
BAD_VALUES = (0, -1, 1.5, "x", 2**70, None, [1])
SIZES = ((100, 80), (1000, 30), (5000, 5000), (28, 28))


def _keys(config: dict) -> list[tuple[str, ...]]:
    keys = [(key,) for key in config]
    keys += [(key, sub) for key, value in config.items() if isinstance(value, dict) for sub in value]
    return keys


@pytest.mark.parametrize("family", sorted(FAMILY_FOLDERS))
def test_absurd_settings_are_refused_with_the_key(tmp_path, family, record):
    """Each key of the family's preprocessor_config.json set to each bad value: a ModelError naming
    the key, or a model that counts (CountError at most) — never another exception."""
    source = PROCESSORS / FAMILY_FOLDERS[family]
    config = json.loads((source / "preprocessor_config.json").read_text())
    refused = loaded = 0
    unnamed: list[str] = []
    with time_limit(240, f"{family}: the settings matrix"):
        for key in _keys(config):
            for bad in BAD_VALUES:
                proc = tmp_path / "proc"
                shutil.rmtree(proc, ignore_errors=True)
                shutil.copytree(source, proc)
                corrupt = json.loads(json.dumps(config))
                target = corrupt
                for part in key[:-1]:
                    target = target[part]
                target[key[-1]] = bad
                (proc / "preprocessor_config.json").write_text(json.dumps(corrupt))
                try:
                    model = load_model(str(proc))
                except ModelError as exc:
                    message = str(exc)
                    assert "\n" not in message and "Traceback" not in message, message
                    if key[-1] not in message and key[0] not in message:
                        unnamed.append(f"{'.'.join(key)}={bad!r}: {message}")
                    refused += 1
                    continue
                for height, width in SIZES:  # what loaded must count: no ZeroDivisionError, no OverflowError
                    try:
                        model.family.count(height, width, model.settings)
                    except CountError:
                        pass
                loaded += 1
    # The few that do not name the key: an unknown class name (said as the class), or a null that
    # transformers itself cannot take (its one-line reason).
    assert len(unnamed) <= 2, unnamed
    record(
        "models",
        f'{family}: each preprocessor_config.json key set to 0, -1, 1.5, "x", 2**70, null, a list',
        "refused in one line naming the key and value (exit 2; an unknown class name or a null transformers "
        "cannot take: its one-line reason), or loaded and counted (null, values the family does not read); "
        "no ZeroDivisionError, OverflowError or internal error",
    )


SETTING_CASES = {
    "patch_size 0": ("patch_size", 0),
    "merge_size 0": ("merge_size", 0),
    "merge_size huge (2**40)": ("merge_size", 2**40),
    "max_pixels negative": ("max_pixels", -1),
    "max_pixels beyond 64 bits": ("max_pixels", 2**70),
    "patch_size a float (1.5)": ("patch_size", 1.5),
    "image_mean of 2 numbers": ("image_mean", [0.5, 0.5]),
    "resample 99": ("resample", 99),
    "image_processor_type an int": ("image_processor_type", 7),
}


@pytest.mark.parametrize("case", sorted(SETTING_CASES))
def test_absurd_setting_end_to_end(tmp_path, case, record):
    key, value = SETTING_CASES[case]
    dataset, outside, proc = folders(tmp_path)
    config = json.loads((proc / "preprocessor_config.json").read_text())
    config[key] = value
    (proc / "preprocessor_config.json").write_text(json.dumps(config))
    run = scan(tmp_path, proc, dataset)
    line = refusal(run, tmp_path)
    assert key in line, line
    assert run.touched(outside) == []
    record("models", f"Qwen2-VL folder: {case}", f"exit 2: {line}")


def test_deep_preprocessor_config(tmp_path, record):
    dataset, outside, proc = folders(tmp_path)
    (proc / "preprocessor_config.json").write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    line = refusal(scan(tmp_path, proc, dataset), tmp_path)
    assert "1024" in line and "preprocessor_config.json" in line
    record("models", "preprocessor_config.json nested 100,000 levels deep", f"exit 2: {line}")


def test_deep_special_tokens_map(tmp_path, record):
    """A file only transformers reads (json.loads, which recurses): refused before it is handed on."""
    dataset, outside, proc = folders(tmp_path)
    (proc / "special_tokens_map.json").write_text("[" * 100_000 + "]" * 100_000)
    line = refusal(scan(tmp_path, proc, dataset), tmp_path)
    assert "special_tokens_map.json" in line and "1024" in line
    record(
        "models",
        "special_tokens_map.json (read by transformers only) nested 100,000 levels",
        f"exit 2: {line}",
    )


# ---- 2. huge files ---------------------------------------------------------------------------------


def test_huge_config_file(tmp_path, record):
    dataset, outside, proc = folders(tmp_path)
    with open(proc / "tokenizer_config.json", "r+b") as handle:  # sparse: its size, not its bytes
        handle.truncate(MAX_CONFIG_BYTES + 4096)
    line = refusal(scan(tmp_path, proc, dataset), tmp_path)
    assert "tokenizer_config.json" in line and "16 MiB" in line
    record("bounds", "tokenizer_config.json of 16 MiB and more (sparse)", f"exit 2: {line}")


def test_huge_tokenizer_file(tmp_path, record):
    dataset, outside, proc = folders(tmp_path)
    with open(proc / "tokenizer.json", "r+b") as handle:
        handle.truncate(MAX_TOKENIZER_BYTES + 4096)
    line = refusal(scan(tmp_path, proc, dataset), tmp_path)
    assert "tokenizer.json" in line and "64 MiB" in line
    record("bounds", "tokenizer.json above 64 MiB (sparse)", f"exit 2: {line}")


def test_tokenizer_with_millions_of_entries(tmp_path, record):
    """The 10M-entry tokenizer took 55 s and 3.4 GB to load; above the entry bound it is not loaded."""
    dataset, outside, proc = folders(tmp_path)
    tokenizer = json.loads((proc / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    extra = MAX_TOKENIZER_ENTRIES + 100_000 - len(vocab)
    # Written as text directly: the dict would take a GB in the test process.
    head = json.dumps({**tokenizer, "model": {**tokenizer["model"], "vocab": {}}})
    marker = '"vocab": {}'
    assert marker in head
    before, after = head.split(marker, 1)
    with open(proc / "tokenizer.json", "w") as handle:
        handle.write(before + '"vocab": {')
        handle.write(", ".join(f'"{token}": {index}' for token, index in vocab.items()))
        for start in range(0, extra, 500_000):
            handle.write(
                "".join(f', "z{i}": {len(vocab) + i}' for i in range(start, min(extra, start + 500_000)))
            )
        handle.write("}" + after)
    assert os.path.getsize(proc / "tokenizer.json") < MAX_TOKENIZER_BYTES
    line = refusal(scan(tmp_path, proc, dataset, timeout=60), tmp_path)
    assert "tokenizer.json" in line and f"{MAX_TOKENIZER_ENTRIES:,}" in line
    record("bounds", "tokenizer.json with 3.1M vocabulary entries (under 64 MiB)", f"exit 2: {shape(line)}")


# ---- 3. links out of the folder, files that are not files -------------------------------------------


def test_tokenizer_config_linked_out_of_the_folder(tmp_path, record):
    dataset, outside, proc = folders(tmp_path)
    secret = outside / "secret.json"
    shutil.move(proc / "tokenizer_config.json", secret)
    (proc / "tokenizer_config.json").symlink_to(secret)
    run = scan(tmp_path, proc, dataset)
    line = refusal(run, tmp_path)
    assert "tokenizer_config.json" in line and "outside" in line
    assert run.touched(outside) == []
    record("models", "tokenizer_config.json a symlink out of the model folder", f"exit 2: {line}")


def test_hf_cache_snapshot_links_stay_allowed(tmp_path, record):
    """An HF cache snapshot's files are links into ../../blobs of the same repo: they are read."""
    dataset, outside, proc = folders(tmp_path)
    repo = tmp_path / "hub" / "models--org--tiny"
    snapshot, blobs = repo / "snapshots" / "0123abcd", repo / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    for index, file in enumerate(sorted(proc.iterdir())):
        blob = blobs / f"blob{index}"
        shutil.copy(file, blob)
        (snapshot / file.name).symlink_to(os.path.relpath(blob, snapshot))
    run = scan(tmp_path, snapshot, dataset)
    assert run.exit_code in (0, 1), run.stderr[-2000:]
    assert len(run.report["model"]["name"]) > 0
    record(
        "models",
        "HF cache snapshot folder (files are links into ../../blobs)",
        "read as the folder it is; the scan runs",
    )


def test_fifo_as_a_tokenizer_file(tmp_path, record):
    dataset, outside, proc = folders(tmp_path)
    (proc / "tokenizer.json").unlink()
    os.mkfifo(proc / "tokenizer.json")
    line = refusal(scan(tmp_path, proc, dataset, timeout=60), tmp_path)
    assert "tokenizer.json" in line and "regular" in line
    record("models", "a FIFO named tokenizer.json", f"exit 2, no hang: {line}")


# ---- 4. chat templates that run away ----------------------------------------------------------------

RUNAWAY = {
    "nested range loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "nested loops over a literal list (no call inside)": (
        "{% set l = [0,1,2,3,4,5,6,7,8,9] %}" + "{% for a in l %}" * 9 + "{% endfor %}" * 9
    ),
    "a string doubled 40 times": (
        "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}"
    ),
    "'a' * 10**9": "{{ 'a' * 1000000000 }}",
    "a loop writing 10 GB of output": "{% for i in range(100000) %}{% for j in range(100000) %}0123456789{% endfor %}{% endfor %}",
    "a 10**9 wide format": "{{ '{:>1000000000}'.format(1) }}",
    "a macro that recurses forever": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "a center(10**9) filter": "{{ 'x'|center(1000000000) }}",
}


@pytest.mark.parametrize("case", sorted(RUNAWAY))
def test_runaway_template_is_refused_at_load(tmp_path, case, record):
    dataset, outside, proc = folders(tmp_path)
    (proc / "chat_template.jinja").write_text(RUNAWAY[case])
    run = scan(tmp_path, proc, dataset, timeout=60)
    line = refusal(run, tmp_path)
    assert "its chat template is refused" in line, line
    either = "ran past its time bound (2 s) or its iteration bound (1,000,000)"
    for reason in (
        f"exceeded {MAX_RENDER_ITERATIONS:,} loop iterations (its iteration bound)",
        "ran longer than 2 s (its time bound)",
    ):
        if case == "nested range loops":  # which of the two comes first depends on the machine's speed
            line = line.replace(reason, either)
    record("models", f"chat template: {case}", f"exit 2: {line}")


def test_template_that_runs_away_on_one_row(tmp_path, record):
    """The probe passes; the row whose text sets it off is a VLM101 finding, the other rows are scanned."""
    dataset, outside, proc = folders(tmp_path)
    original = (proc / "chat_template.jinja").read_text()
    # It writes each text's trimmed length (so the shape cache sees it reads the text and renders every
    # row in full), and loops over the characters of a text that starts with EVIL (no call inside).
    trap = (
        "{% for m in messages %}{% for p in m.content %}{% if p.text is defined %}{{ p.text|trim|length }}"
        "{% if p.text.startswith('EVIL') %}"
        + "{% for a in p.text %}" * 4
        + "{% endfor %}" * 4
        + "{% endif %}"
        "{% endif %}{% endfor %}{% endfor %}"
    )
    (proc / "chat_template.jinja").write_text(trap + original)
    run = scan(tmp_path, proc, dataset, timeout=90)
    assert run.exit_code == 1, run.stderr[-2000:]
    findings = run.report["findings"]
    evil = [f for f in findings if f["code"] == "VLM101"]
    assert len(evil) == 1 and "longer than" in evil[0]["message"], findings
    record(
        "models",
        "chat template that runs away only on a row whose text starts with EVIL",
        f'that row: VLM101 "{shape(evil[0]["message"])}"; the other rows are scanned',
    )


def test_template_bounds_keep_transformers_output(tmp_path):
    """Every fixture's template renders to exactly transformers' string through the bounded renderer."""
    from transformers.utils.chat_template_utils import render_jinja_template

    from vlmlint.templates import render

    conversation = [
        {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "  what {{ is }} this? "}]},
        {"role": "assistant", "content": [{"type": "text", "text": "a cat"}]},
    ]
    templates = sorted(PROCESSORS.glob("*/chat_template.jinja"))
    assert templates
    for path in templates:
        template = path.read_text()
        for prompt in (False, True):
            try:
                expected = render_jinja_template(
                    conversations=[conversation],
                    chat_template=template,
                    add_generation_prompt=prompt,
                    bos_token="<s>",
                    eos_token="</s>",
                )[0][0]
            except Exception as exc:  # noqa: BLE001
                expected = type(exc).__name__
            try:
                got = render(template, conversation, prompt, bos_token="<s>", eos_token="</s>")
            except Exception as exc:  # noqa: BLE001
                got = type(exc).__name__
            assert got == expected, path


def test_bounds_are_what_the_docs_say():
    assert MAX_RENDER_SECONDS == 2.0 and MAX_RENDER_ITERATIONS == 1_000_000


def test_weights_are_not_checked_or_read(tmp_path, record):
    """A full checkpoint folder: a 2 GB weights file and a shard linked elsewhere are no processor file."""
    dataset, outside, proc = folders(tmp_path)
    with open(proc / "model.safetensors", "wb") as handle:
        handle.truncate(2 * 2**30)  # sparse
    (outside / "shard.safetensors").write_bytes(b"\0" * 16)
    (proc / "model-00002-of-00002.safetensors").symlink_to(outside / "shard.safetensors")
    run = scan(tmp_path, proc, dataset)
    assert run.exit_code in (0, 1), run.stderr[-2000:]
    assert run.touched(outside) == []
    record(
        "models",
        "model folder with a 2 GB weights file and a weights shard linked out of it",
        "loaded: only the files a processor reads are checked; the weights are never opened",
    )
