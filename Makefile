# DataLoader Lab: `make lab` to learn, `make test` to check everything.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# JupyterLab refuses to run as root unless told (CI and containers run as root).
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)
# Many container images set PYTHONDONTWRITEBYTECODE (this sandbox does): Python then caches no bytecode,
# and every process - each notebook kernel, each spawned worker, each test's child - compiles torch
# and matplotlib from source again (`import torch, matplotlib.pyplot`: 6.6 s against 2.6 s cached).
# The lab's own environment keeps its cache: the first import writes it.
unexport PYTHONDONTWRITEBYTECODE
# The lab's two settings (helpers/config.py), from the command line or the environment.
QUICK ?= $(DLLAB_SMOKE)
START_METHOD ?= $(DLLAB_START_METHOD)

.PHONY: lab test untimed timed unit notebooks browser browser-decks lint stress quota start-methods handouts slides figures figures-gpu figures-check benchmark readme strip clean

# (Re)create the environment when it is missing or pyproject.toml changed.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	# --no-compile: pip would byte-compile all ~13,000 files of the environment (~40 s of one core);
	# Python compiles the few thousand a run imports on first use, and caches them.
	$(BIN)/python -m pip install --no-compile -e '.[test]'
	touch $(STAMP)

# The lab's root is the repository, so that the notebooks' markdown figures (../images/...) load
# (JupyterLab serves nothing above its root); it opens notebook 00. QUICK=1 opens the lab with the
# smoke sizes (a class's time budget); START_METHOD=spawn (or fork, forkserver) sets the workers'
# start method for every notebook.
lab: $(STAMP)
	DLLAB_SMOKE=$(QUICK) DLLAB_START_METHOD=$(START_METHOD) \
	  $(BIN)/jupyter lab --ip=127.0.0.1 --notebook-dir=. $(ROOT_FLAG) \
	  --ServerApp.default_url=/lab/tree/notebooks/00_setup_check.ipynb

# The same tests as `unit notebooks browser`, grouped by what may share the cores: everything that
# compares no timings (unit tests and the untimed notebooks) in one run, three at a time; then the tests
# and notebooks that compare timings, one at a time; then the browser. All of it inside
# scripts/leftovers.py, which gives the run a temporary folder of its own and fails it if a process,
# a file in that folder or a /dev/shm segment is left behind at the end.
# The browser stage comes last: without Chromium, say so before the ~10 minutes of the rest, not after.
CHROMIUM ?= chromium
test: $(STAMP)
	@command -v $(CHROMIUM) >/dev/null || { echo "make test: the browser test needs Debian's chromium," \
	  "and '$(CHROMIUM)' is not on PATH: apt-get install chromium (.ci/run does this)" >&2; exit 2; }
	$(BIN)/python scripts/leftovers.py -- $(MAKE) --no-print-directory lint untimed timed browser

# Three at a time on two cores: about a fifth of this group's time is spent waiting (children starting,
# servers answering), and a third runner fills it (134 s against 141 s with two, warm). The notebooks
# first, longest first, then the unit tests; --dist worksteal lets a free runner take waiting tests.
# With the notebooks last (file order), one core ran 12 (~37 s) alone at the end while the other idled
# ~19 s (155 s against 141 s, two runners). An older stall of notebook 12 beside the unit tests had (at
# least) one cause, found and fixed: the leftovers.py test removed its workers' shared-memory segment in
# flight (scripts/leftovers.py says how that loses a batch for good).
untimed: $(STAMP)
	$(NBMAKE_ENV) $(BIN)/python -m pytest -m "not browser and not timing" -q -n 3 --dist worksteal \
	  --nbmake --nbmake-timeout=300 $(UNTIMED_NOTEBOOKS) tests

# The notebooks the browser test runs to the end (Run All, every cell's outputs checked as nbmake
# checks them) are not run again here; `make notebooks` runs them all.
# The timing tests are collected from all of tests/: collecting only their own files (~3 s less) made a
# diagnosis test red: its workers, forked from a pytest process that had imported fewer modules, can
# run a full garbage collection (~90 ms) inside a 6 ms fetch.
timed: $(STAMP)
	$(BIN)/python -m pytest -m "timing" -q
	$(NBMAKE) $(filter-out $(BROWSER_NOTEBOOKS),$(TIMED_NOTEBOOKS))

# --no-cache: ruff caches each file's result, but whether an import is first-party depends on other files
# (the root conftest.py made the tests' `from conftest import` first-party: a warm cache hid it).
lint: $(STAMP)
	$(BIN)/ruff check --no-cache conftest.py helpers tests notebooks benchmarks scripts

# Tests that compare real timings run alone, after the rest, which run two at a time here (`make test`: three).
unit: $(STAMP)
	$(BIN)/python -m pytest -m "not browser and not timing" -q -n 2
	$(BIN)/python -m pytest -m "timing" -q

