# The README's first two commands: `make demo` and `make test`. Both set up .venv on first use.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup demo demo-baseline test clean

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt setup.py tools/setup_env.sh
	bash tools/setup_env.sh $(VENV)

demo: setup
	bash tools/run_demo.sh $(abspath $(PY)) tola

demo-baseline: setup
	bash tools/run_demo.sh $(abspath $(PY)) rrdb

test: setup
	$(PY) -m pytest -q tests

clean:
	rm -rf experiments results tb_logger demo_data
