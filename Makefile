# Every target creates .venv when it is missing and installs the package into it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test quick bench coverage fuzz slow clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Byte-code for every module, written even where PYTHONDONTWRITEBYTECODE is set (as on the
# development machine), so each worker process does not compile the engine again
# (docs/performance.md, "Starting a cluster"); only changed modules are recompiled.
# Then the numba kernels into numba's cache (__pycache__), so no worker compiles them on its
# first task (about a minute each, docs/performance.md, "Compiling the kernels once"): 40 s
# on a fresh checkout, 4 s to check them afterwards; a changed kernel module is compiled again.
COMPILE := $(BIN)/python -m compileall -q evalcore flows benchmarks >/dev/null && $(BIN)/python -m evalcore.distributed.warm

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(COMPILE)
	$(BIN)/python -m evalcore.demo

test: $(STAMP)
	$(COMPILE)
	$(BIN)/python -m pytest -q --durations=25

# The tests that need no cluster, Prefect server, browser or evalcore subprocess (markers:
# tests/markers.py), under 3 minutes on 2 cores. EVALCORE_CHECK_MARKERS fails an unmarked
# test that starts one.
quick: $(STAMP)
	$(COMPILE)
	EVALCORE_CHECK_MARKERS=1 $(BIN)/python -m pytest -q --durations=10 -m "not cluster and not prefect and not browser and not cli and not slow"

# BENCH_ARGS for the national study, e.g. BENCH_ARGS="--sections scale --scale-sizes
# 250000,1000000,2000000,4000000" (about 40 minutes on 2 cores; issue 29's targets).
bench: $(STAMP)
	$(COMPILE)
	$(BIN)/python -m benchmarks $(BENCH_ARGS)

# Coverage study of the bootstrap intervals (docs/intervals.md); ~10-20 min on 2 cores.
# The plot needs matplotlib, installed here when missing. COVERAGE_ARGS=--quick: a smoke run.
coverage: $(STAMP)
	$(BIN)/python -c "import matplotlib" 2>/dev/null || $(BIN)/python -m pip install --quiet matplotlib
	$(BIN)/python -m benchmarks.coverage $(COVERAGE_ARGS)

fuzz: $(STAMP)
	HYPOTHESIS_PROFILE=slow $(BIN)/python -m pytest -q -p no:cacheprovider --hypothesis-show-statistics tests/properties/test_fuzz.py

slow: $(STAMP)
	EVALCORE_SLOW=1 $(BIN)/python -m pytest -q -p no:cacheprovider -m slow

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
