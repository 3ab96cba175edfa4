# Two commands for a fresh machine:  `make run` (the default study)  and  `make test` (the tests).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
CORES  ?= 2
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: run test env dry-run lint analysis clean

env: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

run: env
	$(BIN)/snakemake --cores $(CORES)

test: env
	$(BIN)/python -m pytest -q

dry-run: env
	$(BIN)/snakemake -n

lint: env
	$(BIN)/snakemake --lint

analysis: env
	$(BIN)/snakemake --cores $(CORES) analysis

clean:
	rm -rf results .snakemake
