# make run    the default suite (config/config.yaml) and its HTML report
# make test   the test suite
#
# Both create .venv on first use (Python >= 3.11) and re-install fedbench only when
# pyproject.toml changes (stamp file .venv/.installed), so later calls start at once.
# A plain `pip install torch` pulls the CUDA build (several GB); that is expected.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CORES ?= all

.PHONY: run test report clean-results

run: $(STAMP)
	$(BIN)/snakemake --cores $(CORES)
	$(BIN)/snakemake --report reports/fedbench.html

test: $(STAMP)
	$(BIN)/pytest

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "fedbench needs Python >= 3.11; run: make PYTHON=python3.11 ...")'
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e '.[test]'
	touch $@

clean-results:
	rm -rf results logs reports/fedbench.html
