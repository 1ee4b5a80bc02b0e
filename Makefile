# The two commands: `make demo` and `make test`. Each sets up .venv on a fresh machine first.
PY      := .venv/bin/python
PIP     := .venv/bin/pip
STAMP   := .venv/.installed
# torch first: 2.13.0 is the CPU wheel on disk; an open range would pull a multi-GB CUDA build.
TORCH   ?= torch==2.13.0
# Test workers: one per core of the 2-core reference machine; each test file stays on one
# worker, so a module's fixtures (the calibration programs) are built once. 0 runs in-process.
WORKERS ?= 2

.PHONY: demo test setup bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml setup.py $(wildcard backend/csrc/*/*.cpp backend/csrc/*/*.h)
	test -x $(PY) || python3 -m venv .venv
	$(PIP) install -q --upgrade pip setuptools wheel ninja
	$(PIP) install -q "$(TORCH)" numpy
	$(PIP) install -q --no-build-isolation -e ".[test]"
# TorchTitan for tests/contract/test_torchtitan.py, without its dependencies: its datasets
# pin would downgrade huggingface_hub under transformers, and training never imports
# datasets or wandb; what it does import (spmd_types, tyro) is in the test extra.
	$(PIP) install -q --no-deps "torchtitan==0.3.0"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/gpt/train_gpt.py

test: $(STAMP)
	$(PY) -m pytest -q -n $(WORKERS) --dist loadfile --durations=25 tests

clean:
	rm -rf build .venv *.egg-info backend/*.egg-info
