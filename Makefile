# DataLoader Lab: `make lab` to learn, `make test` to check everything.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# JupyterLab refuses to run as root unless told (CI and containers run as root).
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

.PHONY: lab test unit notebooks browser lint figures figures-gpu benchmark readme strip clean

# (Re)create the environment when it is missing or pyproject.toml changed.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e '.[test]'
	touch $(STAMP)

lab: $(STAMP)
	$(BIN)/jupyter lab --ip=127.0.0.1 --notebook-dir=notebooks $(ROOT_FLAG)

test: lint unit notebooks browser

lint: $(STAMP)
	$(BIN)/ruff check helpers tests notebooks benchmarks scripts

unit: $(STAMP)
	$(BIN)/python -m pytest -m "not browser" -q

# Every notebook, as committed, in smoke mode; 300 s per cell at most.
notebooks: $(STAMP)
	DLLAB_SMOKE=1 $(BIN)/python -m pytest --nbmake --nbmake-timeout=300 -q notebooks

browser: $(STAMP)
	DLLAB_SMOKE=1 $(BIN)/python -m pytest -m browser -q

figures: $(STAMP)
	$(BIN)/python scripts/make_figures.py

# The GPU reference figures (needs CUDA; notebooks 03, 05 and 09 show them on CPU-only machines).
figures-gpu: $(STAMP)
	$(BIN)/python scripts/make_gpu_figures.py

benchmark: $(STAMP)
	$(BIN)/python benchmarks/overhead.py

readme: $(STAMP)
	$(BIN)/python scripts/notebook_table.py --write

strip: $(STAMP)
	$(BIN)/python scripts/strip_outputs.py notebooks/*.ipynb

clean:
	rm -rf $(VENV) results test-artifacts
