# Two commands for a newcomer: `make demo` (install + run the main study on embedded local Ray)
# and `make test` (install + the whole test suite). Both create .venv/ on first use.
PYTHON ?= python3
VENV   ?= .venv
EXTRAS ?= dev,llm,serve,rl,chem,vision
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip

PLANNER ?= .venv-planner

.PHONY: setup demo test test-fast bench clean vulkan planner-venv image image-gpu

# CPU torch first, kept by the constraint file so no later package pulls a CUDA build.
$(VENV)/.installed: pyproject.toml constraints/cpu.txt constraints/offline_assets.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -c constraints/cpu.txt -e ".[$(EXTRAS)]"
	$(PIP) install --quiet --no-deps -r constraints/offline_assets.txt
	touch $@

setup: $(VENV)/.installed

# ManiSkill3's motion planner (mplib 0.1.1) needs numpy < 2; it gets its own venv, used only as a
# subprocess for demonstrations (iclr_ray/rl/maniskill.py).
$(PLANNER)/.installed: constraints/planner.txt
	$(PYTHON) -m venv $(PLANNER)
	$(PLANNER)/bin/python -m pip install --quiet --upgrade pip
	$(PLANNER)/bin/python -m pip install --quiet torch==2.13.0
	$(PLANNER)/bin/python -m pip install --quiet -c constraints/planner.txt mani-skill==3.0.1
	touch $@

planner-venv: $(PLANNER)/.installed

# A CPU Vulkan device for ManiSkill3/SAPIEN (Debian 12: Mesa 25 from bookworm-backports; the stock
# Mesa 22 lavapipe is rejected). Needs root; tests that need it skip without it.
vulkan:
	@if [ ! -f /etc/apt/sources.list.d/bookworm-backports.sources ]; then \
	  printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
	    > /etc/apt/sources.list.d/bookworm-backports.sources; fi
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends -t bookworm-backports \
	  mesa-vulkan-drivers libvulkan1 vulkan-tools > /dev/null

demo: setup
	$(VENV)/bin/iclr-ray run coord_sketch --preset small

test: setup planner-venv
	$(PY) -m pytest

test-fast: setup
	$(PY) -m pytest -m "not slow"

bench: setup
	$(PY) benchmarks/sketch_construction.py

# The image cluster nodes and KubeRay pods start from (Dockerfile; needs docker, not run by tests).
IMAGE ?= iclr-ray
image:
	docker build -t $(IMAGE):2.60.0-cpu .

image-gpu:
	docker build --build-arg BASE=rayproject/ray:2.60.0-py311-gpu --build-arg DEVICE=cuda -t $(IMAGE):2.60.0-gpu .

clean:
	rm -rf $(VENV) $(PLANNER) runs .pytest_cache *.egg-info
