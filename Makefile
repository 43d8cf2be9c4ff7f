# The README's first two commands: `make demo` and `make test`. Both set up .venv on first use.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup demo demo-baseline test test-isa clean

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt setup.py tools/setup_env.sh
	bash tools/setup_env.sh $(VENV)

demo: setup
	bash tools/run_demo.sh $(abspath $(PY)) tola

demo-baseline: setup
	bash tools/run_demo.sh $(abspath $(PY)) rrdb

test: setup
	$(PY) -m pytest -q tests

# The tests marked `numerics` again with other CPU kernels forced: AVX2 (MKL and oneDNN too) and torch's generic
# kernels. CI runs it after `make test` (docs/testing.md).
test-isa: setup
	ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 $(PY) -m pytest -m numerics tests
	ATEN_CPU_CAPABILITY=default $(PY) -m pytest -m numerics tests

clean:
	rm -rf experiments results tb_logger demo_data
