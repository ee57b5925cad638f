# Two commands on a fresh machine: `make demo` and `make test`. Both build the .venv first.
# The test tiers (test/README.md): `make lint`, `make test` (the default tier: <= 5 min on 2 cores, each
# test under LOWRL_TEST_LIMIT_S), `make test-integration` (process level), `make test-realtime` (wall-clock
# and learning claims); `make test-jazzy` runs the ROS-dependent tests of the first two tiers on ROS 2
# Jazzy's PyPI wheels (.venv-jazzy, requirements-jazzy.txt). `bash .ci/run` runs them all.
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

PYTEST = -m pytest -q -p no:cacheprovider
DEFAULT_TIER = not integration and not realtime
LINT_TESTS = test/test_lint.py test/test_py310.py test/test_docs_links.py test/test_import_rules.py \
	test/test_node_guards.py test/test_architecture_doc.py

.PHONY: demo test lint test-integration test-realtime test-all test-jazzy venv venv-jazzy bench clean

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
	LOWRL_TEST_LIMIT_S=10 $(BIN)/python $(PYTEST) --durations=10 -m "$(DEFAULT_TIER)" test

lint: $(STAMP)
	$(BIN)/python $(PYTEST) $(LINT_TESTS)

test-integration: $(STAMP)
	$(BIN)/python $(PYTEST) --durations=10 -m "integration and not realtime" test

test-realtime: $(STAMP)
	$(BIN)/python $(PYTEST) --durations=10 -m realtime test

test-all: lint test test-integration test-realtime

test-jazzy: $(STAMP_JAZZY)
	$(VENV_JAZZY)/bin/python -c "import rclpy.node, importlib.metadata as m; print('== rclpy', m.version('rclpy'))"
	LOWRL_TEST_LIMIT_S=10 $(VENV_JAZZY)/bin/python $(PYTEST) --durations=10 -m "ros and not integration and not realtime" test
	$(VENV_JAZZY)/bin/python $(PYTEST) --durations=10 -m "ros and integration and not realtime" test

bench: $(STAMP)
	$(BIN)/lowrl bench inference

clean:
	rm -rf $(VENV) $(VENV_JAZZY) build install log *.egg-info
