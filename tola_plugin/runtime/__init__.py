"""Where and how TOLA's inference runs, decided once: device, backend (torch or OpenVINO), precision, and the reason.

A path that we did not write (an OpenVINO stage in a precision, torch bf16 on a CPU, bf16/fp16 on CUDA) serves only
after it has shown, in a child process on this machine, that it computes what the plain fp32 torch route computes
(``qualification.py``); the verdict is cached per machine, runtime versions, precision and model. ``serving.py``
(the planner) turns a request (device, backend, precision) into one ``RuntimePlan`` (``plan.py``), has the path's
backend start it (``torch_backend.py``; ``openvino/``, whose worker process is the only one that loads OpenVINO, so
that its crashes never end the user's process) and installs the stage runner it hands back, and serves batches,
falling back when a path fails.
docs/inference.md, "Qualification".
"""
