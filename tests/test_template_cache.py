"""The shape cache renders exactly what the full jinja render gives, for every fixture template.

Random conversations (roles, image and text parts, texts a template might inspect or strip) are
rendered through a warmed ShapeCache and through the template directly; the strings must be equal.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import PROCESSORS
from vlmlint.config import build_config
from vlmlint.engine import Scanner
from vlmlint.records import Message, Part, Role
from vlmlint.template_cache import ShapeCache

CHAT_PROCESSORS = sorted(
    p.name
    for p in PROCESSORS.iterdir()
    if (p / "chat_template.jinja").is_file() or (p / "chat_template.json").is_file()
)
TRICKY = [
    "Describe this image.",
    "  spaces around  ",
    "",
    "\n",
    "<think>\nhmm\n</think>\n\nok",
    "<tool_response>x</tool_response>",
    "{{ 1 + 1 }}",
    "<image>",
    "[INST]",
    "multi\nline\ntext",
]
text = st.one_of(st.sampled_from(TRICKY), st.text(max_size=20))
part = st.one_of(st.just(Part(is_image=True)), text.map(lambda t: Part(text=t)))
message = st.builds(
    lambda role, parts: Message(role, tuple(parts)),
    st.sampled_from([Role.USER, Role.ASSISTANT, Role.SYSTEM]),
    st.lists(part, min_size=1, max_size=3),
)
conversation = st.lists(message, min_size=1, max_size=5).map(tuple)


@pytest.fixture(scope="module", params=CHAT_PROCESSORS)
def scanner(request):
    config = build_config(str(PROCESSORS / request.param), {}, {"model": str(PROCESSORS / request.param)})
    return Scanner(config)


def _full(scanner, messages):
    try:
        return scanner._render_template(messages)
    except Exception as exc:
        return ("error", type(exc).__name__)


def _cached(cache, messages):
    try:
        return cache.render(messages)
    except Exception as exc:
        return ("error", type(exc).__name__)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(conversation, min_size=1, max_size=8))
def test_cached_render_equals_full_render(scanner, conversations):
    cache = scanner.__dict__.setdefault("_test_cache", ShapeCache(scanner._render_template))
    for messages in conversations:
        # Each conversation twice with other texts of the same shape: the second goes through the cache.
        assert _cached(cache, messages) == _full(scanner, messages)
        swapped = tuple(
            Message(m.role, tuple(p if p.is_image else Part(text=p.text[::-1] + " x") for p in m.parts))
            for m in messages
        )
        assert _cached(cache, swapped) == _full(scanner, swapped)


def test_cache_is_on_for_text_opaque_templates_and_off_for_trimming_ones():
    def enabled(name):
        scanner = Scanner(build_config(".", {}, {"model": str(PROCESSORS / name)}))
        return ShapeCache(scanner._render_template).enabled

    assert enabled("qwen2-vl") and enabled("llava-v1.6-mistral-7b") and enabled("idefics3-8b-llama3")
    assert not enabled("gemma-3-4b-it")  # its template trims each text


def test_scan_uses_the_cache_and_counts_are_unchanged(tmp_path):
    from tests.conftest import DATASETS

    config = build_config(str(DATASETS / "llava"), {}, {"model": str(PROCESSORS / "qwen2-vl")})
    cached = Scanner(config)
    first = [o.result.seq_len for o in cached.scan()]
    assert cached._shape_cache.hits > 0
    full = Scanner(config)
    full._shape_cache = type("Full", (), {"render": staticmethod(full._render_template)})()
    assert [o.result.seq_len for o in full.scan()] == first
