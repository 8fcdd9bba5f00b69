# minipar: `make book` builds the site, `make test` runs everything CI runs.
# Every target bootstraps .venv from requirements.txt when it is missing or stale.
SHELL := /bin/bash
PY    := .venv/bin/python
STAMP := .venv/.installed
PYTEST := $(PY) -m pytest -p no:cacheprovider
JB    := .venv/bin/jupyter-book

.PHONY: help book book-strict test unit fast notebooks exercises exercises-check grade lab bench clean \
        site-test gpu-check

help:
	@echo "make book       build the site into _build/html (executes every notebook on CPU; cached)"
	@echo "make test       the whole suite: unit + exercise tests, strict book build (runs every notebook once), browser test"
	@echo "make fast       inner loop: unit tests without the slow multi-process ones (~1 min)"
	@echo "make site-test  the built site in headless Chromium, network blocked (after make book)"
	@echo "make grade      grade your exercise notebooks and print a score table"
	@echo "make lab        JupyterLab on the course, with the .venv kernel"
	@echo "make exercises  regenerate the starter notebooks from exercises/*/solutions/*.py"
	@echo "make gpu-check  on a GPU node: notebooks and benchmarks on NCCL, JSON report"
	@echo "make bench      benchmarks on this machine (launcher latency, collectives sweep, data parallel)"

$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || python3 -m venv .venv
	@echo "installing requirements into .venv (log: .venv/pip.log)"
	@$(PY) -m pip install --disable-pip-version-check -q -r requirements.txt > .venv/pip.log 2>&1 \
	  || { grep -v "is ignored" .venv/pip.log; exit 1; }
	@touch $@

# ipykernel warns once per kernel that it talks to its client over loopback TCP without CurveZMQ
# keys (jupyter_client provisions none); that one line is dropped, every other line is kept.
QUIET_KERNEL := grep -v --line-buffered "Kernel is running over TCP without encryption" || true

book: $(STAMP)
	@set -o pipefail; $(JB) build . --quiet 2>&1 | { $(QUIET_KERNEL); }

# Executes every chapter notebook from a clean kernel (jupyter-cache; a cell error fails the
# build), so `make test` needs no separate nbval pass over notebooks/.
book-strict: $(STAMP)
	@set -o pipefail; $(JB) build . -W -n --keep-going --quiet 2>&1 | { $(QUIET_KERNEL); }

# The built site in headless Chromium with the network blocked (tests/test_site_browser.py).
# Outside CI a missing chromium is a note; under CI=true it fails (.ci/run installs it first).
site-test: $(STAMP)
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
gpu-check: $(STAMP)
	$(PY) scripts/gpu_check.py --out gpu-check.json

unit: $(STAMP)
	$(PYTEST) -q -n 2 --dist loadfile --durations=15 tests

fast: $(STAMP)
	$(PYTEST) -q -x -n 2 --dist loadfile -m "not slow" tests

notebooks: $(STAMP)
	$(PYTEST) -q --nbval-lax --nbval-current-env --nbval-cell-timeout=900 notebooks

exercises: $(STAMP)
	$(PY) -m minipar.grading.notebooks

exercises-check: $(STAMP)
	$(PY) -m minipar.grading.notebooks --check

test: $(STAMP)
	$(MAKE) --no-print-directory exercises-check
	$(MAKE) --no-print-directory unit
	$(MAKE) --no-print-directory book-strict
	$(MAKE) --no-print-directory site-test

grade: $(STAMP)
	.venv/bin/minipar grade exercises

lab: $(STAMP)
	.venv/bin/jupyter lab --ServerApp.root_dir=.   # kernel "Python 3" is .venv's python

bench: $(STAMP)
	.venv/bin/minipar bench launch --ranks 4
	.venv/bin/minipar bench collectives
	.venv/bin/minipar bench data_parallel --ranks 4
	.venv/bin/minipar bench tensor_parallel --ranks 2
	.venv/bin/minipar bench pipeline_parallel --pp 2
	.venv/bin/minipar bench context_parallel --ranks 4
	.venv/bin/minipar bench expert_parallel --ranks 4

clean:
	rm -rf _build
