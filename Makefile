# vlmlint developer tasks. `make demo` and `make test` work on a fresh machine: each installs first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-reference lint fixtures docs bench bench-reference bench-scale clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,docs]'  # docs: tests/test_docs_site.py builds the site
	touch $(STAMP)

# The main job on the bundled demo dataset. Exit code 1 means "findings found", which the demo expects.
demo: install
	@$(BIN)/vlmlint scan fixtures/datasets/demo; \
	status=$$?; if [ $$status -gt 1 ]; then exit $$status; fi

test: install
	$(BIN)/python -m pytest -q

# The torchvision-only processors (Llama 4, Kimi K2.5, LFM2-VL, Molmo2, Phi-4-multimodal, Cohere2 Vision)
# run for real in a second venv with torch and torchvision (the `reference` extra; pip takes both from
# local files here, about 6 GB): their recorded outputs (fixtures/reference/*.json, which `make test`
# checks the formulas against) are recorded again and must not change, tests/reference/ runs the
# differential tests against the real classes, and the PIL-backed families are run once through their
# torchvision image processors (the disagreements between the two backends are reported).
REF_VENV := .venv-reference
REF_BIN := $(REF_VENV)/bin
REF_STAMP := $(REF_VENV)/.installed

$(REF_STAMP): pyproject.toml
	$(PYTHON) -m venv $(REF_VENV)
	$(REF_BIN)/python -m pip install --quiet --upgrade pip
	$(REF_BIN)/python -m pip install --quiet -e '.[test,reference]'
	touch $(REF_STAMP)

test-reference: $(REF_STAMP)
	VLMLINT_REFERENCE=1 $(REF_BIN)/python -m fixtures.reference --check
	VLMLINT_REFERENCE=1 $(REF_BIN)/python -m pytest -q -p no:cacheprovider tests/reference
	# M-RoPE families: position_span against the model's real get_rope_index (it needs torch)
	VLMLINT_REFERENCE=1 $(REF_BIN)/python -m pytest -q -p no:cacheprovider tests/families -k get_rope_index

lint: install
	$(BIN)/ruff check vlmlint tests fixtures bench
	$(BIN)/ruff format --check vlmlint tests fixtures bench

fixtures: install
	$(BIN)/python fixtures/build.py

# docs/rules.md is generated from the rules and docs/models/support.md from the installed transformers'
# auto mappings (vlmlint.models.support); the site (mkdocs.yml) is built into site/, any warning fatal.
docs: install
	$(BIN)/python -m vlmlint.docs docs/rules.md
	$(BIN)/python -m vlmlint.models.support docs/models/support.md
	$(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis site

# Figures for the README and the notes: the default path against the naive per-row processor loop.
bench: install
	$(BIN)/python bench/bench_fast_vs_naive.py --rows 2000 --models qwen2-vl,llava-v1.6-mistral-7b,idefics3-8b-llama3,gemma-4-e4b-it,glm-4.6v,minicpm-v-4.6

# The torchvision-only families' formulas against their real (torchvision) processors, in the reference venv.
bench-reference: $(REF_STAMP)
	$(REF_BIN)/python bench/bench_fast_vs_naive.py --rows 2000 --models llama-4-scout-17b-16e-instruct,kimi-k2.5

# Issue 7's figures: 100k and 1M-row JSONL and an embedded-bytes parquet, rows/s and peak RSS, the
# --jobs report check and the naive-loop ratio on a 2k-row subset (data generated once, bench/.data/).
bench-scale: install
	$(BIN)/python bench/bench_scale.py --rows 100000,1000000 --parquet-rows 50000
