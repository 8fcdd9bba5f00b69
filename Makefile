# minipar: `make book` builds the site, `make test` runs everything CI runs.
# Every target bootstraps .venv from requirements.txt when it is missing or stale.
SHELL := /bin/bash
# Python may write the course's own bytecode (__pycache__/, ignored by git) even where the
# environment says not to: with PYTHONDONTWRITEBYTECODE=1 (as on the machines this course is
# developed on) every test worker, rank, kernel and CLI call compiled src/ and the tests afresh;
# pytest's collection alone took 8.2 instead of 5.1 s per worker on an idle 2-core machine.
unexport PYTHONDONTWRITEBYTECODE
# torch's OpenMP threads sleep when a parallel region ends instead of spinning for more work:
# the tests, kernels and ranks of `make test` run more threads than the machine has cores, and
# a spinning thread takes a core from one that has work. Five rank-heavy test files, one run
# after the other on an idle 2-core machine: 63.0-65.6 user CPU-s and 42-43 s wall spinning,
# 55.8-56.1 and 38.3-38.4 s asleep. A value given in the environment is kept.
export OMP_WAIT_POLICY ?= PASSIVE
PY    := .venv/bin/python
STAMP := .venv/.installed
PYTEST := $(PY) -m pytest -p no:cacheprovider
JB    := .venv/bin/jupyter-book

.PHONY: help install book book-strict lint test unit fast notebooks exercises exercises-check grade \
        lab bench clean site-test gpu-check

# `make help` prints every target with its `##` comment; tests/test_install.py checks that
# every target has one and that README.md's table says the same.
help: ## this list
	@grep -E '^[a-z-]+:.*## ' $(firstword $(MAKEFILE_LIST)) \
	  | sed -E 's/^([a-z-]+):[^#]*## (.*)$$/\1\t\2/' \
	  | awk -F'\t' '{ printf "make %-16s %s\n", $$1, $$2 }'

# torch: PyTorch's CPU index, so a plain machine never downloads the CUDA build by surprise
# (PyPI's Linux torch wheel is the CUDA build, gigabytes of libraries). When TORCH_INDEX is not
# given, the index is added only if pip's own configuration cannot already find the pinned torch
# (a CI image or a mirror with the CPU wheels on local disk: then nothing reaches the network).
# GPU workstations: `make install TORCH_INDEX=` (PyPI's CUDA build) or
# TORCH_INDEX="--extra-index-url URL" with the URL PyTorch's install selector gives.
CPU_INDEX := --extra-index-url https://download.pytorch.org/whl/cpu
TORCH_PIN := $(shell sed -n 's/^torch==//p' requirements.txt)

