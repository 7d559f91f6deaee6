# The README's two set-up commands: `make demo` and `make test`. Both create or reuse
# .venv and install what they need. torch comes from constraints.txt (torch==2.13.0,
# a CPU build on these machines); no install step may pull CUDA wheels.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXTRAS ?= dev,torch,tensorboard,dm-env,envlogger,gym,plot,ray,stats,hdf5,rlds,video
STAMP := $(VENV)/.rlarrow-installed
PIP_INSTALL := $(BIN)/python -m pip install --disable-pip-version-check -q -c constraints.txt
PYTEST_ARGS ?=
DEMO_DIR ?= demo-output

.PHONY: demo test test-slow test-all lint docs install bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml constraints.txt Makefile | $(BIN)/python
	$(PIP_INSTALL) torch==2.13.0
	$(PIP_INSTALL) -e '.[$(EXTRAS)]'
	# test-only peers: LeRobot's LeRobotDataset, 0.4.4 (reads v3.0) and 0.3.3 (v2.1, with the
	# datasets 3.6 it needs, in a directory of its own put on PYTHONPATH by the test). lerobot pins
	# torch < 2.11, whose PyPI builds are CUDA: both go in --no-deps, with the packages its dataset
	# code imports and torchvision 0.22.1 (its pyav video backend) without its CUDA dependencies.
	# (Not draccus, which lerobot's training configs need: its wheel installs a top-level `tests`
	# package that hides this project's.) The installs that resolve dependencies come first: one
	# after a --no-deps install makes pip complain of the dependency conflicts of its peers.
	$(PIP_INSTALL) 'datasets>=4,<5' 'huggingface-hub<0.36' jsonlines pandas accelerate 'packaging<26'
	# test-only peer: robomimic's reader, without the packages only its training needs
	$(PIP_INSTALL) --no-deps robomimic==0.3.0 lerobot==0.4.4 torchvision==0.22.1
	# test-only peer: Daft's Delta reader (tests/core/store/test_delta_engines.py). Daft 0.7 pins
	# pyarrow<26, which cannot read null fixed-size lists back (pyproject.toml): without its deps
	$(PIP_INSTALL) --no-deps daft==0.7.26
	$(PIP_INSTALL) --no-deps --upgrade --target $(VENV)/peers/lerobot-0.3.3 lerobot==0.3.3 datasets==3.6.0
	@touch $@

install: $(STAMP)

## Run the main job on generated data and show what it made.
demo: $(STAMP)
	$(BIN)/python -m rlarrow.cli.demo $(DEMO_DIR)

## The test suite without the slow tests (kill loops, large data): a few minutes.
test: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow $(PYTEST_ARGS)

test-all: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

## Every benchmark, one after the other, and benchmarks/RESULTS.md (about 45 minutes on 2 cores; the first run also generates its data).
bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

lint: $(STAMP)
	$(BIN)/ruff check rlarrow tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

## The documentation site with the API reference (mkdocs.yml) in site/; a warning fails it.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) $(DEMO_DIR) site .pytest_cache .mypy_cache .ruff_cache build dist *.egg-info
