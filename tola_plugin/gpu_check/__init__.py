"""The GPU check (docs/training_gpus.md, "The GPU check"): ``make gpu-bundle`` writes one folder that a short GPU
lease with a stock CUDA PyTorch image runs with ``gpu_check.sh REPORT_DIR``; it reports, in one markdown and one
JSON file, whether and how fast TOLA trains and infers on that GPU.

- ``bundle.py``: builds the folder (this package's wheel, the wheels the image lacks, options, tests, data).
- ``run.py``: the check's five steps, one report; ``--dry-run`` runs them on the CPU with the demo backbone.
- ``environment.py`` (what the machine and the imports are), ``steps_*.py`` (the steps), ``report.py``.
"""
