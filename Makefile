# make run           the default suite (config/config.yaml; CONFIG=other.yaml for another) and its HTML report
# make test          the test suite
# make unlock        remove the lock a killed run left behind (docs/troubleshooting.md)
# make cost          training jobs, CPU-hours and GPU-hours per experiment of CONFIG, before any job (fedbench/planning/cost_report.py);
#                    CHECK=<results root>: the estimate of every finished run there against its measured wall time;
#                    NUMERICS=bf16+cl+compile: every cell at that training setting (config/throughputs.yaml's `settings`)
# make cost-fit      fit the CPU's overhead constants (config/throughputs.yaml) to the finished runs' CPU time of
#                    FIT="<results root> ..." and print them with the errors before/after; WRITE=1 writes them
# make bench-gpu     engine benchmark of every model family at the papers' client counts on the GPU; refreshes
#                    config/throughputs.yaml (bench-cpu: a few clients on the CPU; BENCH_ARGS="--size tiny" to try it)
# make stale         list finished cells whose code changed since they ran (ALGORITHM=name: one algorithm)
# make rerun-stale   rerun exactly those cells (and the tables)
# make mutation      mutation testing of the library's core with mutmut (docs/mutation.md: 11-60+ minutes per
#                    group on 2 cores); GROUPS=fedmr,femam for some groups; not part of `make test`
# make slurm-local   start a single-node SLURM cluster here (root), run a tiny config through
#                    profiles/slurm, compare with a local run, stop the daemons (docs/cluster.md, "SLURM")
#
# Both create .venv on first use (Python >= 3.11) and re-install fedbench only when
# pyproject.toml changes (stamp file .venv/.installed), so later calls start at once.
# A plain `pip install torch` pulls the CUDA build (several GB); that is expected.

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CORES ?= all
CONFIG ?= config/config.yaml
# Snakemake reads config/config.yaml (the Snakefile's configfile) and then CONFIG over it
CONFIGS := config/config.yaml $(filter-out config/config.yaml,$(CONFIG))
RUN_LOG := .snakemake/log/make_run.txt

.PHONY: run test report unlock stale rerun-stale clean-results slurm-local mutation cost cost-fit bench-gpu bench-cpu

# On failure, a lock left by a killed run gets a plain explanation instead of Snakemake's exception.
run: $(STAMP)
	@mkdir -p $(dir $(RUN_LOG)); set -o pipefail; \
	$(BIN)/snakemake --cores $(CORES) --configfile $(CONFIG) 2>&1 | tee $(RUN_LOG); status=$$?; \
	if [ $$status -ne 0 ] && grep -q "cannot be locked" $(RUN_LOG); then \
	  echo ""; \
	  echo "fedbench: this directory is still locked by an earlier Snakemake run."; \
	  echo "  If that run is still going (ps aux | grep snakemake), wait for it or use another results: root."; \
	  echo "  If it was killed (Ctrl-C twice, kill -9, power loss), remove the stale lock with:  make unlock"; \
	  echo "  then run 'make run' again: jobs the killed run left half-done are redone (--rerun-incomplete)."; \
	fi; \
	[ $$status -eq 0 ] || exit $$status; \
	$(BIN)/snakemake --configfile $(CONFIG) --report reports/fedbench.html

unlock: $(STAMP)
	$(BIN)/snakemake --unlock --configfile $(CONFIG)

cost: $(STAMP)
	$(BIN)/python -m fedbench.planning.cost_report $(if $(NUMERICS),--numerics $(NUMERICS)) $(if $(CHECK),$(addprefix --check ,$(CHECK)),$(CONFIG))

cost-fit: $(STAMP)
	@test -n "$(FIT)" || { echo 'name the results roots: make cost-fit FIT="results/a results/b" [WRITE=1]'; exit 2; }
	$(BIN)/python -m fedbench.planning.cost_report $(addprefix --fit ,$(FIT)) $(if $(WRITE),--write)

bench-gpu: $(STAMP)
	$(BIN)/python benchmarks/throughputs.py --device cuda --size paper $(BENCH_ARGS)

bench-cpu: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python benchmarks/throughputs.py --device cpu --size cpu --threads 1 $(BENCH_ARGS)

stale: $(STAMP)
	$(BIN)/python -m fedbench.planning.stale --configfile $(CONFIGS) $(if $(ALGORITHM),--algorithm $(ALGORITHM))

rerun-stale: $(STAMP)
	@stale="$$($(BIN)/python -m fedbench.planning.stale --paths --configfile $(CONFIGS) $(if $(ALGORITHM),--algorithm $(ALGORITHM)))" \
	  || exit 1; \
	if [ -z "$$stale" ]; then echo "nothing out of date"; exit 0; fi; \
	echo "rerunning: $$stale"; \
	$(BIN)/snakemake --cores $(CORES) --configfile $(CONFIG) --forcerun $$stale

# two workers, each test file on one of them (module fixtures such as the tiny workflow run are built once)
test: $(STAMP)
	$(BIN)/pytest -n 2 --dist loadfile

mutation: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[mutation]'
	$(BIN)/python scripts/mutation.py $(if $(GROUPS),--groups $(GROUPS))

slurm-local: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[slurm]'
	PYTHON=$(BIN)/python scripts/slurm-local $(SLURM_LOCAL_ARGS)

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "fedbench needs Python >= 3.11; run: make PYTHON=python3.11 ...")'
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e '.[test]'
	touch $@

clean-results:
	rm -rf results reports/fedbench.html
