# vlmlint developer tasks. `make demo` and `make test` work on a fresh machine: each installs first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-reference test-versions lint fixtures docs bench bench-reference bench-scale clean

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

# The transformers releases vlmlint supports (pyproject.toml's range), each in its own venv without torch
# (build/transformers-X.Y.Z): the oldest supported, LLaMA-Factory 0.9.x's cap and the newest. There the
# dataset fixtures' counts run against that release's real processor classes (tests/test_fixtures.py
# counts_equal; a family that release lacks is skipped with the release it came in) and the profiles'
# tokenizers are converted by it (tests/conftest.py gives each session its own cache). Seven processors
# (the issue's four profiles' families, Idefics3, Gemma 3, InternVL) keep it short: all ~40 take about
# 35 min per release on a 2-core machine (TF_SELECT='not test_fixtures or counts_equal' runs them all).
# The Omni processors cannot be the reference before 5.2x: their __call__ reads a video processor (torch).
# tests/families, the differential family tests, run there too (about 4 min per release): where a
# processor changed between releases the family follows the installed class (MiniCPM-V 4.6's rounding
# in "4x" mode, InternVL's forced images kwargs), and a test of a helper or behaviour only later releases
# have skips naming it (tests/families/_releases.py); README, "transformers versions".
TF_VERSIONS ?= 5.5.0 5.8.0 5.25.0
TF_TESTS ?= tests/test_transformers_versions.py tests/test_fixtures.py tests/families
TF_SELECT ?= not test_fixtures or (counts_equal and (qwen2-vl] or smolvlm-256m or pixtral or llava-v1.6 or idefics3 or gemma-3-4b-it] or internvl3))

test-versions:
	@set -e; for v in $(TF_VERSIONS); do \
	  venv=build/transformers-$$v; \
	  if [ ! -f $$venv/.installed ] || [ pyproject.toml -nt $$venv/.installed ]; then \
	    rm -rf $$venv; $(PYTHON) -m venv $$venv; \
	    $$venv/bin/python -m pip install --quiet --upgrade pip; \
	    $$venv/bin/python -m pip install --quiet -e . "transformers==$$v" "pytest>=8" "hypothesis>=6.100" \
	      "pyyaml>=6" "protobuf>=4"; \
	    touch $$venv/.installed; \
	  fi; \
	  echo "== transformers $$v"; start=$$(date +%s); \
	  $$venv/bin/python -m pytest -q -p no:cacheprovider $(TF_TESTS) -k "$(TF_SELECT)"; \
	  echo "== transformers $$v: $$(( $$(date +%s) - start )) s"; \
	done

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

# Issue 23's six targets, each with its figure and PASS/FAIL (self-check cost, small scans, own-file
# rows/s, memory at 100k and 1M rows, the naive-loop ratio, cold cache as root); data generated once under
# bench/.data/scale/. `python bench/bench_scale.py --quick` is the smoke test (10k/20k rows).
bench-scale: install
	$(BIN)/python bench/bench_scale.py --rows 100000 --big-rows 1000000
