# One command per job. `make demo` grades sample submissions of the committed course;
# `make test` runs the whole test suite; `make classroom` runs the course on a JupyterHub. Both create .venv on first use.
# No target writes the learner's notebooks/ (`make lab` only adds days it lacks).
#
# The interpreter: PYTHON=/path/to/python if given, else the first of PY_CANDIDATES that runs
# and is a Python from PY_MIN to PY_MAX (pyproject.toml's requires-python; tests/test_packaging.py
# keeps the two in step). A command that exists but does not run (a pyenv shim of a version
# that is not selected) is passed over.
PY_MIN := 3.11
PY_MAX := 3.13
PY_CANDIDATES := python3.13 python3.12 python3.11 python3
comma := ,
PY_IN_RANGE := import sys; sys.exit(not ($(subst .,$(comma),$(PY_MIN)),) <= sys.version_info[:2] <= ($(subst .,$(comma),$(PY_MAX)),))
PYTHON ?= $(shell for p in $(PY_CANDIDATES); do \
	$$p -c '$(PY_IN_RANGE)' >/dev/null 2>&1 && { command -v $$p; break; }; done)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lab build verify check-sync lint clean classroom python site

# Says which Python the venv is made with, or what to install when there is none.
python:
	@test -n "$(PYTHON)" || { echo "error: no Python $(PY_MIN) to $(PY_MAX) found (tried:" \
	  "$(PY_CANDIDATES)). Install one: on Debian 12 or 13 or Ubuntu 24.04" \
	  "'apt-get install python3 python3-venv'; elsewhere 'pyenv install $(PY_MAX)'," \
	  "python.org, or conda (environment.yml). Or name it: make PYTHON=/path/to/python$(PY_MAX)" \
	  "demo" >&2; exit 1; }
	@$(PYTHON) -c '$(PY_IN_RANGE)' >/dev/null 2>&1 || { echo "error: PYTHON=$(PYTHON) is" \
	  "not a Python $(PY_MIN) to $(PY_MAX) that runs ($$($(PYTHON) --version 2>&1 | head -n 1))" >&2; exit 1; }
	@$(PYTHON) -c 'import ensurepip' >/dev/null 2>&1 || { echo "error: $(PYTHON) cannot make" \
	  "a venv: install its venv module (Debian/Ubuntu: apt-get install python3-venv)" >&2; exit 1; }
	@echo "Python: $(PYTHON) ($$($(PYTHON) --version 2>&1 | head -n 1))"

$(STAMP): pyproject.toml
	@$(MAKE) --no-print-directory python PYTHON='$(PYTHON)'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, pinned: the cached CPU build. An unpinned torch downloads gigabytes.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Grades the committed solutions/ and release/ (check-sync proves them current): it rebuilds
# nothing, and never touches the learner's notebooks/.
demo: $(STAMP)
	$(PY) -m autograder demo

test: $(STAMP)
	$(PY) -m ruff check course autograder tests
	$(PY) -m pytest -q

# The course on a JupyterHub on this machine (as root; see docs/instructors.md, "Running a class").
# Ctrl-C stops it, or `python -m autograder classroom stop` from another shell.
classroom: $(STAMP)
	$(PY) -m autograder classroom start $(CLASSROOM_ARGS)

# The course as a static website in site/_build/html: the home page, the 14 days of release/
# (shown as the learner gets them, never run), docs/, the course's figures; offline, with MathJax
# from npm (site/package-lock.json). SITE_REPO_URL=https://github.com/ORG/REPO/blob/main links each
# day to its notebook in the repository (unset: to the copy the site serves). See site/build.py.
site: $(STAMP) site/node_modules/.package-lock.json
	$(PY) site/build.py

site/node_modules/.package-lock.json: site/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "error: make site needs npm for MathJax" \
	  "(Debian/Ubuntu: apt-get install nodejs npm)" >&2; exit 1; }
	cd site && npm ci --no-audit --no-fund

# The learner's own folder (LAB_DIR, default notebooks/, ignored by git): each day is copied from
# release/ once; a newer version of a day is put beside the learner's, never over it. nbgrader's
# JupyterLab extension is off there (autograder/selfcheck/lab): its Validate cannot run the hidden
# tests, which are judged outside the kernel, so it said "Success" for wrong notebooks; the
# notebook's Self-check button runs them.
LAB_DIR ?= notebooks
lab: $(STAMP)
	$(PY) -m autograder workspace --dir '$(LAB_DIR)'
	JUPYTER_CONFIG_PATH='$(CURDIR)/autograder/selfcheck/lab'$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH} \
	  $(VENV)/bin/jupyter lab --notebook-dir='$(LAB_DIR)'

build: $(STAMP)
	$(PY) -m autograder build

verify: $(STAMP)
	$(PY) -m autograder verify

check-sync: $(STAMP)
	$(PY) -m autograder check-sync

# The lint make test runs (pyproject.toml's [tool.ruff] rules). The code keeps its own line
# breaks (hanging indents, aligned shape comments), so `ruff format` is not applied.
lint: $(STAMP)
	$(PY) -m ruff check course autograder tests

clean:
	rm -rf $(VENV) build grading
