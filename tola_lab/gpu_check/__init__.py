"""The GPU check (docs/training_gpus.md, "The GPU check"): ``make gpu-bundle`` writes one folder that a short GPU
lease with a stock CUDA PyTorch image runs with ``gpu_check.sh REPORT_DIR``; it reports, in one markdown and one
JSON file, whether and how fast TOLA trains and infers on that GPU.

- ``bundle.py``: builds the folder (this package's wheel, the wheels the image lacks, options, tests, data).
- ``run.py``: the check's steps in turn, one report (``report.py``); ``--dry-run`` runs them on the CPU with the
  tiny network. ``environment.py``: the machine and where each imported distribution comes from.
- The steps (``run.STEPS``, in the report's order): ``smoke_step``, ``demo_model_step``, ``memory_step``,
  ``precision_step``, ``inference_step``, ``cuda_tests_step``, ``resume_step``, ``shared_gpu_step``; each in a
  process of its own (``step_child.py``); their option dicts: ``configs.py``.
"""