# Every notebook, as committed, in smoke mode; 300 s per cell at most. Progress bars off. The notebooks
# whose lesson checks compare no timings on a CPU (ids, memory, real failures) run two at a time; every
# other notebook runs alone, so that nothing shares its cores but what the lesson starts.
# Longest first (12 ~37 s, 15 ~25 s, 10 ~20 s, 00 ~10 s, 06 ~5 s, overview <1 s in smoke), for `make untimed` above.
# The overview is a deck of markdown (no code cell): it only has to open in a kernel.
UNTIMED_NOTEBOOKS := notebooks/12_copy_on_read.ipynb notebooks/15_resume.ipynb \
  notebooks/10_shared_memory.ipynb notebooks/00_setup_check.ipynb notebooks/06_pinned_memory.ipynb \
  notebooks/overview.ipynb
TIMED_NOTEBOOKS = $(filter-out $(UNTIMED_NOTEBOOKS),$(sort $(wildcard notebooks/*.ipynb)))
# tests/test_browser.py runs these (NOTEBOOKS and the presented 03); a test keeps the two lists equal.
BROWSER_NOTEBOOKS := notebooks/01_baseline_loop.ipynb notebooks/03_prefetch_factor.ipynb \
  notebooks/05_worker_startup.ipynb
NBMAKE_ENV := DLLAB_SMOKE=1 TQDM_DISABLE=1 DLLAB_START_METHOD=$(START_METHOD)
NBMAKE := $(NBMAKE_ENV) $(BIN)/python -m pytest --nbmake --nbmake-timeout=300 -q
notebooks: $(STAMP)
	$(NBMAKE) -n 2 $(UNTIMED_NOTEBOOKS)
	$(NBMAKE) $(TIMED_NOTEBOOKS)

# The smoke notebooks beside one CPU-bound program: every check must hold or say its premise failed.
stress: $(STAMP)
	$(BIN)/python scripts/stress.py --competitors 1 -- $(MAKE) --no-print-directory notebooks

# The smoke notebooks inside a CPU quota, as a class server's cpu_limit sets one (QUOTA=1.5 between whole
# CPUs, QUOTA=0.5 for half a CPU). Needs Linux and root (or a delegated cgroup v2 subtree); says so and
# exits 3 where it cannot.
QUOTA ?= 1
quota: $(STAMP)
	$(BIN)/python scripts/quota.py --cpus $(QUOTA) -- $(MAKE) --no-print-directory notebooks

# The smoke notebooks under each start method (macOS/Windows use spawn, Linux from Python 3.14 forkserver).
start-methods: $(STAMP)
	for method in fork spawn forkserver; do \
	  echo "== start method $$method"; $(MAKE) --no-print-directory notebooks START_METHOD=$$method || exit 1; \
	done

# Only the files that hold a browser test are collected (all of tests/: ~4 s more); tests/test_repository.py
# keeps the list equal to them. The notebooks run in JupyterLab's kernels, not in this process, so nbmake's
# plugin is not loaded (it imports nbformat and jsonschema's format checks: ~0.9 s).
BROWSER_TESTS := tests/test_browser.py tests/test_browser_overview.py
browser: $(STAMP)
	DLLAB_SMOKE=1 TQDM_DISABLE=1 $(BIN)/python -m pytest -p no:nbmake -m browser -q $(BROWSER_TESTS)

# Before class: present every notebook with a prediction (00b, 01-19) in the browser (deck, hidden
# answer, vote, reveal, slider + Run inside the slide); screenshots in test-artifacts/. `make browser`
# presents 03 only.
browser-decks: $(STAMP)
	DLLAB_SMOKE=1 TQDM_DISABLE=1 DLLAB_DECKS=all $(BIN)/python -m pytest -m browser -q \
	  -k presenting tests/test_browser.py

# Handouts for after class: every notebook executed here (full size; QUICK=1 for smoke sizes) and
# rendered as HTML with its outputs, figures and widgets, indexed by the README's table.
handouts: $(STAMP)
	TQDM_DISABLE=1 DLLAB_START_METHOD=$(START_METHOD) \
	  $(BIN)/python scripts/handouts.py $(if $(filter 1 true yes on,$(QUICK)),--quick,)

# Slide metadata for presenting (one rule for every notebook; a test checks it).
slides: $(STAMP)
	$(BIN)/python scripts/slides.py --write

figures: $(STAMP)
	$(BIN)/python scripts/make_figures.py

# The GPU reference figures (needs CUDA; notebooks 06 and 07 show them on CPU-only machines).
# They save their measurements in images/data/: `make_gpu_figures.py --render` redraws from them.
figures-gpu: $(STAMP)
	$(BIN)/python scripts/make_gpu_figures.py

# Whether every figure in images/ was drawn by the scripts as they are now (metadata only, no run).
figures-check: $(STAMP)
	$(BIN)/python scripts/make_figures.py --check; cpu=$$?; \
	  $(BIN)/python scripts/make_gpu_figures.py --check; gpu=$$?; test $$cpu = 0 -a $$gpu = 0

benchmark: $(STAMP)
	$(BIN)/python benchmarks/overhead.py

readme: $(STAMP)
	$(BIN)/python scripts/notebook_table.py --write

strip: $(STAMP)
	$(BIN)/python scripts/strip_outputs.py notebooks/*.ipynb

clean:
	rm -rf $(VENV) results cache test-artifacts handouts
