# Two commands on a fresh machine: `make demo` and `make test`. Both build the .venv first.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# DDS stays on this machine, on a private domain (tests pick their own per session).
export ROS_AUTOMATIC_DISCOVERY_RANGE := LOCALHOST
export ROS_LOCALHOST_ONLY := 1
export ROS_DOMAIN_ID ?= 61
export PYTHONUNBUFFERED := 1

.PHONY: demo test venv bench clean

venv: $(STAMP)

$(STAMP): requirements.txt setup.py
	@echo "== setting up $(VENV) (pinned packages: requirements.txt)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/lowrl demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider test

bench: $(STAMP)
	$(BIN)/lowrl bench inference

clean:
	rm -rf $(VENV) build install log *.egg-info
