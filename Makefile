# Two commands for a newcomer: `make demo` (install + run the main study on embedded local Ray)
# and `make test` (install + the whole test suite). Both create .venv/ on first use.
PYTHON ?= python3
VENV   ?= .venv
EXTRAS ?= dev,llm,serve,rl
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip

.PHONY: setup demo test test-fast bench clean

# CPU torch first, kept by the constraint file so no later package pulls a CUDA build.
$(VENV)/.installed: pyproject.toml constraints/cpu.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -c constraints/cpu.txt -e ".[$(EXTRAS)]"
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(VENV)/bin/iclr-ray run coord_sketch --preset small

test: setup
	$(PY) -m pytest

test-fast: setup
	$(PY) -m pytest -m "not slow"

bench: setup
	$(PY) benchmarks/sketch_construction.py

clean:
	rm -rf $(VENV) runs .pytest_cache *.egg-info
