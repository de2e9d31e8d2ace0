# pdevision — `make demo` and `make test` are the two set-up commands; each installs what it needs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test test-all lint bench docs dist clean

$(STAMP): pyproject.toml setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -c constraints.txt -e ".[all,test]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/pdevision demo
	$(VENV)/bin/pdevision train --model vheat_micro --output runs/demo --overwrite
	$(VENV)/bin/pdevision eval --checkpoint runs/demo

test: $(STAMP)
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q -m "not slow"

test-all: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks

bench: $(STAMP)
	$(VENV)/bin/pdevision bench

$(VENV)/.docs-installed: $(STAMP)
	$(PY) -m pip install -c constraints.txt -e ".[docs]"
	touch $@

docs: $(VENV)/.docs-installed
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# wheel and sdist in dist/, checked by twine (the package index's own rendering of the description included)
dist: $(STAMP)
	rm -rf dist build
	$(PY) -m build --outdir dist .
	$(VENV)/bin/twine check --strict dist/*

clean:
	rm -rf $(VENV) build dist *.egg-info src/*.egg-info
