# railab: `make demo` runs the main job, `make test` the whole suite. Both set up first.
VENV    := .venv
PY      := $(VENV)/bin/python
RAILAB  := $(VENV)/bin/railab
DEMO_LAB := labs/rail-optimized/rail-optimized.clab.yml

.PHONY: setup test test-unit demo labs clean

setup:
	@bash scripts/setup.sh

test: setup
	$(PY) -m pytest -ra tests

test-unit: setup
	$(PY) -m pytest -ra tests/unit

# the demo runs on network namespaces: it needs no containerlab build
demo:
	@bash scripts/setup.sh --core
	@bash scripts/demo.sh $(DEMO_LAB)

labs: setup
	$(PY) scripts/gen_labs.py

clean:
	-$(RAILAB) destroy --all
