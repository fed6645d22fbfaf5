# Every target creates .venv when it is missing and installs the package into it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench fuzz slow clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m evalcore.demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python -m benchmarks

fuzz: $(STAMP)
	HYPOTHESIS_PROFILE=slow $(BIN)/python -m pytest -q -p no:cacheprovider --hypothesis-show-statistics tests/properties/test_fuzz.py

slow: $(STAMP)
	EVALCORE_SLOW=1 $(BIN)/python -m pytest -q -p no:cacheprovider -m slow

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
