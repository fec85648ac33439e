# The two commands of the README. Both set up .venv on a fresh machine.
#   make book   -> executes the labs (CPU profile) and builds _build/html
#   make test   -> unit + distributed tests, nbval on the labs, strict book build
#   make benchmark -> the time budgets, measured (not part of make test)
# The interpreter that builds .venv: PYTHON if given, else the first of
# these that scripts/check_python.sh accepts (3.11 to 3.13).
PYTHON ?= $(shell for p in python3 python3.13 python3.12 python3.11; \
	do sh scripts/check_python.sh $$p 2>/dev/null && { command -v $$p; break; }; done)
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PROFILE ?= cpu
LABS_FROM ?=

# DeepSpeed's C++ ops compile on first use: keep them in the project's cache.
export TORCH_EXTENSIONS_DIR := $(CURDIR)/.cache/torch_extensions
export PYDEVD_DISABLE_FILE_VALIDATION := 1
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: setup book labs test test-fast benchmark clean

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	@test -x $(BIN)/python || sh scripts/check_python.sh "$(PYTHON)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $(STAMP)

labs: $(STAMP)
	$(BIN)/python scripts/run_labs.py --profile $(PROFILE)

# LABS_FROM: a results folder or a bundle (scripts/bundle_results.py) made
# elsewhere, e.g. on a GPU node; then nothing is run here.
book: $(if $(LABS_FROM),$(STAMP),labs)
	$(BIN)/python scripts/build_book.py --labs-from $(or $(LABS_FROM),_build/labs/$(PROFILE))

# Strict build of the book, labs as committed (they are executed by nbval
# below, once); then every test, the labs through nbval, and the offline
# check of the HTML just built.
test: $(STAMP)
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
