# The README's first two commands: `make demo` and `make test`. Both set up .venv on first use.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup demo demo-baseline restore-demo web lint test test-end-to-end test-gpu-dry-run test-cuda test-isa margins gpu-carry gpu-bundle clean

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt setup.py tools/setup_env.sh
	bash tools/setup_env.sh $(VENV)

demo: setup
	bash tools/run_demo.sh $(abspath $(PY)) tola

demo-baseline: setup
	bash tools/run_demo.sh $(abspath $(PY)) rrdb

# Lines of aspect 1:1 to 1:20 and a photo restored with tola-infer and the demo model (shipped: no `make demo`
# needed), and the figure of docs/restore.md (docs/restore.md, "Samples and figure").
restore-demo: setup
	[ -d demo_data/restore_samples ] || $(PY) tools/make_restore_samples.py --out demo_data/restore_samples
	$(PY) -m tola_cli.infer -i demo_data/restore_samples/lines -o results/restore_lines --overwrite
	$(PY) -m tola_cli.infer -i demo_data/restore_samples/photo.png -o results/restore_photo --detect --overwrite
	$(PY) tools/plot_restore_figure.py --samples demo_data/restore_samples --out results/restore_figure.png

# The web demo (docs/web.md) at http://127.0.0.1:7860 with the demo model (shipped with the package); options
# through WEB_ARGS, e.g. make web WEB_ARGS="--port 8000" or, for `make demo`'s own model,
# WEB_ARGS="--model experiments/demo_TOLA/TOLA_demo_merged.safetensors".
web: setup
	$(PY) -m tola_cli.web $(WEB_ARGS)

# BasicSR's style (setup.cfg): flake8, isort and yapf must leave the tree unchanged. Seconds; CI runs it first.
LINT_PATHS := tola_plugin tola_lab tola_cli tools tests lint setup.py tola_plugin_hook.py tola_plugin_shim.py
lint: setup
	$(PY) -m flake8 $(LINT_PATHS)
	$(PY) -m isort --check-only --diff $(LINT_PATHS)
	$(PY) -m yapf --diff --recursive $(LINT_PATHS)
	$(PY) lint/line_budget.py
	$(PY) lint/doc_references.py

# Two worker processes (pytest-xdist) that steal queued tests from each other (no idle worker at the end): the suite
# is CPU-bound and CI has 2 cores. OpenVINO runs in worker processes of its own (tola_plugin/runtime), never in a test
# process, so one session holds every test (docs/testing.md).
# Two tiers run apart so that make test stays under 10 minutes on 2 cores; CI runs all three (tests/test_suite_tiers.py):
# the pipelines run end to end through the launchers in processes of their own or a docs page command by command
# (marked end_to_end: tens of seconds each), and the GPU check's carry, bundle and dry runs (marked gpu_dry_run).
test: setup
	$(PY) -m pytest -q -n 2 --dist worksteal -m "not gpu_dry_run and not end_to_end" tests

test-end-to-end: setup
	$(PY) -m pytest -q -n 2 --dist worksteal -m end_to_end tests

test-gpu-dry-run: setup
	$(PY) -m pytest -q -n 2 -m gpu_dry_run tests

# The tests that need a GPU (marked `cuda`): training, 2-rank NCCL DDP (with two GPUs), tola-infer and TOLAPipeline in
# each precision, exact resume, the 200-step route (docs/testing.md). They fail, naming why, where no GPU is usable
# (--require-cuda; make test skips them there). One worker: the GPU is shared.
test-cuda: setup
	$(PY) -m pytest -q -m cuda -rs --require-cuda tests/test_cuda.py

# The GPU check (docs/training_gpus.md, "The GPU check"). gpu-carry: what a lease that sends this checkout carries
# beside it (build/gpu_carry); there: `bash tools/gpu_check.sh REPORT_DIR`. gpu-bundle: one folder to copy to any GPU
# machine with a stock CUDA PyTorch image; there: `bash gpu_check.sh REPORT_DIR`. Wheels are fetched once into the
# user cache (PyPI). GPU_PYTHONS=3.12 (a comma list): the wheels tied to CPython's ABI for those versions only
# (default: 3.10,3.11,3.12).
GPU_CARRY ?= build/gpu_carry
gpu-carry: setup
	$(PY) tools/gpu_bundle.py --checkout --out $(GPU_CARRY)$(if $(GPU_PYTHONS), --pythons $(GPU_PYTHONS))

GPU_BUNDLE ?= build/gpu_bundle
gpu-bundle: setup
	$(PY) tools/gpu_bundle.py --out $(GPU_BUNDLE)$(if $(GPU_PYTHONS), --pythons $(GPU_PYTHONS))

# The tests marked `numerics` again with other CPU kernels forced: AVX2 (MKL and oneDNN too) and torch's generic
# kernels. CI runs it after `make test` (docs/testing.md).
test-isa: setup
	ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 $(PY) -m pytest -q -n 2 -m numerics tests
	ATEN_CPU_CAPABILITY=default $(PY) -m pytest -q -n 2 -m numerics tests

# The margin of every numerical check over a log written by the runs above (TOLA_NUMERICS_LOG=FILE make test
# test-isa); exits 1 below 10x (docs/testing.md, "Margins"). CI runs it on its own log.
NUMERICS_LOG ?= results/numerics.jsonl
margins: setup
	$(PY) tests/numerics.py $(NUMERICS_LOG)

clean:
	rm -rf experiments results tb_logger demo_data
