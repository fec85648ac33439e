# The two commands of the README. Both set up .venv on a fresh machine.
#   make book   -> executes the labs (CPU profile) and builds _build/html
#   make test   -> unit + distributed tests, nbval on the labs, strict book build
#   make benchmark -> the time budgets, measured (not part of make test)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PROFILE ?= cpu

# DeepSpeed's C++ ops compile on first use: keep them in the project's cache.
export TORCH_EXTENSIONS_DIR := $(CURDIR)/.cache/torch_extensions
export PYDEVD_DISABLE_FILE_VALIDATION := 1
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: setup book labs test test-fast benchmark clean colossalai

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $(STAMP)

# Colossal-AI pins torch<=2.5.1: its own environment, used only by the
# ranks of lab 9 (labkit.launch(..., python=...)); nothing leaks into .venv.
# The pinned freeze installs with --no-deps from a wheel folder kept outside
# the checkout (built once, about 5.8 GB), so a fresh clone on the same
# machine resolves and downloads nothing.
CAI_VENV   := .venv-colossalai
CAI_STAMP  := $(CAI_VENV)/.installed
CAI_WHEELS ?= $(HOME)/.cache/labkit/wheels-colossalai
CAI_PIP     = $(CAI_VENV)/bin/python -m pip install -q --no-deps --no-index \
	--find-links $(CAI_WHEELS) -r requirements-colossalai.txt

colossalai: $(CAI_STAMP)

$(CAI_STAMP): requirements-colossalai.txt
	test -x $(CAI_VENV)/bin/python || $(PYTHON) -m venv $(CAI_VENV)
	$(CAI_PIP) 2>/dev/null || { $(CAI_VENV)/bin/python -m pip wheel -q \
		--no-deps -w $(CAI_WHEELS) -r requirements-colossalai.txt && \
		$(CAI_PIP); }
	touch $(CAI_STAMP)

labs: $(STAMP)
	$(BIN)/python scripts/run_labs.py --profile $(PROFILE)

book: labs
	$(BIN)/python scripts/build_book.py --labs-from _build/labs/$(PROFILE)

# Strict build of the book, labs as committed (they are executed by nbval
# below, once); then every test, the labs through nbval, and the offline
# check of the HTML just built.
test: $(STAMP) $(CAI_STAMP)
	$(BIN)/python scripts/build_book.py --strict
	LABKIT_BOOK_BUILT=1 $(BIN)/python -m pytest tests labs --nbval-lax \
		--durations=15 -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest tests -q -m "not distributed"

# The time budgets (each lab <= 90 s on 2 cores, make test <= 20 min on a
# fresh clone), measured, never asserted in a timed test.
benchmark: $(STAMP)
	$(BIN)/python scripts/benchmark.py --make-test

clean:
	rm -rf _build
