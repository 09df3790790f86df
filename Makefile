# One command per job. `make demo` builds the course and grades sample submissions;
# `make test` runs the whole test suite; `make classroom` runs the course on a JupyterHub. Both create .venv on first use.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lab build verify check-sync lint clean classroom

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, pinned: the cached CPU build. An unpinned torch downloads gigabytes.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m autograder build
	$(PY) -m autograder demo

test: $(STAMP)
	$(PY) -m ruff check course autograder tests
	$(PY) -m pytest -q

# The course on a JupyterHub on this machine (as root; see README "Running a class").
# Ctrl-C stops it, or `python -m autograder classroom stop` from another shell.
classroom: $(STAMP)
	$(PY) -m autograder classroom start $(CLASSROOM_ARGS)

lab: $(STAMP)
	$(VENV)/bin/jupyter lab --notebook-dir=release

build: $(STAMP)
	$(PY) -m autograder build

verify: $(STAMP)
	$(PY) -m autograder verify

check-sync: $(STAMP)
	$(PY) -m autograder check-sync

lint: $(STAMP)
	$(PY) -m ruff check course autograder tests
	$(PY) -m ruff format --check course autograder tests

clean:
	rm -rf $(VENV) build grading
