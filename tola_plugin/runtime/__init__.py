"""Where and how TOLA's inference runs, decided once: device, backend (torch or OpenVINO), precision, and the reason.

A path that we did not write (an OpenVINO stage in a precision, torch bf16 on a CPU, bf16/fp16 on CUDA) serves only
after it has shown, in a child process on this machine, that it computes what the plain fp32 torch route computes
(``qualification.py``); the verdict is cached per machine, runtime versions, precision and model. ``serving.py``
turns a request (device, backend, precision) into one ``RuntimePlan`` (``plan.py``), installs the path's stage runner
in the network (``routed_stages.py`` for OpenVINO; ``archs/stage_runner.py`` for torch) and serves batches, falling
back when a path fails; OpenVINO runs in a worker process of its own (``openvino_client.py`` /
``openvino_worker.py``), so its crashes never end the user's process.
docs/inference.md, "Qualification".
"""
