# Two commands on a fresh machine: `make demo` and `make test`. Both build the .venv first.
# `make test-jazzy` runs the same suite on ROS 2 Jazzy's PyPI wheels (.venv-jazzy, requirements-jazzy.txt).
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
VENV_JAZZY := .venv-jazzy
STAMP_JAZZY := $(VENV_JAZZY)/.installed

# DDS stays on this machine, on a private domain (tests pick their own per session).
export ROS_AUTOMATIC_DISCOVERY_RANGE := LOCALHOST
export ROS_LOCALHOST_ONLY := 1
export ROS_DOMAIN_ID ?= 61
export PYTHONUNBUFFERED := 1

.PHONY: demo test test-jazzy venv venv-jazzy bench clean

venv: $(STAMP)

$(STAMP): requirements.txt setup.py
	@echo "== setting up $(VENV) (pinned packages: requirements.txt)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

venv-jazzy: $(STAMP_JAZZY)

$(STAMP_JAZZY): requirements-jazzy.txt setup.py
	@echo "== setting up $(VENV_JAZZY) (ROS 2 Jazzy wheels: requirements-jazzy.txt)"
	$(PYTHON) -m venv $(VENV_JAZZY)
	$(VENV_JAZZY)/bin/pip install -q --upgrade pip
	$(VENV_JAZZY)/bin/pip install -q -r requirements-jazzy.txt
	$(VENV_JAZZY)/bin/pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP_JAZZY)

demo: $(STAMP)
	$(BIN)/lowrl demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=25 test

test-jazzy: $(STAMP_JAZZY)
	$(VENV_JAZZY)/bin/python -c "import rclpy.node, importlib.metadata as m; print('== rclpy', m.version('rclpy'))"
	$(VENV_JAZZY)/bin/python -m pytest -q -p no:cacheprovider --durations=25 test

bench: $(STAMP)
	$(BIN)/lowrl bench inference

clean:
	rm -rf $(VENV) $(VENV_JAZZY) build install log *.egg-info