# PYTHON makes .venv (3.11 or later, checked first: pip would run minutes before an older
# one failed). pip's "Collecting"/"Installing" lines show as it goes; all it says is in the log.
PYTHON ?= python3
$(STAMP): requirements.txt pyproject.toml
	@py=$(PY); test -x $$py || py='$(PYTHON)'; \
	 $$py -c 'import sys; sys.exit(sys.version_info < (3, 11))' > /dev/null 2>&1 || { \
	   echo "make install: minipar needs Python >= 3.11; $$py is" \
	        "$$($$py -V 2>&1 || echo missing) (give one: make install PYTHON=python3.11;" \
	        "an older .venv: remove it first)"; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv .venv
	@echo "installing requirements into .venv (log: .venv/pip.log; minutes the first time)"
	@set -o pipefail; \
	 if [ "$(origin TORCH_INDEX)" != undefined ]; then idx='$(TORCH_INDEX)'; \
	 elif $(PY) -m pip install --dry-run --no-deps --no-index --ignore-installed -q \
	        "torch==$(TORCH_PIN)" > /dev/null 2>&1; then idx=""; \
	 else idx='$(CPU_INDEX)'; fi; \
	 $(PY) -m pip install --disable-pip-version-check --progress-bar off -r requirements.txt \
	   $$idx 2>&1 | tee .venv/pip.log \
	  | { grep --line-buffered -E '^(Collecting|Downloading|Installing|Successfully)' || true; } \
	  || { grep -v "is ignored" .venv/pip.log | tail -40; exit 1; }
	@touch $@

install: $(STAMP) ## create .venv: the CPU build of torch and every extra (TORCH_INDEX= for the GPU build)

# The book builds under scripts/book_progress.py: one line per notebook as it runs ("book: running
# notebooks/x.ipynb ...", "... ran in 41 s"), Sphinx's warnings and errors unchanged, the build's
# exit status; it drops the one line each kernel prints about loopback TCP without CurveZMQ keys
# (jupyter_client provisions none).
PROGRESS := $(PY) scripts/book_progress.py
# The notebooks run BOOK_JOBS at a time, each from a clean kernel, before the build reads them
# from the cache: Sphinx would run them one by one, leaving a core idle while a kernel starts
# (make book-strict on an idle 2-core machine, one run after the other: 209 s with BOOK_JOBS=1,
# 147 s with 2). Sphinx then reads and writes BOOK_JOBS pages at a time (a fresh checkout's
# pages and figures, notebooks cached: 48.5 s in one process, 29.4 s in two).
BOOK_JOBS ?= 2

# jupyter-cache keys a notebook's outputs on its cells only: a change under src/ would not
# re-run it. The cache is dropped whenever src/ changed since the last build, and so is Sphinx's
# environment (_build/.doctrees): Sphinx re-reads only the sources that changed, so a notebook
# whose cells did not change would keep the page of its previous run (an explorer drawn by the
# old JavaScript) even though it ran again.
SRC_HASH = $(shell find src -type f \( -name '*.py' -o -name '*.js' -o -name '*.json' \) \
             -not -path '*/__pycache__/*' | LC_ALL=C sort | xargs cat | sha1sum | cut -c1-16)
define fresh_cache
	@mkdir -p _build; if [ "$$(cat _build/.src-hash 2>/dev/null)" != "$(SRC_HASH)" ]; then \
	  rm -rf _build/.jupyter_cache _build/.doctrees; echo "$(SRC_HASH)" > _build/.src-hash; fi
endef

# A read-only checkout: one line before the build, not Sphinx's traceback after it.
define writable_build
	@{ mkdir -p _build && : > _build/.writable && rm -f _build/.writable; } 2>/dev/null || { \
	  echo "make $@: cannot write _build/ in $(CURDIR) (a read-only checkout?): build in a" \
	       "copy you can write"; exit 1; }
endef

book: $(STAMP) ## build the site into _build/html (runs every notebook on the CPU; cached until a notebook or src/ changes)
	$(writable_build)
	$(fresh_cache)
	@$(PROGRESS) --jobs $(BOOK_JOBS) $(JB) build .

# Executes every chapter notebook from a clean kernel (jupyter-cache; a cell error fails the
# build), so `make test` needs no separate nbval pass over notebooks/.
book-strict: $(STAMP) ## the book build with warnings as errors, every notebook run afresh (no cache)
	$(writable_build)
	@rm -rf _build/.jupyter_cache _build/.src-hash
	@$(PROGRESS) --jobs $(BOOK_JOBS) $(JB) build . -W -n --keep-going

# The built site in headless Chromium with the network blocked (tests/test_site_browser.py).
# Outside CI a missing chromium is a note; under CI=true it fails (.ci/run installs it first).
site-test: $(STAMP) ## the built site in headless Chromium, network blocked (after make book)
	@if [ -x /usr/bin/chromium ]; then \
	  MINIPAR_BROWSER_TEST=1 $(PYTEST) -q -s tests/test_site_browser.py; \
	elif [ "$$CI" = true ]; then \
	  echo "FAILED the browser test: /usr/bin/chromium is missing under CI=true" \
	       "(apt-get install -y chromium; .ci/run installs it)"; exit 1; \
	else \
	  echo "SKIPPED the browser test: /usr/bin/chromium is missing (apt-get install -y chromium;" \
	       ".ci/run installs it)"; \
	fi

# On a GPU node: chapter notebooks with NCCL where a chapter switches, and the NCCL benchmarks;
# writes gpu-check.json. Without a GPU it says so and exits 0 (scripts/gpu_check.py).
gpu-check: $(STAMP) ## on a GPU node: benchmarks, NCCL chapters and GPU-only tests; writes gpu-check.json
	$(PY) scripts/gpu_check.py --out gpu-check.json

# Three workers on CI's two cores: many tests wait on ranks, kernels and subprocesses starting, and
# a third worker fills that time (on an idle 2-core machine, one after the other: -n 3 382 s,
# -n 2 418 s, the same 2,052 tests).
unit: $(STAMP) ## every unit test, multi-process ones and the exercise graders included
	$(PYTEST) -p no:nbval -p no:anyio -q -n 3 --dist loadfile --durations=15 tests

fast: $(STAMP) ## inner loop: the unit tests not marked slow (no other process, none over a CPU-second)
	$(PYTEST) -p no:nbval -p no:anyio -q -x -n 2 --dist loadfile -m "not slow" tests

notebooks: $(STAMP) ## pytest --nbval-lax over notebooks/ (each from a clean kernel)
	$(PYTEST) -q --nbval-lax --nbval-current-env --nbval-cell-timeout=900 notebooks

exercises: $(STAMP) ## write the missing starter notebooks from exercises/*/solutions/*.py (never overwrites yours)
	$(PY) -m minipar.grading.notebooks

exercises-check: $(STAMP) ## the repository's starter notebooks (git's copies, not your edits) match their scripts
	$(PY) -m minipar.grading.notebooks --check

lint: $(STAMP) ## ruff: lint and format check (rules in ruff.toml); commit messages (subject ≤ 72 characters, body lines ≤ 100)
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	$(PY) scripts/check_commits.py

# unit, book-strict and site-test one after the other (each alone keeps two cores busy; side by
# side they cost more CPU): scripts/make_test.sh, which names each failed part.
test: $(STAMP) ## everything CI runs: lint, exercises-check, unit, book-strict, site-test
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory exercises-check
	@scripts/make_test.sh $(MAKE)

grade: $(STAMP) ## grade your exercise notebooks and print a score table
	.venv/bin/minipar grade exercises

# As root (a container) Jupyter refuses to start without --allow-root.
lab: $(STAMP) ## JupyterLab on the course, with the .venv kernel
	.venv/bin/jupyter lab --ServerApp.root_dir=. $$([ "$$(id -u)" = 0 ] && echo --allow-root)

# The chapters' benches come from the registry (minipar.chapters, Chapter.bench), in reading order,
# each with its defaults unless BENCH_ARGS_<slug> says otherwise (the pipeline chapter runs p = 2).
BENCH_CHAPTERS = $(shell $(PY) -c 'from minipar.chapters import CHAPTERS; \
                   print(*(c.slug for c in CHAPTERS if c.bench))')
BENCH_ARGS_pipeline_parallel := --pp 2

bench: $(STAMP) ## every minipar bench on this machine's CPU ranks (launch, then each chapter's)
	.venv/bin/minipar bench launch --ranks 4
	$(foreach s,$(BENCH_CHAPTERS),.venv/bin/minipar bench $(s) $(BENCH_ARGS_$(s)) &&) true

clean: ## remove _build (the site and the notebook cache)
	rm -rf _build
