"""The OpenVINO backend (the CPU's): ``backend.py`` starts a path, ``client.py`` talks to the worker process
(``worker.py``, the one process that loads OpenVINO), ``stages.py`` caches the model's IR, which ``convert.py`` writes
in a child process. docs/inference.md, "Where OpenVINO runs"."""
